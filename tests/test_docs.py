"""The documentation builds in strict mode, and its getting-started page quotes README.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        print(result.stdout)
        print(result.stderr, file=sys.stderr)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return [block.strip() for block in re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M)]


def test_index_quotes_the_two_readme_commands_verbatim():
    commands = _readme_commands()[:2]
    assert len(commands) == 2, "README.md should start with two fenced bash commands"
    index = (ROOT / "docs" / "index.md").read_text()
    for command in commands:
        assert f"```bash\n{command}\n```" in index, f"docs/index.md does not quote:\n{command}"
