"""A team's shared database: a real PostgreSQL server, started by the tests (``postgres_url``).

Tuning into it, many processes tuning into it at once, and every command of the CLI against it.
The store's own many-process test runs on it too (``tests/test_store.py``).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import sqlalchemy

from autotune import tune
from autotune.tune.store import ResultStore
from processes import run_together
from test_cli import run

TESTS = Path(__file__).parent
FAKE = "toy_templates:FakeTimedTemplate"
PROCESSES = 8
SHARED_SIZES = (100, 101)


def _result_rows(url: str) -> list[tuple]:
    """The key cells of every row of ``tuning_results``, read with plain SQL."""
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(sqlalchemy.text(
            "SELECT function, version, device_name, device_platform, driver_version, arguments "
            "FROM tuning_results")).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def test_warm_into_postgres_then_served_without_tuning(capsys, postgres_url):
    code, out, _ = run(capsys, "warm", "scale", "--db", postgres_url, "--quiet")
    assert code == 0, out
    tuned = sum(1 for line in out.splitlines() if line.lstrip().startswith("scale") and " tuned " in line)
    assert tuned >= 2, out
    # a second warm finds every key fresh in the server's rows: nothing is tuned again
    code, out, _ = run(capsys, "warm", "scale", "--db", postgres_url, "--quiet")
    assert code == 0 and f": 0 tuned, {tuned} stored, 0 failed" in out, out
    stored = ResultStore(postgres_url).records()
    assert len(stored) == tuned and all(r.fingerprint and r.gbps for r in stored)
    assert len(_result_rows(postgres_url)) == tuned


def _tune_sizes(url: str, worker: int, start, results) -> None:
    """One process: wait for all, then tune a key of its own and the keys every process tunes."""
    try:
        sys.path.insert(0, str(TESTS))
        from test_trust import StandIn
        from toy_templates import FakeTimedTemplate

        start.wait(timeout=120)
        chosen = {}
        with tune.use_database(url):
            for size in (1000 + worker, *SHARED_SIZES):
                chosen[size] = FakeTimedTemplate.autotune(StandIn(), size)
        results.put((worker, chosen, None))
    except BaseException:
        results.put((worker, {}, traceback.format_exc()))


def test_eight_processes_tune_distinct_and_identical_keys(postgres_url):
    reports = run_together(_tune_sizes, postgres_url, PROCESSES)
    # every process got the best configuration (block=3: 1 us) for every key
    assert all(chosen == {s: {"block": 3} for s in chosen} and len(chosen) == 3
               for _, chosen, _ in reports)
    rows = _result_rows(postgres_url)
    assert len(rows) == len(set(rows)) == PROCESSES + len(SHARED_SIZES), rows
    sizes = sorted(json.loads(r[5])["size"] for r in rows)
    assert sizes == sorted([*SHARED_SIZES, *(1000 + w for w in range(PROCESSES))])
    assert {r.parameters for r in ResultStore(postgres_url).records()} == {'{"block":3}'}


def test_cli_show_export_import_report_against_postgres(capsys, postgres_url, tmp_path):
    local = tmp_path / "local.db"
    code, out, _ = run(capsys, "warm", "--db", local, "--template", FAKE, "--quiet",
                       "FakeTimedTemplate")
    assert code == 0, out
    # import counts are what happened on the server
    code, out, _ = run(capsys, "import", local, "--db", postgres_url)
    assert code == 0 and "3 results" in out and ": 3 added, 0 replaced, 0 kept" in out, out
    code, out, _ = run(capsys, "import", local, "--db", postgres_url)
    assert code == 0 and ": 0 added, 0 replaced, 3 kept" in out, out
    code, out, _ = run(capsys, "import", local, "--db", postgres_url, "--on-conflict", "replace")
    assert code == 0 and ": 0 added, 3 replaced, 0 kept" in out, out
    assert len(_result_rows(postgres_url)) == 3

    code, out, _ = run(capsys, "show", "--db", postgres_url)
    assert code == 0 and out.count("FakeTimedTemplate") == 3 and out.count("block=3") == 3, out

    exported = tmp_path / "team.json"
    code, _, err = run(capsys, "export", "--db", postgres_url, "--out", exported)
    assert code == 0 and "exported 3 results" in err
    rows = json.loads(exported.read_text())
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert len(rows) == 3
    # the export goes back into a new SQLite file with the same rows
    copy = tmp_path / "copy.db"
    code, out, _ = run(capsys, "import", exported, "--db", copy)
    assert code == 0 and ": 3 added" in out, out
    assert ({(r.key, r.parameters) for r in ResultStore(f"sqlite:///{copy}").records()}
            == {(r.key, r.parameters) for r in ResultStore(postgres_url).records()})

    # imports carry results, not trials: tune on the server itself for the report's pictures
    code, out, _ = run(capsys, "warm", "--db", postgres_url, "--template", FAKE, "--quiet",
                       "--force", "FakeTimedTemplate")
    assert code == 0 and "3 tuned" in out, out
    code, out, _ = run(capsys, "report", "--db", postgres_url, "--out", tmp_path / "report")
    assert code == 0 and "3 results, 3 pictures" in out, out
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert page.count("<img ") == 3 and "postgresql" in page and "3.00x" in page

    code, out, _ = run(capsys, "clear", "--db", postgres_url, "--yes")
    assert code == 0 and "deleted 3" in out
    assert _result_rows(postgres_url) == []
