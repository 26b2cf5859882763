"""What native code writes to standard error while a kernel compiles.

Some OpenCL compilers (PoCL's clang) print their diagnostics straight to file descriptor 2
(``1 error generated.``) besides putting them in the build log. A search that compiles the same
broken kernel for many candidates would print it once per candidate, far from the error that
reports it. :func:`native_stderr` captures those writes for one build, so the caller can put
them into its :class:`~.errors.CompileError` (or write them out after a successful build).

Descriptor 2 is process-wide: one build at a time is captured, and a build that starts while
another is being captured is not (its output goes where it always went).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass

_capturing = threading.Lock()


@dataclass
class Captured:
    """The text written to descriptor 2 within the block (set when the block ends)."""

    text: str = ""
    active: bool = False  #: False where the output could not be captured (and went to stderr)


@contextlib.contextmanager
def native_stderr() -> Iterator[Captured]:
    """Capture writes to file descriptor 2 (native code's standard error) within the block."""
    captured = Captured()
    if not _capturing.acquire(blocking=False):
        yield captured
        return
    try:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield captured
            return
        with tempfile.TemporaryFile() as spool:
            os.dup2(spool.fileno(), 2)
            captured.active = True
            try:
                yield captured
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                spool.seek(0)
                captured.text = spool.read().decode(errors="replace")
    finally:
        _capturing.release()


def pass_on(captured: Captured) -> None:
    """Write captured output to standard error after all (a build that succeeded)."""
    if captured.text:
        sys.stderr.write(captured.text)
        sys.stderr.flush()
