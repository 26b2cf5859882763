"""``AUTOTUNE_MATCH=nearest`` ranks other devices' results by similarity, not by recency: the
real device's identity against stored rows of other identities."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import timedelta

import numpy as np
import pytest

from autotune import tune
from autotune.tune import nearest
from autotune.tune.devices import device_key
from autotune.tune.records import utcnow
from autotune.tune.store import ResultStore

from operations.scale import ScaleTemplate


def _rows(context):
    """Rows of other devices for ScaleTemplate(float32), most similar first but oldest first,
    so that recency alone would rank them backwards; each with its own wgs."""
    tuner = tune.tuner_of(ScaleTemplate)
    key = tuner.key(ScaleTemplate, context, np.dtype(np.float32))
    digest = tuner.fingerprint(ScaleTemplate, context, np.dtype(np.float32)).digest
    me = context.device
    backend = context.backend
    like = json.dumps({"device": {"backend": backend, "gpu": me.is_gpu}})
    other_type = json.dumps({"device": {"backend": backend, "gpu": not me.is_gpu}})
    other_platform = "Another platform" if me.platform != "Another platform" else "Yet another"
    # a device unlike this one, told only by its identity (as in rows of older autotunes)
    unlike = (("pthread-Some CPU", "Portable Computing Language") if me.is_gpu
              else ("NVIDIA H100 80GB HBM3", "CUDA"))
    identities = [  # (name, platform, driver, search), nearest first
        (me.name, me.platform, me.driver_version + "-older", ""),
        (me.name, "Other platform", me.driver_version, ""),
        ("Another device, same platform", me.platform, "1.0", ""),
        ("Another device, same kind", other_platform, "1.0", like),
        ("A device of the other type", other_platform, "1.0", other_type),
        (*unlike, "13.0", ""),
    ]
    now = utcnow()
    rows = []
    for i, (name, platform, driver, search) in enumerate(identities):
        rows.append(tune.TuningRecord(
            dataclasses.replace(key, device_name=name, device_platform=platform,
                                driver_version=driver),
            json.dumps({"wgs": 32 << i}), 1e-5, "0", created_at=now - timedelta(hours=10 - i),
            fingerprint=digest, sources=tuner.fingerprint(
                ScaleTemplate, context, np.dtype(np.float32)).sources_json, search=search))
    return key, rows


def test_other_devices_rank_by_likeness_with_recency_last(context):
    key, rows = _rows(context)
    newest_first = sorted(rows, key=lambda r: r.created_at, reverse=True)
    me = device_key(context, "test", "context")
    order = nearest.ranked(newest_first, key, me)
    # the two unlike devices tie: between them the newer comes first
    expected = [r.key.device_name for r in rows[:4]] + [rows[5].key.device_name, rows[4].key.device_name]
    assert [r.key.device_name for _, r in order] == expected
    assert [relaxed for relaxed, _ in order] == [
        "driver version", "platform", "device; same platform",
        "device; same backend and device type", "device", "device"]


@pytest.mark.autotune_database
def test_nearest_on_a_cpu_serves_the_same_platform_cpu_before_a_newer_gpu(context, monkeypatch,
                                                                          caplog):
    if context.device.is_gpu:
        pytest.skip("the CPU case: a GPU's own rows are tested by the ranking test")
    key, rows = _rows(context)
    store = ResultStore.open()
    h100 = dataclasses.replace(rows[-1], created_at=utcnow())  # the newest row of all
    for row in (rows[2], h100):
        store.put(row)
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    with caplog.at_level(logging.WARNING, logger="autotune.tune"):
        assert ScaleTemplate.autotune(context, np.dtype(np.float32)) == {"wgs": 128}
    assert "Another device, same platform" in caplog.text and "(ignoring device; same platform)" \
        in caplog.text
    # nothing on its platform: a CPU of another OpenCL platform before a GPU
    store.delete(function=key.function)
    tune.clear_memo()
    for row in (rows[3], rows[4], h100):
        store.put(row)
    assert ScaleTemplate.autotune(context, np.dtype(np.float32)) == {"wgs": 256}


def test_an_old_row_s_device_kind_is_inferred_from_its_identity():
    key = tune.TuningKey("m.T.autotune", 1, "pthread-AMD EPYC 7B13", "Portable Computing Language",
                         "3.0", "{}")
    cpu = tune.TuningRecord(key, "{}", 1e-5, "0")
    assert nearest.kind_of(cpu) == nearest.DeviceKind("opencl", False)
    cuda = tune.TuningRecord(dataclasses.replace(key, device_name="NVIDIA H200",
                                                 device_platform="CUDA"), "{}", 1e-5, "0")
    assert nearest.kind_of(cuda) == nearest.DeviceKind("cuda", True)
    unknown = tune.TuningRecord(dataclasses.replace(key, device_name="Mystery"), "{}", 1e-5, "0")
    assert nearest.kind_of(unknown) == nearest.DeviceKind("opencl", None)
    recorded = dataclasses.replace(unknown, search='{"device": {"backend": "opencl", "gpu": true}}')
    assert nearest.kind_of(recorded) == nearest.DeviceKind("opencl", True)
