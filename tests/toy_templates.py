"""Small tuned templates used by the tuner tests (real kernels, counted generate calls)."""

from __future__ import annotations

import enum
from collections import Counter
from pathlib import Path

import numpy as np

from autotune import accel, tune

KERNEL = Path(__file__).with_name("kernels") / "toy.mako"

#: An NVIDIA H200 as the device layer describes it: spaces and restrictions that depend only on
#: the device are checked against it on machines without one.
H200 = accel.DeviceIdentity("cuda", "NVIDIA H200", "CUDA", "13.0", (9, 0), 132, 141 * 2**30, 1024,
                            48 * 1024, True, 32, True)


class DescribedContext:
    """What a template's space functions read of a context (its device and backend), for a
    device described rather than present."""

    def __init__(self, device: accel.DeviceIdentity, backend: str):
        self.device, self.backend = device, backend
calls: Counter = Counter()


class Flavour(enum.Enum):
    PLAIN = "plain"
    FANCY = "fancy"


class Protocol:
    """What the template protocol asks of a template that ``warm --template`` loads."""

    autotune_version = 0
    autotune_sources: tuple = ()

    def instantiate(self, queue):
        return lambda: None


class ToyTemplate:
    """y = 2 x; the space mixes good, failing and skipped configurations."""

    autotune_version = 1
    autotune_sources = (KERNEL,)

    def __init__(self, context, dtype=np.float32, flavour=Flavour.PLAIN, shape=(4, 4),
                 tuning=None):
        if tuning is None:
            tuning = self.autotune(context, dtype, flavour, shape=shape)
        self.tuning = tuning

    @classmethod
    @tune.autotuner(test={"wgs": 64, "mode": "good"})
    def autotune(cls, context, dtype, flavour, shape=(4, 4), extra=None):
        queue = context.create_tuning_command_queue()
        n = 4096

        def generate(wgs, mode):
            calls[cls.__name__] += 1
            if mode == "skip":
                return None
            if mode == "invalid":
                raise tune.InvalidConfiguration("this mode is never valid")
            if mode == "broken":
                program = context.build(KERNEL, {"wrong": False, "factor": "2.0f +"})
            else:
                program = context.build(KERNEL, {"wrong": mode == "wrong", "factor": "2.0f"})
            kernel = program.get_kernel("toy")
            size = wgs * 1024 if mode == "huge" else -(-n // wgs) * wgs
            x = context.to_device(queue, np.arange(n, dtype=np.float32))
            y = context.allocate(n, np.float32)

            def run():
                queue.enqueue_kernel(kernel, [y, x, np.uint32(n)], size, wgs * (1024 if mode == "huge" else 1))

            def check():
                return np.array_equal(y.get(queue), 2 * np.arange(n, dtype=np.float32))

            if mode == "crash":
                raise RuntimeError("something unexpected")
            return tune.make_measure(queue, run, check)

        return tune.autotune(generate, wgs=[32, 64], mode=["good", "skip", "invalid", "broken",
                                                            "wrong", "huge", "crash"])


class VersionedToy(ToyTemplate):
    autotune_version = 2


class FailingTemplate(Protocol):
    """Nothing in this space works."""

    autotune_sources = (KERNEL,)

    @classmethod
    def autotune_space(cls, context, kinds):
        return tune.Space({"wgs": list(range(6))})

    @classmethod
    @tune.autotuner(test={"wgs": 64})
    def autotune(cls, context, kinds):
        def generate(wgs):
            kind = kinds[wgs % len(kinds)]
            if kind == "invalid":
                raise tune.InvalidConfiguration(f"wgs {wgs} invalid")
            if kind == "compile":
                context.build(KERNEL, {"wrong": False, "factor": "}"})
            raise ValueError(f"plain failure for {wgs}")

        return tune.autotune(generate)


class FakeTimedTemplate(Protocol):
    """A template with its own measure (no device work): fast, for many-process tests."""

    @classmethod
    def autotune_space(cls, context, size):
        return tune.Space({"block": [1, 2, 3, 4, 5]})

    @classmethod
    @tune.autotuner(test={"block": 1})
    def autotune(cls, context, size):
        def generate(block):
            calls["fake"] += 1
            cost = abs(block - 3) + 1.0

            def measure(iterations):
                return cost * 1e-6

            return measure

        return tune.autotune(generate)


FakeTimedTemplate.warm_configurations = [{"size": s} for s in (1, 2, 3)]
FailingTemplate.warm_configurations = [{"kinds": ("plain",)}]


class SlowTemplate(Protocol):
    """Each key takes a while to tune, and every generate call is logged to a file."""

    @classmethod
    def autotune_space(cls, context, index):
        return tune.Space({"block": [1, 2, 3]})

    warm_configurations = [{"index": i} for i in range(6)]

    @classmethod
    @tune.autotuner(test={"block": 1})
    def autotune(cls, context, index):
        import os
        import time

        log = os.environ.get("SLOW_TEMPLATE_LOG")

        def generate(block):
            if log:
                with open(log, "a") as f:
                    f.write(f"{index} {block} {os.getpid()}\n")
            time.sleep(0.15)
            return lambda iterations: (block + index) * 1e-6

        return tune.autotune(generate)


class SleepyTemplate(Protocol):
    """A large space (100 configurations) whose candidates each take ``sleep`` seconds to
    generate (a compile that sleeps), with its best at ``block=37``: for ``warm``'s plans and
    time limits."""

    sleep = 0.1

    @classmethod
    def autotune_space(cls, context, index):
        return tune.Space({"block": list(range(100))})

    warm_configurations = [{"index": i} for i in range(3)]

    @classmethod
    @tune.autotuner(test={"block": 0})
    def autotune(cls, context, index):
        import time

        def generate(block):
            calls["sleepy"] += 1
            time.sleep(cls.sleep)
            return lambda iterations: (abs(block - 37) + 1) * 1e-6

        return tune.autotune(generate)


class InterruptedTemplate(Protocol):
    """A search that a ``KeyboardInterrupt`` stops after ``stop_after`` candidates (None: runs
    to the end); its generate calls are counted under ``"interrupted"``."""

    stop_after: int | None = None

    @classmethod
    def autotune_space(cls, context, size):
        return tune.Space({"block": list(range(1, 9))})

    @classmethod
    @tune.autotuner(test={"block": 1})
    def autotune(cls, context, size):
        def generate(block):
            calls["interrupted"] += 1
            if cls.stop_after is not None and calls["interrupted"] > cls.stop_after:
                raise KeyboardInterrupt
            cost = abs(block - 6) + 1.0
            return lambda iterations: cost * 1e-6

        return tune.autotune(generate)


InterruptedTemplate.warm_configurations = [{"size": 1}]


class SizedTemplate(Protocol):
    """y = 2 x over ``n`` elements with the real toy kernel: a work-group larger than ``n``
    is refused (it cannot be filled), and ``n`` may be generalised under
    ``AUTOTUNE_MATCH=similar``; ``label`` and ``batch`` may not."""

    autotune_sources = (KERNEL,)
    autotune_similar = {"n": "log"}
    warm_configurations = [{"n": 64, "label": "a", "batch": 1}]

    @classmethod
    def autotune_space(cls, context, n, label="a", batch=1):
        return tune.Space({"wgs": [8, 16, 32, 64]},
                          [tune.limit("a work-group the vector fills", lambda p: p["wgs"] <= n)])

    @classmethod
    @tune.autotuner(test={"wgs": 8})
    def autotune(cls, context, n, label="a", batch=1):
        queue = context.create_tuning_command_queue()
        kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
        x = context.to_device(queue, np.arange(n, dtype=np.float32))
        y = context.allocate(n, np.float32)

        def generate(wgs):
            calls["sized"] += 1
            return tune.make_measure(queue, lambda: run_sized(queue, kernel, y, x, n, wgs),
                                     lambda: np.array_equal(y.get(queue), 2 * x.get(queue)))

        return tune.autotune(generate)


def run_sized(queue, kernel, y, x, n, wgs):
    """Launch the toy kernel over ``n`` elements in work-groups of ``wgs``."""
    queue.enqueue_kernel(kernel, [y, x, np.uint32(n)], -(-n // wgs) * wgs, wgs)


class OrderedTemplate(Protocol):
    """y = (x + index) * 2 with the real toy kernel, for ``warm --lookahead``: each key logs
    into :attr:`log` when its tuning function starts, when its first launch has been enqueued
    (past its turn) and when it returns; key :attr:`fail` fails in its tuning function. Its
    input is uploaded once, then the host array is overwritten (a copy kept until the key's
    turn must carry the data as it was). Key :attr:`interrupt` raises ``KeyboardInterrupt``
    (Ctrl-C) at its first launch."""

    autotune_sources = (KERNEL,)
    warm_configurations = [{"index": i} for i in range(3)]
    log: list = []
    fail: int | None = None
    interrupt: int | None = None

    @classmethod
    def autotune_space(cls, context, index):
        return tune.Space({"wgs": [8, 16, 32, 64]})

    @classmethod
    @tune.autotuner(test={"wgs": 8})
    def autotune(cls, context, index):
        import time

        cls.log.append((index, "start", time.perf_counter()))
        if index == cls.fail:
            raise ValueError(f"key {index} fails on purpose")
        queue = context.create_tuning_command_queue()
        n = 4096
        host = np.arange(n, dtype=np.float32) + index
        expected = 2 * host
        x = context.to_device(queue, host)
        host[:] = -1.0
        y = context.allocate(n, np.float32)
        launched: list = []

        def generate(wgs):
            kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")

            def run():
                queue.enqueue_kernel(kernel, [y, x, np.uint32(n)], n, wgs)
                if not launched:
                    launched.append(True)
                    cls.log.append((index, "launch", time.perf_counter()))
                    if index == cls.interrupt:
                        raise KeyboardInterrupt

            return tune.make_measure(queue, run, lambda: np.array_equal(y.get(queue), expected))

        try:
            return tune.autotune(generate)
        finally:
            cls.log.append((index, "end", time.perf_counter()))
