"""Freeing pycuda's objects in whichever thread drops them last.

pycuda frees memory, streams, events and modules only where their context is current; where it
cannot make it so (a context current in another thread) it warns that something "could not be
cleaned up", or ends the process ("terminate called recursively"). A daemon thread or the
garbage collector may drop the last reference to a queue or an array anywhere, so the CUDA
backend's objects drop theirs through :func:`drop_in_context`.
"""

from __future__ import annotations

from typing import Any

try:
    import pycuda.driver as drv
except ImportError:  # pragma: no cover - no pycuda: nothing of it to free
    drv = None


def drop_in_context(owner: Any, *names: str) -> None:
    """Drop ``owner``'s pycuda objects (its attributes ``names``) with its context current,
    in whichever thread collects ``owner``: pycuda frees memory, streams, events and modules
    only where their context is current, and where it cannot make it so (another thread's
    context) it warns or ends the process ("terminate called recursively"). A daemon thread
    or the garbage collector may drop the last reference anywhere."""
    held = [owner.__dict__.pop(name, None) for name in names]
    if drv is None or all(h is None for h in held):
        return
    try:
        with owner.context.thread_scope():
            held.clear()
    except Exception:  # pragma: no cover - at exit, the context may be gone already
        pass


class PageLocked:
    """Holds page-locked host memory (pycuda's) until the arrays over it are gone."""

    def __init__(self, context: Any, memory: Any):
        self.context, self.memory = context, memory

    def __del__(self) -> None:
        drop_in_context(self, "memory")
