"""Tests of the SQL result store (autotune.tune.store) on SQLite files."""

from __future__ import annotations

import multiprocessing
import pathlib
import sys
import traceback
from datetime import datetime, timedelta, timezone

import platformdirs
import pytest
import sqlalchemy

from autotune.tune.records import TrialRecord, TuningKey, TuningRecord
from autotune.tune.store import (
    DEFAULT_DB_ENV,
    SCHEMA_VERSION,
    ResultStore,
    StoreError,
    database_url,
    default_database_path,
)
from processes import run_together

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def make_key(
    function: str = "ops.Reduce.autotune",
    *,
    version: int = 1,
    device_name: str = "NVIDIA H100",
    device_platform: str = "cuda",
    driver_version: str = "12.4",
    arguments: str = '{"n": 1024}',
) -> TuningKey:
    return TuningKey(function, version, device_name, device_platform, driver_version, arguments)


def make_record(
    key: TuningKey,
    score: float = 1.0,
    *,
    parameters: str = '{"wgs": 64}',
    created_at: datetime = T0,
) -> TuningRecord:
    return TuningRecord(key, parameters, score, package_version="0.1.0", created_at=created_at)


def make_trial(key: TuningKey, parameters: str = '{"wgs": 64}', *, status: str = "ok", created_at: datetime = T0) -> TrialRecord:
    return TrialRecord(key, parameters, status, "", 1.0, 2.0, 3.0, created_at=created_at)


@pytest.fixture
def url(tmp_path: pathlib.Path) -> str:
    return f"sqlite:///{tmp_path / 'tuning.db'}"


@pytest.fixture
def store(url: str):
    result_store = ResultStore(url)
    yield result_store
    result_store.dispose()


# -- locating the database ----------------------------------------------------------------------


def test_default_database_path_is_in_the_user_cache_dir():
    path = default_database_path()
    assert path == pathlib.Path(platformdirs.user_cache_dir("autotune")) / "tuning.db"
    assert path.parent.name == "autotune"


def test_file_path_becomes_absolute_sqlite_url_and_parent_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = database_url("sub/dir/x.db")
    assert url == f"sqlite:///{tmp_path.resolve()}/sub/dir/x.db"
    assert not (tmp_path / "sub").exists(), "naming a database must not create anything"
    with ResultStore(url) as store:
        assert store.records() == []
        assert not (tmp_path / "sub").exists(), "opening and reading must not create anything"
        store.put(make_record(make_key()))
    assert (tmp_path / "sub" / "dir" / "x.db").is_file()

    monkeypatch.setenv("HOME", str(tmp_path))
    assert database_url("~/home.db") == f"sqlite:///{tmp_path.resolve()}/home.db"


def test_url_is_used_as_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    postgres = "postgresql+psycopg://user:secret@host:5432/tuning"
    assert database_url(postgres) == postgres
    assert database_url("sqlite:///rel/x.db") == "sqlite:///rel/x.db"
    with ResultStore("sqlite:///rel/x.db") as store:
        store.put(make_record(make_key()))
    assert (tmp_path / "rel" / "x.db").is_file()
    assert database_url("sqlite://") == "sqlite://"


def test_environment_variable_is_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv(DEFAULT_DB_ENV, str(tmp_path / "a.db"))
    assert database_url() == f"sqlite:///{tmp_path.resolve()}/a.db"
    monkeypatch.setenv(DEFAULT_DB_ENV, "sqlite:///" + str(tmp_path / "b.db"))
    assert database_url() == f"sqlite:///{tmp_path}/b.db"
    assert ResultStore.open().url == f"sqlite:///{tmp_path}/b.db"
    assert database_url(str(tmp_path / "explicit.db")).endswith("/explicit.db")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG_CACHE_HOME is the cache dir on Linux")
