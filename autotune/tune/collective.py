"""One choice for all ranks: ``tune.collective(comm)``.

On many GPUs each rank that tunes for itself may choose other parameters for the same key
(timings differ a little between devices), and ranks that launch different kernels can
deadlock a collective library or merely disagree. QUDA's rule is that one rank tunes and tells
the others; this module makes that rule the tuner's, for every tuned call made inside
``with tune.collective(comm):``

- every tuned call is a collective over ``comm``: each rank says which key it asks for (one
  bounded allgather, :mod:`autotune.parallel`);
- a key that several ranks ask for is resolved (memo, store, else tuned and stored) by one of
  them, the lowest of those ranks, and the parameters are sent to the others (a second
  allgather), which remember them and neither tune nor store: one rank's trials per key;
- ranks that ask for different keys (other arguments, another kind of device) never wait for
  each other's tuning: each key is resolved by a rank that asked for it, and ``mismatch``
  says what else happens: ``"warn"`` (default) a warning that names which ranks asked for
  what, ``"error"`` a :class:`KeyMismatchError` with that text on every rank, ``"allow"``
  nothing (ranks on different devices by design);
- when the resolving rank fails (the search raises), its error reaches every rank that waited
  for it as a :class:`CollectiveError`, and the rank itself raises its own error;
- a rank whose tuned call the others never make waits at most ``AUTOTUNE_MPI_TIMEOUT``
  seconds, then :class:`autotune.parallel.MPITimeoutError` names it and the key it asked for.

``comm`` is an mpi4py communicator, or ``torch.distributed`` (its default group) or a
``torch.distributed`` process group. Within the block the communicator is held in a context
variable: tuned calls made on other threads are this rank's alone.
"""

from __future__ import annotations

import contextlib
import enum
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from .. import parallel
from .records import TuningKey


class Mismatch(str, enum.Enum):
    """What a collective tuned call does when the ranks ask for different keys."""

    WARN = "warn"  #: each key resolved by a rank that asked for it; a warning says who asked what
    ERROR = "error"  #: :class:`KeyMismatchError` on every rank
    ALLOW = "allow"  #: each key resolved by a rank that asked for it, silently

    def __str__(self) -> str:
        return self.value


MISMATCH_MODES = tuple(m.value for m in Mismatch)


class CollectiveError(RuntimeError):
    """A collective tuned call could not give every rank its parameters: the rank resolving a
    key failed (its error is in the message), or a rank was not in a tuned call."""


class KeyMismatchError(CollectiveError):
    """Inside ``tune.collective(comm, mismatch="error")`` the ranks asked for different keys."""


class KeyMismatchWarning(UserWarning):
    """Inside ``tune.collective(comm)`` the ranks asked for different keys (each is resolved by
    a rank that asked for it)."""


class Communicator(Protocol):
    """What a collective tuned call needs of a communicator: this rank, the number of ranks,
    and an allgather of Python objects that ``what`` names in any error."""

    rank: int
    size: int

    def allgather(self, obj: Any, what: str) -> list[Any]: ...


class MPICommunicator:
    """An mpi4py communicator; its allgathers give up after ``AUTOTUNE_MPI_TIMEOUT`` seconds
    (:func:`autotune.parallel.allgather`)."""

    def __init__(self, comm: Any):
        self.comm = comm
        self.rank = int(comm.Get_rank())
        self.size = int(comm.Get_size())

    def __repr__(self) -> str:
        return f"<MPICommunicator rank {self.rank} of {self.size}>"

    def allgather(self, obj: Any, what: str) -> list[Any]:
        return parallel.allgather(self.comm, obj, what)


class TorchCommunicator:
    """A ``torch.distributed`` process group (None: the default group). Its collectives wait as
    long as the group's own timeout (``init_process_group(timeout=...)``)."""

    def __init__(self, group: Any = None):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise CollectiveError("tune.collective(torch.distributed): torch.distributed is not "
                                  "initialized; call torch.distributed.init_process_group() first")
        self.group = group
        self.rank = int(dist.get_rank(group))
        self.size = int(dist.get_world_size(group))

    def __repr__(self) -> str:
        return f"<TorchCommunicator rank {self.rank} of {self.size}>"

    def allgather(self, obj: Any, what: str) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        try:
            dist.all_gather_object(out, obj, group=self.group)
        except RuntimeError as exc:  # a rank that never came: the group's timeout
            raise CollectiveError(f"rank {self.rank} of {self.size}: {what} did not complete "
                                  f"({exc})") from exc
        return out


