"""``autotune.integrations.triton`` with real Triton: what it reads from a ``@triton.jit``
function and ``triton.Config`` (where Triton is installed), and real launches on a GPU (where
torch sees one): a vector add with 8 configurations timed once, served to a new process from
the database, partly re-timed when its list changes, wholly when its source does.

The storage logic itself is tested without Triton in ``tests/test_triton_store.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="needs the triton extra: pip install -e '.[triton]'")

import triton  # noqa: E402

from autotune.integrations.triton import (autotune, config_parameters, key_value,  # noqa: E402
                                          source_digest)
from autotune.tune.store import ResultStore  # noqa: E402
from triton_kernels import write_module  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512, 1024) for w in (2, 4)]


def gpu() -> str | None:
    """Why real launches cannot run here, or None."""
    try:
        import torch
    except ImportError:
        return "no torch"
    if not torch.cuda.is_available():
        return "torch sees no GPU"
    return None


needs_gpu = pytest.mark.skipif(gpu() is not None, reason=f"needs a GPU that torch and Triton see "
                               f"(Triton's CPU interpreter needs torch too): {gpu()}")


@pytest.fixture
def kernels(tmp_path):
    return write_module(tmp_path, f"kernels_{tmp_path.name}")


# -- what is read from Triton's objects (no GPU) ------------------------------------------------


def test_a_config_is_stored_as_its_kwargs_and_launch_options():
    config = triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=8, num_stages=3)
    parameters = config_parameters(config)
    assert parameters["BLOCK_M"] == 64 and parameters["BLOCK_N"] == 32
    assert parameters["num_warps"] == 8 and parameters["num_stages"] == 3
    assert None not in parameters.values()


def test_the_source_digest_follows_the_kernel_and_the_functions_it_calls(tmp_path):
    one = write_module(tmp_path, "kernels_one")
    same = write_module(tmp_path, "kernels_same", padding=7)  # moved, not changed
    edited = write_module(tmp_path, "kernels_edited", factor="3")  # a helper it calls changed
    assert source_digest(one.add_kernel) == source_digest(same.add_kernel)
    assert source_digest(one.add_kernel) != source_digest(edited.add_kernel)
    assert source_digest(one.add_kernel) != source_digest(one.accumulate_kernel)
    assert source_digest(one.accumulate_kernel) == source_digest(edited.accumulate_kernel)


def test_the_stored_name_is_the_kernels_qualified_name(kernels):
    tuned = autotune(CONFIGS, key=["n"])(kernels.add_kernel)
    assert tuned.name == f"triton.{kernels.__name__}.add_kernel"
    assert tuned.arg_names == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
    assert autotune(CONFIGS, key=["n"], name="triton.add")(kernels.add_kernel).name == "triton.add"


@pytest.mark.parametrize("make, error, message", [
    (lambda k: autotune(CONFIGS, key=["size"])(k.add_kernel), ValueError,
     r"key: size not among the kernel's arguments \(x_ptr, y_ptr, out_ptr, n, BLOCK\)"),
    (lambda k: autotune(CONFIGS, key=["n"], reset_to_zero=["total"])(k.add_kernel), ValueError,
     "reset_to_zero: total not among"),
    (lambda k: autotune(CONFIGS, key="n")(k.add_kernel), TypeError, "key must be a list"),
    (lambda k: autotune(CONFIGS, key=["n"])(lambda x: x), TypeError,
     "autotune decorates a @triton.jit function"),
    (lambda k: autotune(CONFIGS + CONFIGS[:1], key=["n"])(k.add_kernel), ValueError,
     r"configs\[8\] repeats configs\[0\]"),
    (lambda k: autotune([], key=["n"])(k.add_kernel), ValueError, "at least one configuration"),
    (lambda k: autotune(CONFIGS, key=["n"], prune_configs_by={"perf_model": len, "top_k": 2})(
        k.add_kernel), ValueError, "perf_model, top_k not supported"),
    (lambda k: autotune(CONFIGS, key=["n"], version=-1)(k.add_kernel), ValueError,
     "version must be a non-negative int"),
])
def test_bad_declarations_are_one_clear_error(kernels, make, error, message):
    with pytest.raises(error, match=message):
        make(kernels)


def test_key_values_are_numbers_strings_or_dtype_names():
    import numpy as np

    assert key_value("n", 4096) == 4096 and key_value("mode", "fast") == "fast"
    assert key_value("n", np.int64(7)) == 7
    assert key_value("dtype", triton.language.float16) == "fp16"
    with pytest.raises(ValueError, match="key argument 'x' is a ndarray; key on numbers"):
        key_value("x", np.zeros(3))


@pytest.mark.parametrize("prefetch", [True, False])
def test_decoration_pays_tritons_per_process_start_ahead_of_the_first_launch(tmp_path, prefetch):
    # a new process: Triton's digest of its own installation is computed once per process
    program = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from triton_kernels import write_module\n"
        "from autotune.integrations import triton as ours\n"
        "module, name = next((m, n) for m, n in ours._START_DIGESTS\n"
        "                    if hasattr(importlib.import_module(m), n))\n"
        "key = getattr(importlib.import_module(module), name)\n"
        "before = key.cache_info().currsize\n"
        f"k = write_module(__import__('pathlib').Path({str(tmp_path)!r}), 'prefetched')\n"
        "import triton\n"
        f"ours.autotune([triton.Config({{'BLOCK': 128}})], key=['n'], prefetch={prefetch})"
        "(k.add_kernel)\n"
        "started = ours._start\n"
        "started is not None and started.join(120)\n"
        "print(json.dumps([before, key.cache_info().currsize, started is not None]))\n")
    before, after, started = run_python(program, tmp_path / "cache")
    assert before == 0
    assert (after, started) == ((1, True) if prefetch else (0, False))


def run_python(program: str, cache: Path) -> list:
    """The last line of ``program``'s output, as JSON, run in a new process whose user cache
    folder (where the digest of Triton's installation is remembered) is ``cache``."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=path,
                                             XDG_CACHE_HOME=str(cache)), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_new_process_binds_the_remembered_digest_of_tritons_installation(tmp_path):
    program = (
        "import importlib, json\n"
        "from autotune.integrations import triton as ours\n"
        "module, name = next((m, n) for m, n in ours._START_DIGESTS\n"
        "                    if hasattr(importlib.import_module(m), n))\n"
        "key = getattr(importlib.import_module(module), name)\n"
        "ours.warm_triton_start().join(120)\n"
        "bound = getattr(importlib.import_module(module), name)\n"
        "print(json.dumps([key.cache_info().currsize, bound is key, bound(), key()]))\n")
    computed, same, bound, real = run_python(program, tmp_path)
    assert (computed, same) == (1, True)  # the first process hashes Triton's files itself
    assert (tmp_path / "autotune" / "triton_start.json").is_file()
    computed, same, bound, real_again = run_python(program, tmp_path)
    assert (computed, same) == (0, False)  # the next binds the remembered digest instead
    assert bound == real == real_again