@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_environment_means_default_path(tmp_path, monkeypatch, value):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if value is None:
        monkeypatch.delenv(DEFAULT_DB_ENV, raising=False)
    else:
        monkeypatch.setenv(DEFAULT_DB_ENV, value)
    expected = tmp_path / "cache" / "autotune" / "tuning.db"
    assert default_database_path() == expected
    assert database_url() == f"sqlite:///{expected}"
    with ResultStore.open() as store:
        store.put(make_record(make_key()))
    assert expected.is_file()


# -- schema -------------------------------------------------------------------------------------


def test_tables_and_columns(store, url):
    store.put(make_record(make_key()))
    engine = sqlalchemy.create_engine(url)
    try:
        inspector = sqlalchemy.inspect(engine)
        assert {"tuning_results", "tuning_trials", "autotune_schema"} <= set(inspector.get_table_names())
        key_columns = ["function", "version", "device_name", "device_platform", "driver_version", "arguments"]

        result_columns = {c["name"] for c in inspector.get_columns("tuning_results")}
        assert result_columns == {"id", *key_columns, "parameters", "score", "created_at", "package_version",
                                  "fingerprint", "sources", "search", "origin", "gbps", "gflops",
                                  "ci_low", "ci_high", "ties", "spread"}
        unique = inspector.get_unique_constraints("tuning_results")
        assert [u["column_names"] for u in unique] == [key_columns]
        assert ["function"] in [i["column_names"] for i in inspector.get_indexes("tuning_results")]

        trial_columns = {c["name"] for c in inspector.get_columns("tuning_trials")}
        assert trial_columns == {
            "id",
            *key_columns,
            "parameters",
            "status",
            "message",
            "min_seconds",
            "median_seconds",
            "max_seconds",
            "created_at",
            "fingerprint",
            "gbps",
            "gflops",
        }
        assert ["function", "version"] in [i["column_names"] for i in inspector.get_indexes("tuning_trials")]
        assert inspector.get_unique_constraints("tuning_trials") == []

        with engine.connect() as connection:
            versions = connection.execute(sqlalchemy.text("SELECT schema_version FROM autotune_schema")).all()
            assert versions == [(SCHEMA_VERSION,)]
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_reopening_is_idempotent(store, url):
    store.put(make_record(make_key()))
    with ResultStore(url) as again:
        assert again.get(make_key()) is not None
    with ResultStore(url) as again:
        assert len(again.records()) == 1


def test_newer_schema_version_asks_to_upgrade(store, url):
    store.put(make_record(make_key()))
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("UPDATE autotune_schema SET schema_version = :v"), {"v": SCHEMA_VERSION + 1})
    engine.dispose()
    with pytest.raises(StoreError, match="upgrade autotune"):
        ResultStore(url).records()
    with pytest.raises(StoreError, match="upgrade autotune"):
        ResultStore(url).put(make_record(make_key("other")))


def test_garbage_file_is_a_store_error(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not an SQLite database\n" * 200)
    with pytest.raises(StoreError, match=r"tuning database .*garbage\.db.*AUTOTUNE_DB or --db"):
        ResultStore.open(str(path)).records()
    with pytest.raises(StoreError, match=r"tuning database .*garbage\.db.*AUTOTUNE_DB or --db"):
        ResultStore.open(str(path)).put(make_record(make_key()))


def test_directory_instead_of_file_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="tuning database .* is a directory"):
        ResultStore(f"sqlite:///{tmp_path}").get(make_key())


# -- results ------------------------------------------------------------------------------------


def test_put_get_round_trip_with_aware_utc_datetimes(store):
    key = make_key()
    assert store.get(key) is None
    local = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    record = make_record(key, 0.25, parameters='{"wgs": 128, "unroll": 4}', created_at=local)
    store.put(record)

    stored = store.get(key)
    assert stored == record  # equal instants compare equal across time zones
    assert stored.created_at.tzinfo is timezone.utc
    assert stored.created_at == datetime(2024, 1, 2, 1, 4, 5, 678901, tzinfo=timezone.utc)
    assert store.get(make_key(driver_version="other")) is None