def communicator(comm: Any) -> Communicator:
    """``comm`` as a :class:`Communicator`: an mpi4py communicator, ``torch.distributed`` (its
    default group), a torch process group, or an object that already is one."""
    if isinstance(comm, (MPICommunicator, TorchCommunicator)):
        return comm
    if getattr(comm, "__name__", None) == "torch.distributed":
        return TorchCommunicator(None)
    if type(comm).__module__.split(".")[0] == "torch":
        return TorchCommunicator(comm)
    if all(hasattr(comm, name) for name in ("Get_rank", "Get_size", "Ibarrier", "allgather")):
        return MPICommunicator(comm)
    if all(hasattr(comm, name) for name in ("rank", "size", "allgather")):
        return comm
    raise TypeError(f"tune.collective needs an mpi4py communicator (e.g. MPI.COMM_WORLD) or "
                    f"torch.distributed (its default group), not {type(comm).__name__}")


def owners(asked: Sequence[Sequence[Hashable]]) -> dict[Hashable, int]:
    """For the keys each rank asks for (``asked[r]``: rank r's), the rank that resolves each:
    a key one rank asks for is its own; the keys that one set of ranks all ask for go to its
    members in turn (the first to the lowest rank, the next to the next...), so that ranks
    with the same list share its work. The same answer on every rank that sees ``asked``."""
    askers: dict[Hashable, list[int]] = {}
    for rank, keys in enumerate(asked):
        for key in keys:
            ranks = askers.setdefault(key, [])
            if not ranks or ranks[-1] != rank:
                ranks.append(rank)
    taken: dict[tuple[int, ...], int] = {}
    found = {}
    for key, ranks in askers.items():
        group = tuple(ranks)
        turn = taken.get(group, 0)
        taken[group] = turn + 1
        found[key] = group[turn % len(group)]
    return found


def split(comm: Any, keys: Sequence[Hashable], what: str) -> list[int]:
    """Collective over ``comm``: every rank lists ``keys``; the positions in this rank's list
    of the keys it resolves (:func:`owners`: each key by one rank among those that list it).
    ``what`` names the exchange in a timeout's error."""
    group = communicator(comm)
    asked = group.allgather(list(keys), f"tune.collective: {what}")
    owner = owners(asked)
    return [i for i, key in enumerate(keys) if owner[key] == group.rank]


@dataclass(frozen=True)
class _Ask:
    """What a rank sends when it makes a collective tuned call (tagged: a rank that reached
    some other allgather of the communicator sends something else)."""

    key: TuningKey


def describe_key(key: Any) -> str:
    """A key as a person reads it: ``function(arguments) on device``."""
    if isinstance(key, TuningKey):
        return (f"{key.function} v{key.version} {key.arguments} on {key.device_name} "
                f"({key.device_platform}, driver {key.driver_version})")
    return repr(key)


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def who_asked(asked: Sequence[Any]) -> str:
    """``rank 0 asked for A; ranks 1, 2 asked for B``."""
    groups: dict[Any, list[int]] = {}
    for rank, key in enumerate(asked):
        groups.setdefault(key, []).append(rank)
    return "; ".join(f"{_ranks_text(ranks)} asked for {describe_key(key)}"
                     for key, ranks in groups.items())


