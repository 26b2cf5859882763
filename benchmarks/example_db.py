"""The tuning database a benchmark run uses: the one named, else a copy of ``tune.db.example``
(so that what the run tunes on a miss never lands in the shipped file)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "tune.db.example"


def use_database(db: str | None) -> str:
    """Point ``AUTOTUNE_DB`` at ``db``, else at a fresh copy of tune.db.example in a temporary
    folder; returns the path used."""
    path = db or shutil.copy(EXAMPLE, Path(tempfile.mkdtemp()) / "tune.db")
    os.environ["AUTOTUNE_DB"] = str(path)
    return str(path)
