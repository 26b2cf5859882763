"""How ``warm``'s workers on devices of one class share that class's keys.

Devices alike in what a tuning key holds of them (name, platform, driver version) give
interchangeable results, so each key is tuned once, by one of them:

- :func:`shares`: a fixed split, every ``count``-th key from the ``index``-th (``warm
  --all-devices`` one device after the other, where one device tuning all of them would take
  as long);
- :class:`KeyClaims`: keys taken as each worker becomes free (``--jobs N``: the devices tune at
  once). Each worker goes through every key of the class in its tuning order and takes a key
  only where no other worker has taken it yet, so that a worker whose keys were quick takes
  more of them and the devices finish together; a fixed split left the device with the
  slowest keys running alone at the end (on the H200's 98 keys of 2026-11-30, split four
  ways: 29.8 s for the busiest against 26.5 s of each device's even share, taken as freed
  26.7 s).
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from typing import Any


def device_class(identity: Any) -> tuple[str, str, str]:
    """What a tuning key holds of a device: devices alike in it share results."""
    return (identity.name, identity.platform, identity.driver_version)


def shares(classes: list[tuple]) -> list[tuple[int, int]]:
    """For each of several workers (by the class of its device), ``(index, count)``: the
    workers of one class split that class's keys ``count`` ways, this one taking part
    ``index`` (their results are interchangeable: the same keys)."""
    seen: dict[tuple, int] = {}
    parts = []
    for c in classes:
        parts.append((seen.get(c, 0), classes.count(c)))
        seen[c] = seen.get(c, 0) + 1
    return parts


@dataclass(frozen=True)
class KeyClaims:
    """One worker's hold on the board its class's workers take keys from: ``board`` maps a
    key's position (in the list of (template, configuration) every worker of the class makes
    alike) to the worker that took it; ``worker`` is this one; ``workers`` how many take from
    the board. Picklable (the board is a manager's dictionary), for a worker process."""

    board: Any
    worker: int
    workers: int

    def take(self, position: int) -> bool:
        """Take the key at ``position`` (True), unless another worker has (False). Taking a key
        this worker holds already is True again."""
        return self.board.setdefault(position, self.worker) == self.worker


def claim_boards(classes: list[tuple], manager: Any) -> list[KeyClaims | None]:
    """For each of several workers tuning at once (by the class of its device), its
    :class:`KeyClaims`, one board a class of two or more workers; None for a worker alone in
    its class (it takes every key; ``manager`` may then be None)."""
    boards: dict[tuple, Any] = {}
    claims: list[KeyClaims | None] = []
    for c, (index, count) in zip(classes, shares(classes)):
        if count < 2:
            claims.append(None)
            continue
        if c not in boards:
            boards[c] = manager.dict()
        claims.append(KeyClaims(boards[c], index, count))
    return claims


def start_manager() -> Any:
    """A started manager process for the boards (spawned: the workers are spawned too)."""
    return multiprocessing.get_context("spawn").Manager()


def busy_text(outcomes: list[Any], duration: Any, started_at: float | None = None) -> str:
    """``"; each device busy 28 s to 28 s, its first key 4 s to 5 s after the start"``: where
    several devices warmed at once, the least and the most time one spent on its keys, and
    when each began its first (``started_at``: the run's start, ``time.time()``); against the
    run's wall time they show what starting the workers cost and how evenly the keys were
    shared. "" for one device. ``duration`` writes seconds."""
    busy: dict[str, float] = {}
    first: dict[str, float] = {}
    for o in outcomes:
        where = o.where or o.device
        busy[where] = busy.get(where, 0.0) + (o.seconds or 0.0)
        if o.began_at is not None:
            first[where] = min(first.get(where, o.began_at), o.began_at)
    if len(busy) < 2:
        return ""
    text = f"; each device busy {duration(min(busy.values()))} to {duration(max(busy.values()))}"
    if started_at is not None and first:
        text += (f", its first key {duration(min(first.values()) - started_at)} to "
                 f"{duration(max(first.values()) - started_at)} after the start")
    return text