class Collective:
    """The block of a :func:`collective`: its communicator and mismatch rule. :meth:`resolve`
    is one collective tuned call."""

    def __init__(self, comm: Communicator, mismatch: Mismatch):
        self.comm = comm
        self.mismatch = mismatch

    def __repr__(self) -> str:
        return f"<Collective {self.comm!r} mismatch={self.mismatch}>"

    def resolve(self, key: TuningKey, here: Callable[[], dict[str, Any]]
                ) -> tuple[dict[str, Any], bool]:
        """Collective: the parameters for ``key`` (``here()`` on the rank that resolves it, the
        collective switched off while it runs), and whether this rank resolved it."""
        comm = self.comm
        label = describe_key(key)
        gathered = comm.allgather(_Ask(key), f"tune.collective: the keys the ranks ask for "
                                             f"(rank {comm.rank} asks for {label})")
        strangers = [r for r, a in enumerate(gathered) if not isinstance(a, _Ask)]
        if strangers:
            raise CollectiveError(
                f"tune.collective: rank {comm.rank} made a tuned call ({label}) while "
                f"{_ranks_text(strangers)} reached another collective of the communicator: "
                "inside tune.collective every rank must make the same tuned calls")
        asked = [a.key for a in gathered]
        self._check(asked)
        owner = owners([[k] for k in asked])
        result: tuple[str, Any] | None = None
        failure: BaseException | None = None
        if owner[key] == comm.rank:
            token = _active.set(None)  # the tuning's own tuned calls are this rank's
            try:
                result = ("ok", dict(here()))
            except BaseException as exc:  # noqa: BLE001 - every waiting rank must hear of it
                failure = exc
                result = ("error", f"{type(exc).__name__}: {exc}")
            finally:
                _active.reset(token)
        sent = comm.allgather(result, f"tune.collective: the parameters of {label} from rank "
                                      f"{owner[key]}")
        if failure is not None:
            raise failure
        status, value = sent[owner[key]]
        if status != "ok":
            raise CollectiveError(f"tune.collective: rank {owner[key]} failed to tune {label} "
                                  f"for {_ranks_text([r for r, k in enumerate(asked) if k == key])}"
                                  f": {value}")
        return dict(value), owner[key] == comm.rank

    def _check(self, asked: list[TuningKey]) -> None:
        if len(set(asked)) == 1 or self.mismatch is Mismatch.ALLOW:
            return
        said = f"tune.collective: the ranks asked for different keys in one tuned call: " \
               f"{who_asked(asked)}"
        if self.mismatch is Mismatch.ERROR:
            raise KeyMismatchError(f"{said}; with mismatch='error' every rank must ask for the "
                                   "same key (the same arguments, the same kind of device)")
        warnings.warn(f"{said}; each key is resolved by a rank that asked for it "
                      "(mismatch='error' makes this an error)", KeyMismatchWarning, stacklevel=5)


_active: ContextVar[Collective | None] = ContextVar("autotune_collective", default=None)


def active() -> Collective | None:
    """The :class:`Collective` of the innermost ``tune.collective`` block, if any."""
    return _active.get()


@contextlib.contextmanager
def collective(comm: Any, *, mismatch: str = "warn") -> Iterator[Collective]:
    """Within the block, every tuned call returns the same parameters on every rank of
    ``comm`` (an mpi4py communicator, or ``torch.distributed`` for its default group): each
    call is a collective; a key that several ranks ask for is resolved by one of them (the
    lowest), whose trials alone are stored, and sent to the others. Ranks that ask for
    different keys each resolve their own; ``mismatch`` ("warn", the default; "error";
    "allow") says whether that is a warning, a :class:`KeyMismatchError` on every rank, or
    nothing. Every rank must make the same sequence of tuned calls inside the block, as with
    any collective; a rank whose call the others never make gives up after
    ``AUTOTUNE_MPI_TIMEOUT`` seconds (MPI) naming itself and its key.

    >>> with tune.collective(MPI.COMM_WORLD):
    ...     params = MyTemplate.autotune(context, n)   # the same on every rank
    """
    if isinstance(mismatch, Mismatch):
        rule = mismatch
    elif isinstance(mismatch, str) and mismatch.strip().lower() in MISMATCH_MODES:
        rule = Mismatch(mismatch.strip().lower())
    else:
        raise ValueError(f"tune.collective(mismatch={mismatch!r}): use 'warn' (the default), "
                         "'error' or 'allow'")
    group = Collective(communicator(comm), rule)
    token = _active.set(group)
    try:
        yield group
    finally:
        _active.reset(token)
