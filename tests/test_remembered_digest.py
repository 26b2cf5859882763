"""A package's digest remembered between processes (what spares a new process Triton's hash of
its own installation), on real files: kept while the files are unchanged, computed again when
one changes, is added or was written moments ago; a bad or unwritable store costs the
computation, never an error. Triton's own wiring is tested in ``tests/test_triton.py``."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from autotune.integrations.remembered_digest import (MAX_ENTRIES, files_signature,
                                                     remembered_digest)


def age(root, seconds: float = 100.0) -> None:
    """Every file under ``root`` last written ``seconds`` ago (installed, not being written)."""
    when = time.time() - seconds
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (when, when))


@pytest.fixture
def package(tmp_path):
    root = tmp_path / "pkg"
    (root / "compiler").mkdir(parents=True)
    (root / "__init__.py").write_text("version = '1'\n")
    (root / "compiler" / "code.py").write_text("def f(): return 1\n")
    (root / "_C").mkdir()
    (root / "_C" / "lib.so").write_bytes(os.urandom(4096))
    (root / "README.txt").write_text("not hashed\n")
    age(root)
    return root


class Hasher:
    """The library's own digest: SHA-256 of the .py and .so files' contents, counted."""

    def __init__(self, root):
        self.root, self.calls = root, 0

    def __call__(self) -> str:
        self.calls += 1
        parts = []
        for folder, dirs, names in os.walk(self.root):
            dirs.sort()
            for name in sorted(n for n in names if n.endswith((".py", ".so"))):
                with open(os.path.join(folder, name), "rb") as f:
                    parts.append(hashlib.sha256(f.read()).hexdigest())
        return "1.0-" + "-".join(parts)


def test_the_digest_is_computed_once_and_then_remembered(package, tmp_path):
    store, compute = tmp_path / "store.json", Hasher(package)
    first, remembered = remembered_digest(package, compute, store, salt="v1")
    assert (remembered, compute.calls) == (False, 1)
    again, remembered = remembered_digest(package, compute, store, salt="v1")
    assert (again, remembered, compute.calls) == (first, True, 1)
    assert first == Hasher(package)()


@pytest.mark.parametrize("change", ["rewritten", "replaced, times kept", "added", "removed",
                                    "salt"])
def test_a_changed_package_is_hashed_again(package, tmp_path, change):
    store, compute = tmp_path / "store.json", Hasher(package)
    first, _ = remembered_digest(package, compute, store, salt="v1")
    salt = "v1"
    if change == "rewritten":  # same size, other content, written now
        (package / "compiler" / "code.py").write_text("def f(): return 2\n")
    elif change == "replaced, times kept":  # as a copy that keeps times does (cp -p, rsync -t)
        code = package / "compiler" / "code.py"
        kept = code.stat()
        time.sleep(0.05)  # past the clock tick of the files' change times
        (package / "new.tmp").write_text("def f(): return 2\n")
        os.replace(package / "new.tmp", code)
        os.utime(code, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    elif change == "added":
        (package / "compiler" / "more.py").write_text("x = 1\n")
    elif change == "removed":
        (package / "compiler" / "code.py").unlink()
    else:
        salt = "v2"  # another version of the package
    value, remembered = remembered_digest(package, compute, store, salt=salt)
    assert (remembered, compute.calls) == (False, 2)
    assert value == Hasher(package)()
    assert (value != first) == (change != "salt")


def test_a_file_that_is_not_hashed_changes_nothing(package, tmp_path):
    store, compute = tmp_path / "store.json", Hasher(package)
    remembered_digest(package, compute, store)
    (package / "README.txt").write_text("edited\n")
    assert remembered_digest(package, compute, store)[1] is True


def test_files_written_moments_ago_are_not_remembered_until_they_settle(package, tmp_path):
    # a file's times have a clock tick's resolution: a signature taken while files are being
    # written could match a later content, so it is only stored once they are older
    (package / "compiler" / "code.py").write_text("def f(): return 3\n")
    store, compute = tmp_path / "store.json", Hasher(package)
    remembered_digest(package, compute, store)
    assert remembered_digest(package, compute, store)[1] is False
    assert compute.calls == 2
    age(package)
    remembered_digest(package, compute, store)
    assert remembered_digest(package, compute, store)[1] is True
    assert compute.calls == 3


@pytest.mark.parametrize("content", [
    "not json", "[]", json.dumps({"format": 99, "entries": {}}),
    json.dumps({"format": 1, "entries": []}),
    "BAD DIGEST",
])
def test_a_bad_store_is_data_that_costs_the_computation(package, tmp_path, content):
    store, compute = tmp_path / "store.json", Hasher(package)
    if content == "BAD DIGEST":  # the right signature, a value no digest can be
        signature = files_signature(package, "")
        content = json.dumps({"format": 1, "entries": {signature: "x; rm -rf / #"}})
    store.write_text(content)
    value, remembered = remembered_digest(package, compute, store)
    assert (value, remembered) == (Hasher(package)(), False)
    assert remembered_digest(package, compute, store) == (value, True)  # stored over it


def test_an_unwritable_store_costs_the_computation_not_an_error(package, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the store's folder should be")
    store, compute = blocker / "store.json", Hasher(package)
    for _ in range(2):
        assert remembered_digest(package, compute, store) == (Hasher(package)(), False)
    assert compute.calls == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_an_answer_that_is_no_digest_is_returned_but_not_stored(package, tmp_path):
    store = tmp_path / "store.json"
    assert remembered_digest(package, lambda: "a b\n", store) == ("a b\n", False)
    assert not store.exists()


def test_the_store_keeps_the_newest_environments(tmp_path):
    store = tmp_path / "store.json"
    roots = []
    for i in range(MAX_ENTRIES + 2):
        root = tmp_path / f"env{i}"
        root.mkdir()
        (root / "m.py").write_text(f"x = {i}\n")
        age(root)
        roots.append(root)
        remembered_digest(root, lambda i=i: f"digest-{i}", store)
    entries = json.loads(store.read_text())["entries"]
    assert sorted(entries.values()) == sorted(f"digest-{i}" for i in range(2, MAX_ENTRIES + 2))
    assert remembered_digest(roots[-1], lambda: "other", store) == (f"digest-{MAX_ENTRIES + 1}",
                                                                    True)
    assert remembered_digest(roots[0], lambda: "digest-0", store) == ("digest-0", False)

