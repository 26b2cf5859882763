"""``python -m autotune plot`` and ``report``: pictures and an HTML page people can read."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from autotune import tune
from autotune.cli.figures import KeyTrials, _pair, _plain_log_ticks, _varied, key_figure
from autotune.tune.store import ResultStore
from test_cli import run

FAKE = "toy_templates:FakeTimedTemplate"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def warmed(capsys, db):
    code, out, _ = run(capsys, "warm", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    assert code == 0, out
    return db


class _Page(HTMLParser):
    """The tags, image sources and table cells of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_plot_writes_one_png_per_key(capsys, warmed, tmp_path):
    code, out, _ = run(capsys, "plot", "FakeTimedTemplate", "--out", tmp_path / "fake.png")
    assert code == 0
    written = sorted(tmp_path.glob("fake-*.png"))
    assert [p.name for p in written] == ["fake-1.png", "fake-2.png", "fake-3.png"]
    assert all(p.read_bytes()[:8] == PNG for p in written)
    assert all(f"size={s}" in out for s in (1, 2, 3)), out


def test_plot_errors_name_the_fix(capsys, warmed, tmp_path):
    code, _, err = run(capsys, "plot", "FakeTimedTemplate", "--out", tmp_path / "fake.svg")
    assert code == 2 and ".png" in err
    code, _, err = run(capsys, "plot", "NoSuchThing", "--out", tmp_path / "x.png")
    assert code == 2 and "no successful trials" in err and "show" in err
    code, _, err = run(capsys, "plot", "FakeTimedTemplate", "--device", "no such device",
                       "--out", tmp_path / "x.png")
    assert code == 2 and "no such device" in err
    assert not list(tmp_path.glob("x*.png"))


def test_report_tables_pictures_and_speedup(capsys, warmed, tmp_path):
    out = tmp_path / "report"
    code, printed, _ = run(capsys, "report", "--out", out)
    assert code == 0, printed
    page = _parse(out / "index.html")
    # one picture per key, each a real PNG beside the page
    assert len(page.images) == 3
    for src in page.images:
        assert (out / src).read_bytes()[:8] == PNG
    # the winner is block=3 at 1 us; test= (block=1) took 3 us: a 3x speed-up, read from the
    # stored search summary (FakeTimedTemplate is not a registered template), with its
    # interval (the fake's times do not vary: 1% on each side, what another process may differ by,
    # choice.REPRODUCIBILITY), and no tie
    assert page.cells.count("block=3") == 3
    assert page.cells.count(f"3.00x ({round(3 / 1.01, 4):.2f}-{round(3 * 1.01, 4):.2f})") == 3
    assert page.cells.count("1-1 us") == 3 and page.cells.count("0.0%") == 3
    assert "3 results, 3 pictures" in printed
    # a second report into the same folder replaces the first one's pictures, and only those
    (out / "img" / "key0009.png").write_bytes(PNG)
    (out / "img" / "mine.png").write_bytes(PNG)
    assert run(capsys, "report", "--out", out)[0] == 0
    assert sorted(p.name for p in (out / "img").iterdir()) == [
        "key0001.png", "key0002.png", "key0003.png", "mine.png"]


def test_report_escapes_everything_read_from_the_database(capsys, db, tmp_path):
    hostile = "<script>alert('x')</script>"
    store = ResultStore(f"sqlite:///{db}")
    key = tune.TuningKey(f"evil.{hostile}.autotune", 1, f"GPU {hostile}", "P<b>", "1",
                         json.dumps({"n": hostile}))
    store.save(tune.TuningRecord(key, '{"block":3}', 1e-6, "x",
                                 search=json.dumps({"test": {"block": hostile}})),
               [tune.records.TrialRecord(key, json.dumps({"block": b}), "ok", median_seconds=s)
                for b, s in ((1, 3e-6), (2, 2e-6), (3, 1e-6))])
    # a second key whose stored winner is malformed JSON: shown as such, never parsed
    bad = tune.TuningKey("plain.Thing.autotune", 1, "GPU", "P", "1", '{"n":1}')
    store.put(tune.TuningRecord(bad, '{"block":', 1e-6, "x"))
    code, printed, err = run(capsys, "report", "--out", tmp_path / "r")
    assert code == 0, err
    text = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    page = _parse(tmp_path / "r" / "index.html")
    assert "script" not in page.tags and "b" not in page.tags
    assert html.escape(hostile) in text
    assert any(c.startswith("invalid: stored parameters is not valid JSON") for c in page.cells)