def test_naive_datetime_is_rejected(store):
    with pytest.raises(ValueError, match="timezone-aware"):
        store.put(make_record(make_key(), created_at=datetime(2024, 1, 1)))


def test_put_replaces_one_row_per_key(store):
    key = make_key()
    store.put(make_record(key, 2.0, parameters='{"wgs": 32}'))
    newer = make_record(key, 3.0, parameters='{"wgs": 256}', created_at=T0 + timedelta(hours=1))
    store.put(newer)
    assert store.get(key) == newer
    assert store.records() == [newer]


def test_find_matches_device_wildcards_newest_first(store):
    old = make_record(make_key(device_name="A100"), created_at=T0)
    new = make_record(make_key(device_name="H100"), created_at=T0 + timedelta(days=1))
    cl = make_record(make_key(device_name="H100", device_platform="opencl"), created_at=T0 + timedelta(days=2))
    same_time = make_record(make_key(device_name="V100"), created_at=T0)  # inserted after `old`
    unrelated = [
        make_record(make_key(arguments='{"n": 1}')),
        make_record(make_key(version=2)),
        make_record(make_key("other")),
    ]
    for record in [old, new, cl, same_time, *unrelated]:
        store.put(record)

    key = make_key()
    assert store.find(key.function, key.version, key.arguments) == [cl, new, same_time, old]
    assert store.find(key.function, key.version, key.arguments, device_name="H100") == [cl, new]
    assert store.find(key.function, 1, key.arguments, device_name="H100", device_platform="cuda") == [new]
    assert store.find(key.function, 1, key.arguments, driver_version="12.4", device_platform="cuda") == [
        new,
        same_time,
        old,
    ]
    assert store.find(key.function, 1, key.arguments, driver_version="nope") == []


def _merged(store, record, policy="better") -> str:
    counts = store.merge([record], policy)
    return next(name for name in ("added", "replaced", "kept") if getattr(counts, name))


def test_merge_policies(store):
    key = make_key()
    assert _merged(store, make_record(key, 2.0, parameters='{"a": 1}')) == "added"
    assert _merged(store, make_record(key, 3.0, parameters='{"a": 2}')) == "kept"
    assert _merged(store, make_record(key, 2.0, parameters='{"a": 3}')) == "kept"
    assert store.get(key).parameters == '{"a": 1}'
    better = make_record(key, 1.5, parameters='{"a": 4}', created_at=T0 + timedelta(days=1))
    assert _merged(store, better, "keep") == "kept"
    assert _merged(store, better) == "replaced"
    assert store.get(key) == better
    worse = make_record(key, 9.0, parameters='{"a": 5}')
    assert _merged(store, worse, "replace") == "replaced"
    assert store.get(key) == worse
    assert len(store.records()) == 1


def test_merge_is_all_or_nothing(store):
    store.put(make_record(make_key(arguments='{"n": 0}')))
    new = [make_record(make_key(arguments=f'{{"n": {i}}}')) for i in range(1, 4)]
    with pytest.raises(ValueError, match="two results for one key"):
        store.merge([*new, new[0]])
    assert len(store.records()) == 1
    with pytest.raises(ValueError, match="timezone-aware"):  # a bad row found while writing
        store.merge([*new, make_record(make_key(arguments='{"n": 9}'), created_at=datetime(2024, 1, 1))])
    assert len(store.records()) == 1
    counts = store.merge(new)
    assert (counts.added, counts.replaced, counts.kept) == (3, 0, 0)


# -- trials -------------------------------------------------------------------------------------


