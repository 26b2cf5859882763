"""tune.db.example: opens, matches the current schema, covers every registered template."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from autotune import tune
from autotune.registry import registered_templates
from autotune.tune.store import SCHEMA_VERSION, ResultStore, metadata

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
            tune.validate_parameters(json.loads(row.parameters), template.test_parameters)
            assert row.score > 0
    assert any(r.key.device_platform == "CUDA" for r in rows), "GPU results are missing"
    assert any(r.key.device_platform != "CUDA" for r in rows), "CPU OpenCL results are missing"
    store.dispose()


@pytest.mark.force_autotune
def test_nearest_match_serves_every_warm_key_without_tuning(example, context, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(example))
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    before = len(ResultStore(f"sqlite:///{example}").trials())
    for template in registered_templates():
        for config in template.configurations(context):
            params = template.tuner(template.cls, context, **config)
            tune.validate_parameters(params, template.test_parameters)
    assert len(ResultStore(f"sqlite:///{example}").trials()) == before, "something was tuned"


@pytest.mark.force_autotune
def test_another_devices_parameters_that_do_not_fit_fall_back_to_test(context, monkeypatch, caplog):
    """Nearest matching may serve a GPU's result to a CPU: templates must still construct."""
    import logging

    import numpy as np

    from autotune.tune import TuningKey, TuningRecord, encode_arguments
    from operations.reduce import ReduceTemplate

    if context.backend == "cuda":
        pytest.skip("the foreign parameters here are CUDA ones")
    store = ResultStore.open()
    key = TuningKey("operations.reduce.ReduceTemplate.autotune", ReduceTemplate.autotune_version,
                    "Some GPU", "CUDA", "13.0",
                    encode_arguments({"dtype": np.dtype(np.float32), "op": "sum"}))
    store.put(TuningRecord(key, json.dumps({"wgs": 4096 * 4, "ipt": 4, "groups_per_cu": 2,
                                            "vec": 4, "shuffle": True}), 1e-5, "test"))
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    with caplog.at_level(logging.WARNING):
        template = ReduceTemplate(context, np.float32, "sum")
    assert "do not fit" in caplog.text
    assert template.tuning["shuffle"] is False
    queue = context.create_command_queue()
    x = np.arange(1000, dtype=np.float32)
    assert template.instantiate(queue, 1000)(context.to_device(queue, x)) == x.sum()