def test_report_compares_devices_side_by_side(capsys, db, tmp_path):
    store = ResultStore(f"sqlite:///{db}")
    for device, block in (("GPU A", 3), ("GPU B", 5)):
        key = tune.TuningKey("m.T.autotune", 1, device, "P", "1", '{"n":8}')
        store.put(tune.TuningRecord(key, json.dumps({"block": block, "unroll": 2}), 1e-6, "x"))
    code, _, err = run(capsys, "report", "--out", tmp_path / "r")
    assert code == 0, err
    text = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr><td>(\w+)</td>(<td[^>]*>[^<]*</td><td[^>]*>[^<]*</td>)</tr>", text)
    assert ("block", "<td class='differs'>3</td><td class='differs'>5</td>") in rows
    assert ("unroll", "<td>2</td><td>2</td>") in rows


def test_report_refuses_a_file_and_an_empty_database(capsys, warmed, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run(capsys, "report", "--out", tmp_path / "file")
    assert code == 2 and "folder" in err
    assert run(capsys, "clear", "--yes")[0] == 0
    code, _, err = run(capsys, "report", "--out", tmp_path / "r")
    assert code == 2 and "no results" in err


def _landscape(rng, n: int) -> KeyTrials:
    """Time depends on a and b together; c is noise."""
    key = KeyTrials("synthetic")
    for _ in range(n):
        p = {"a": int(rng.choice([16, 32, 64, 128])), "b": int(rng.choice([1, 2, 4, 8])),
             "c": int(rng.choice([0, 1]))}
        key.parameters.append(p)
        key.seconds.append(1e-5 * (1 + abs(np.log2(p["a"] * p["b"] / 128)))
                           * (1 + 0.01 * rng.random()))
    key.winner = key.parameters[int(np.argmin(key.seconds))]
    return key


def test_heat_map_picks_the_parameters_that_matter():
    key = _landscape(np.random.default_rng(1), 400)
    assert set(_pair(key, ["a", "b", "c"])) == {"a", "b"}
    # a lone out-of-space value (the test= configuration) does not count as varied
    key.parameters.append({"a": 16, "b": 1, "c": 7, "d": 99})
    key.seconds.append(1e-4)
    assert "d" not in _varied(key, ["a", "b", "c", "d"])


def test_log_ticks_stay_apart_and_inside_the_range():
    plt = pytest.importorskip("matplotlib.pyplot")
    for low, high in ((85.0, 112.0), (43.0, 660.0), (0.85, 2.4), (1.0, 1.31), (11.0, 150.0),
                      (1.0, 8.11), (3e-6, 0.2)):
        fig, ax = plt.subplots()
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        _plain_log_ticks(ax.xaxis, low, high)
        ticks = [t for t in ax.xaxis.get_majorticklocs() if low <= t <= high]
        assert 3 <= len(ticks) <= 6, (low, high, ticks)
        gaps = np.diff(np.log(ticks)) / np.log(high / low)
        assert gaps.min() >= 0.1, (low, high, ticks)  # labels never crowd
        assert all(float(f"{t:.2g}") == t for t in ticks), ticks  # round numbers
        plt.close(fig)


def test_a_large_landscape_draws_one_readable_picture(tmp_path):
    key = _landscape(np.random.default_rng(2), 5000)
    key.test = {"a": 16, "b": 1, "c": 0}
    path = key_figure(key, tmp_path / "big.png")
    assert path.read_bytes()[:8] == PNG
    assert path.stat().st_size < 400_000


def test_report_marks_a_test_configuration_that_beat_the_space(capsys, db, tmp_path):
    store = ResultStore(f"sqlite:///{db}")
    key = tune.TuningKey("m.T.autotune", 1, "CPU", "P", "1", '{"n":8}')
    search = json.dumps({"test": {"block": 16}})
    store.save(tune.TuningRecord(key, '{"block":4}', 2e-6, "x", search=search),
               [tune.records.TrialRecord(key, json.dumps({"block": b}), "ok", median_seconds=s)
                for b, s in ((1, 3e-6), (4, 2e-6), (16, 1e-6))])
    code, _, err = run(capsys, "report", "--out", tmp_path / "r")
    assert code == 0, err
    text = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert re.search(r"<td class='num differs' title='the test= parameters[^']*'>0.50x</td>", text)