def test_trials_oldest_first(store):
    key, other = make_key(), make_key("ops.Scale.autotune")
    late = make_trial(key, '{"wgs": 1}', created_at=T0 + timedelta(seconds=2))
    early = make_trial(key, '{"wgs": 2}', created_at=T0)
    failed = TrialRecord(key, '{"wgs": 3}', "compile_error", "error: bad", created_at=T0 + timedelta(seconds=1))
    elsewhere = make_trial(other, created_at=T0 + timedelta(seconds=3))
    for trial in [late, early, failed, elsewhere]:
        store.add_trial(trial)

    assert store.trials(key) == [early, failed, late]
    assert store.trials(function="ops.Scale.autotune") == [elsewhere]
    assert store.trials(function="ops.%") == [early, failed, late, elsewhere]
    assert store.trials() == [early, failed, late, elsewhere]
    assert store.trials(make_key(device_name="other")) == []
    assert store.trials(key)[1].min_seconds is None
    assert store.trials(key)[0].created_at.tzinfo is timezone.utc


def test_the_trials_that_ran_come_fastest_first(shared_url):
    """What a similar lookup reads to serve a trial: the key's ``ok`` trials of one
    fingerprint with a median, the fastest first, on SQLite and on PostgreSQL."""
    key = make_key()

    def trial(parameters, median, status="ok", fingerprint="run", of=key):
        return TrialRecord(of, parameters, status, "", median, median, median,
                           created_at=T0, fingerprint=fingerprint)

    fast, middle, slow = trial('{"wgs": 1}', 1e-3), trial('{"wgs": 2}', 2e-3), trial('{"wgs": 3}', 3e-3)
    others = [trial('{"wgs": 4}', 1e-4, status="compile_error"), trial('{"wgs": 5}', None),
              trial('{"wgs": 6}', 1e-4, fingerprint="another run"), trial('{"wgs": 7}', 0.0),
              trial('{"wgs": 8}', 1e-4, of=make_key(arguments='{"n": 2048}'))]
    with ResultStore(shared_url) as store:
        store.add_trials([slow, others[0], fast, others[1], middle, *others[2:]])
        assert list(store.trials_that_ran(key, "run")) == [fast, middle, slow]
        taken = store.trials_that_ran(key, "run")
        assert next(iter(taken)) == fast  # (taken as far as wanted)
        assert list(store.trials_that_ran(key, "no such run")) == []


def test_invalid_trial_status_is_rejected(store):
    with pytest.raises(ValueError, match="invalid trial status 'great'"):
        store.add_trial(make_trial(make_key(), status="great"))
    assert store.trials() == []


# -- records and delete -------------------------------------------------------------------------


@pytest.fixture
def populated(store):
    keys = [
        make_key("ops.Scale.autotune", device_name="NVIDIA H100", arguments='{"n": 2}'),
        make_key("ops.Scale.autotune", device_name="NVIDIA H100", arguments='{"n": 1}'),
        make_key("ops.Scale.autotune", device_name="AMD MI300", arguments='{"n": 1}'),
        make_key("ops.Reduce.autotune", device_name="NVIDIA A100"),
        make_key("misc.Copy.autotune", device_name="nvidia h100"),
        make_key("ops_Copy", device_name="Intel 100% GPU"),
    ]
    for key in keys:
        store.put(make_record(key))
        store.add_trial(make_trial(key))
    store.add_trial(make_trial(make_key("ops.Interrupted.autotune")))  # a tuning that stored no result
    return store


def _functions_and_devices(records: list[TuningRecord]) -> list[tuple[str, str, str]]:
    return [(r.key.function, r.key.device_name, r.key.arguments) for r in records]