# -- real launches -------------------------------------------------------------------------------


def launch(tuned, n: int = 1 << 20, dtype: str = "float32"):
    import torch

    x = torch.rand(n, device="cuda", dtype=getattr(torch, dtype))
    y = torch.rand(n, device="cuda", dtype=getattr(torch, dtype))
    out = torch.empty_like(x)
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    torch.cuda.synchronize()
    return x, y, out


@needs_gpu
def test_a_kernel_is_timed_once_and_served_to_a_new_process(tmp_path, kernels):
    import torch

    url = str(tmp_path / "t.db")
    tuned = autotune(CONFIGS, key=["n"], database=url)(kernels.add_kernel)
    x, y, out = launch(tuned)
    torch.testing.assert_close(out, 2 * x + y)
    choice = tuned.last_choice
    assert choice.how == "benchmark" and sorted(choice.timed) == list(range(8))
    assert tuned.best_config is CONFIGS[choice.index]
    launch(tuned)
    assert tuned.last_choice is choice  # the same key: this process's cache, nothing looked up
    [record] = ResultStore.open(url).records()
    assert json.loads(record.key.arguments) == {"dtypes": ["torch.float32"] * 3, "n": 1 << 20}
    assert record.key.device_name == torch.cuda.get_device_name()
    assert record.key.driver_version.startswith(f"triton {triton.__version__}")
    assert len(ResultStore.open(url).trials(record.key)) == 8

    program = (
        "import json, sys, torch, triton\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from triton_kernels import write_module\n"
        "from autotune.integrations.triton import autotune\n"
        f"k = write_module(__import__('pathlib').Path({str(tmp_path)!r}), {kernels.__name__!r})\n"
        "configs = [triton.Config({'BLOCK': b}, num_warps=w) for b in (128, 256, 512, 1024) "
        "for w in (2, 4)]\n"
        f"t = autotune(configs, key=['n'], database={url!r})(k.add_kernel)\n"
        "n = 1 << 20\n"
        "x = torch.rand(n, device='cuda'); y = torch.rand(n, device='cuda')\n"
        "out = torch.empty_like(x)\n"
        "t[lambda meta: (triton.cdiv(n, meta['BLOCK']),)](x, y, out, n)\n"
        "torch.testing.assert_close(out, 2 * x + y)\n"
        "print(json.dumps([t.last_choice.how, t.last_choice.index, list(t.last_choice.timed)]))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["database", choice.index, []]


@needs_gpu
def test_a_changed_list_times_only_its_new_configurations(tmp_path, kernels):
    url = str(tmp_path / "t.db")
    launch(autotune(CONFIGS, key=["n"], database=url)(kernels.add_kernel))
    grown = CONFIGS + [triton.Config({"BLOCK": 2048}, num_warps=8),
                       triton.Config({"BLOCK": 64}, num_warps=1)]
    tuned = autotune(grown, key=["n"], database=url)(kernels.add_kernel)
    launch(tuned)
    assert sorted(tuned.last_choice.timed) == [8, 9] and tuned.last_choice.reused == 8
    other = autotune(grown, key=["n"], database=url)(kernels.add_kernel)
    launch(other, dtype="float16")  # another key (the dtypes): timed in full
    assert sorted(other.last_choice.timed) == list(range(10))


@needs_gpu
def test_a_changed_source_times_everything_again(tmp_path, kernels):
    import torch

    url = str(tmp_path / "t.db")
    launch(autotune(CONFIGS, key=["n"], database=url, name="triton.add")(kernels.add_kernel))
    edited = write_module(tmp_path, "kernels_edited", factor="3")
    tuned = autotune(CONFIGS, key=["n"], database=url, name="triton.add")(edited.add_kernel)
    x, y, out = launch(tuned)
    torch.testing.assert_close(out, 3 * x + y)
    assert sorted(tuned.last_choice.timed) == list(range(8)) and tuned.last_choice.reused == 0


@needs_gpu
def test_reset_to_zero_leaves_one_launchs_result(tmp_path, kernels):
    import torch

    n = 1 << 16
    tuned = autotune(CONFIGS, key=["n"], reset_to_zero=["total_ptr"],
                     database=str(tmp_path / "t.db"))(kernels.accumulate_kernel)
    x = torch.rand(n, device="cuda")
    total = torch.zeros_like(x)
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, total, n)
    torch.cuda.synchronize()
    assert tuned.last_choice.how == "benchmark"
    torch.testing.assert_close(total, x)  # the benchmark's many launches left nothing behind


@needs_gpu
def test_restore_value_and_a_served_launch_leave_the_arguments_as_given(tmp_path, kernels):
    """Timing with ``restore_value`` puts the tensor back before the real launch; a launch
    served from the database times nothing and so zeroes nothing (``reset_to_zero``)."""
    import torch

    n, url = 1 << 16, str(tmp_path / "t.db")
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    x = torch.rand(n, device="cuda")
    total = torch.ones_like(x)
    timed = autotune(CONFIGS, key=["n"], restore_value=["total_ptr"], database=url,
                     name="triton.accumulate")(kernels.accumulate_kernel)
    timed[grid](x, total, n)
    torch.cuda.synchronize()
    assert timed.last_choice.how == "benchmark"
    torch.testing.assert_close(total, 1 + x)
    served = autotune(CONFIGS, key=["n"], reset_to_zero=["total_ptr"], database=url,
                      name="triton.accumulate")(kernels.accumulate_kernel)
    total = torch.ones_like(x)
    served[grid](x, total, n)
    torch.cuda.synchronize()
    assert served.last_choice.how == "database"
    torch.testing.assert_close(total, 1 + x)
