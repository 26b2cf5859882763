"""tune.db.example: opens, matches the current schema, covers every registered template."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from autotune import tune
from autotune.tune.registry import registered_templates
from autotune.tune.store import SCHEMA_VERSION, ResultStore
from autotune.tune.store.sql import metadata

EXAMPLE = Path(__file__).resolve().parents[1] / "tune.db.example"


@pytest.fixture
def example(tmp_path) -> Path:
    copy = tmp_path / "tune.db.example"  # never write to the committed file
    shutil.copy(EXAMPLE, copy)
    return copy


def test_schema_matches_the_current_tables(example):
    engine = sa.create_engine(f"sqlite:///{example}")
    inspector = sa.inspect(engine)
    for table in metadata.sorted_tables:
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        assert columns == {c.name for c in table.columns}, table.name
    with engine.connect() as conn:
        assert conn.execute(sa.text("select schema_version from autotune_schema")).scalar() == SCHEMA_VERSION
    engine.dispose()


def test_every_registered_template_has_valid_rows(example):
    store = ResultStore(f"sqlite:///{example}")
    rows = store.records()
    assert rows
    for template in registered_templates():
        function = template.function
        mine = [r for r in rows if r.key.function == function]
        assert mine, f"tune.db.example has no rows for {template.name}; rerun warm and import"
        for row in mine:
            assert tune.validation.record_problem(row, template.test_parameters) is None, row
    assert any(r.key.device_platform == "CUDA" for r in rows), "GPU results are missing"
    assert any(r.key.device_platform != "CUDA" for r in rows), "CPU OpenCL results are missing"
    store.dispose()


def test_every_row_is_fresh_for_the_current_kernels(example):
    """A row tuned against other kernel sources (or an older space version) is never served:
    a change to a template, an include or the portability header must come with its rows
    re-tuned (or removed, and the README saying so)."""
    from autotune.cli.results import status_text

    store = ResultStore(f"sqlite:///{example}")
    templates = {t.function: t for t in registered_templates()}
    current: dict = {}
    stale = [f"{r.key.function.rsplit('.', 2)[-2]} on {r.key.device_name} "
             f"{r.key.arguments[:60]}: {status}"
             for r in store.records() if (status := status_text(r, templates, current)) != "fresh"]
    store.dispose()
    assert not stale, f"{len(stale)} rows of tune.db.example are not fresh: " + "; ".join(stale[:5])


@pytest.mark.autotune_database
def test_nearest_match_serves_every_warm_key_without_tuning(example, context, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(example))
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    before = len(ResultStore(f"sqlite:///{example}").trials())
    for template in registered_templates():
        for config in template.configurations(context):
            params = template.tuner(template.cls, context, **config)
            tune.encoding.validate_parameters(params, template.test_parameters)
    assert len(ResultStore(f"sqlite:///{example}").trials()) == before, "something was tuned"


@pytest.mark.autotune_database
def test_nearest_skips_another_devices_parameters_that_do_not_fit(context, monkeypatch, caplog):
    """Nearest matching may find a GPU's result for a CPU: a row that does not fit this device
    is skipped for the next candidate, never compiled."""
    import logging

    import numpy as np

    from autotune.tune import TuningKey, TuningRecord
    from autotune.tune.encoding import encode_arguments
    from operations.reduce import ReduceTemplate

    if context.backend == "cuda":
        pytest.skip("the foreign parameters here are CUDA ones")
    store = ResultStore.open()
    arguments = encode_arguments({"dtype": np.dtype(np.float32), "op": "sum"})
    function = "operations.reduce.ReduceTemplate.autotune"
    version = ReduceTemplate.autotune_version
    unfit = TuningKey(function, version, "Some GPU", "CUDA", "13.0", arguments)
    store.put(TuningRecord(unfit, json.dumps({"wgs": 4096 * 4, "ipt": 4, "groups_per_cu": 2,
                                              "vec": 4, "shuffle": True}), 1e-5, "test"))
    fits = TuningKey(function, version, "Older CPU", "Portable Computing Language", "1", arguments)
    space = ReduceTemplate.autotune_space(context, np.float32, "sum")
    good = space.configurations()[-1]
    store.put(TuningRecord(fits, json.dumps(good), 1e-3, "test",
                           created_at=datetime.now(timezone.utc) - timedelta(days=1)))
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        template = ReduceTemplate(context, np.float32, "sum")
    assert "skipping the result" in caplog.text and "Some GPU" in caplog.text
    assert template.tuning == good
    queue = context.create_command_queue()
    x = np.arange(1000, dtype=np.float32)
    assert template.instantiate(queue, 1000)(context.to_device(queue, x)) == x.sum()