def test_records_filters_and_order(populated):
    assert _functions_and_devices(populated.records()) == [
        ("misc.Copy.autotune", "nvidia h100", '{"n": 1024}'),
        ("ops.Reduce.autotune", "NVIDIA A100", '{"n": 1024}'),
        ("ops.Scale.autotune", "AMD MI300", '{"n": 1}'),
        ("ops.Scale.autotune", "NVIDIA H100", '{"n": 1}'),
        ("ops.Scale.autotune", "NVIDIA H100", '{"n": 2}'),
        ("ops_Copy", "Intel 100% GPU", '{"n": 1024}'),
    ]
    assert len(populated.records(function="ops.Scale.autotune")) == 3
    assert len(populated.records(function="ops.Scale")) == 0  # exact unless it has a %
    assert len(populated.records(function="ops.%")) == 4  # LIKE pattern: not ops_Copy
    assert len(populated.records(function="%.autotune")) == 5
    assert len(populated.records(device="h100")) == 3
    assert len(populated.records(device="100%")) == 1  # the device filter is a literal substring
    assert _functions_and_devices(populated.records(function="ops.%", device="H100")) == [
        ("ops.Scale.autotune", "NVIDIA H100", '{"n": 1}'),
        ("ops.Scale.autotune", "NVIDIA H100", '{"n": 2}'),
    ]


def test_delete_removes_results_and_their_trials(populated):
    assert populated.delete(function="ops.Scale.autotune", device="h100") == 2
    assert len(populated.records(function="ops.Scale.autotune")) == 1
    assert {t.key.device_name for t in populated.trials(function="ops.Scale.autotune")} == {"AMD MI300"}
    assert len(populated.trials()) == 5

    assert populated.delete(function="nothing") == 0
    assert populated.delete(function="ops.%") == 2
    assert [t.key.function for t in populated.trials()] == ["misc.Copy.autotune", "ops_Copy"]
    assert populated.delete() == 2
    assert populated.records() == [] and populated.trials() == []


# -- many processes on one database -------------------------------------------------------------

PROCESSES = 8
OPERATIONS = 48
SHARED_KEYS = 6


def _shared_key(index: int) -> TuningKey:
    return make_key("concurrent.put", arguments=f'{{"n": {index % SHARED_KEYS}}}')


def _merged_key(index: int) -> TuningKey:
    return make_key("concurrent.merge", arguments=f'{{"n": {index % SHARED_KEYS}}}')


def _merge_score(worker: int, operation: int) -> float:
    return ((worker * 7919 + operation * 104729) % 1009) / 1009 + 0.001


def _hammer(url: str, worker: int, start: multiprocessing.synchronize.Barrier, results) -> None:
    """One process of the concurrency test: open a fresh store when all start, then mix writes."""
    try:
        start.wait(timeout=120)
        store = ResultStore(url)
        merges = []
        for operation in range(OPERATIONS):
            kind, slot = operation % 4, operation // 4
            if kind == 0:
                store.put(make_record(_shared_key(slot), score=worker + operation / 100))
            elif kind == 1:
                store.add_trial(make_trial(_shared_key(slot), f'{{"worker": {worker}, "op": {operation}}}'))
            elif kind == 2:
                store.get(_shared_key(slot))
            else:
                record = make_record(_merged_key(slot), score=_merge_score(worker, operation))
                counts = store.merge([record], "better")
                outcome = next(n for n in ("added", "replaced", "kept") if getattr(counts, n))
                merges.append((record.key.arguments, outcome))
        store.dispose()
        results.put((worker, merges, None))
    except BaseException:
        results.put((worker, [], traceback.format_exc()))


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request, tmp_path) -> str:
    """A new shared database: a SQLite file, or a database on the test session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return request.getfixturevalue("postgres_url")


def test_many_processes_write_one_fresh_database(shared_url):
    url = shared_url
    reports = run_together(_hammer, url, PROCESSES, timeout=120)

    with ResultStore(url) as store:
        stored = store.records()
        keys = [r.key for r in stored]
        assert len(keys) == len(set(keys)) == 2 * SHARED_KEYS
        assert {k for k in keys if k.function == "concurrent.put"} == {_shared_key(i) for i in range(SHARED_KEYS)}

        trials = store.trials()
        assert len(trials) == PROCESSES * OPERATIONS // 4
        assert len({t.parameters for t in trials}) == len(trials)

        # merge is atomic: each key was added once and ends with the best score offered.
        outcomes = [outcome for _, merges, _ in reports for outcome in merges]
        assert sum(outcome == "added" for _, outcome in outcomes) == SHARED_KEYS
        best: dict[str, float] = {}
        for worker in range(PROCESSES):
            for operation in range(3, OPERATIONS, 4):
                arguments = _merged_key(operation // 4).arguments
                best[arguments] = min(best.get(arguments, 1e9), _merge_score(worker, operation))
        merged = {r.key.arguments: r.score for r in stored if r.key.function == "concurrent.merge"}
        assert merged == best


# -- older layouts ------------------------------------------------------------------------------

V1_SCHEMA = """
CREATE TABLE tuning_results (id INTEGER NOT NULL, function TEXT NOT NULL, version INTEGER NOT NULL,
    device_name TEXT NOT NULL, device_platform TEXT NOT NULL, driver_version TEXT NOT NULL,
    arguments TEXT NOT NULL, parameters TEXT NOT NULL, score FLOAT NOT NULL,
    created_at DATETIME NOT NULL, package_version TEXT NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_tuning_results_key UNIQUE (function, version, device_name, device_platform,
                                             driver_version, arguments));
CREATE TABLE tuning_trials (id INTEGER NOT NULL, function TEXT NOT NULL, version INTEGER NOT NULL,
    device_name TEXT NOT NULL, device_platform TEXT NOT NULL, driver_version TEXT NOT NULL,
    arguments TEXT NOT NULL, parameters TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL,
    min_seconds FLOAT, median_seconds FLOAT, max_seconds FLOAT, created_at DATETIME NOT NULL,
    PRIMARY KEY (id));
CREATE TABLE autotune_schema (id INTEGER NOT NULL, schema_version INTEGER NOT NULL, PRIMARY KEY (id));
INSERT INTO autotune_schema VALUES (1, 1);
INSERT INTO tuning_results VALUES (1, 'ops.Reduce.autotune', 1, 'NVIDIA H100', 'cuda', '12.4',
    '{"n": 1024}', '{"wgs": 64}', 0.5, '2024-05-01 12:00:00.000000', '0.1.0');
INSERT INTO tuning_trials VALUES (1, 'ops.Reduce.autotune', 1, 'NVIDIA H100', 'cuda', '12.4',
    '{"n": 1024}', '{"wgs": 64}', 'ok', '', 0.4, 0.5, 0.6, '2024-05-01 12:00:00.000000');
"""


def _version_1_file(path: pathlib.Path) -> pathlib.Path:
    import sqlite3

    with sqlite3.connect(path) as connection:
        connection.executescript(V1_SCHEMA)
    connection.close()
    return path


def test_a_version_1_database_is_upgraded_in_place_on_first_use(tmp_path):
    path = _version_1_file(tmp_path / "old.db")
    with ResultStore(f"sqlite:///{path}") as store:
        (row,) = store.records()
        assert row.key == make_key() and row.score == 0.5 and row.created_at == T0
        assert row.fingerprint == "" and row.origin == "offline" and row.gbps is None
        assert store.trials()[0].median_seconds == 0.5
        store.put(make_record(make_key(arguments='{"n": 2}')))
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        assert connection.execute(sqlalchemy.text("SELECT schema_version FROM autotune_schema")).scalar() == SCHEMA_VERSION
        columns = {c["name"] for c in sqlalchemy.inspect(connection).get_columns("tuning_results")}
        assert {"fingerprint", "sources", "search", "origin", "gbps", "gflops"} <= columns
    engine.dispose()


def test_a_version_1_database_opened_read_only_is_read_as_it_is(tmp_path):
    path = _version_1_file(tmp_path / "old.db")
    before = path.read_bytes()
    with ResultStore(f"sqlite:///{path}", read_only=True) as store:
        (row,) = store.records()
        assert row.key == make_key() and row.fingerprint == ""
        assert len(store.trials()) == 1 and store.is_autotune_database()
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
