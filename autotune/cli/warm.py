"""``warm``: pre-tune every registered template's warm configurations on one or more devices."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import sys
import time
from contextlib import nullcontext
from typing import Any

from .. import accel
from ..tune.registry import RegisteredTemplate, load_template, registered_templates
from ..tune import observing, search_settings, use_database
from ..tune.encoding import describe_arguments, encode_arguments, encode_parameters
from ..tune.serving import get_store, match_mode
from ..tune.store import ReadOnlyStoreError
from ..tune.collective import split
from ..tune.records import ResultOrigin
from ..tune.verdicts import Freshness
from ..tune.serving import serving
from ..tune.store import StoreUnavailableError
from ..tune.validation import recorded_speedup
from .formatting import parameters_text
from .recorded import RecordedPlan, recorded_plan
from .warm_lookahead import KeyPipeline, KeyStart, lookahead_default
from .warm_prebuild import Prebuilder, helpers_for, prebuilding
from .warm_prebuild import wanted as prebuild_wanted
from .warm_report import Progress, WarmOutcome, report, say_estimates
from .warm_sharing import KeyClaims, claim_boards, device_class, shares, start_manager
from .warm_plan import Estimator, KeyPlan, WarmPolicy, interleaved, policy_from_args


def _test_score(store: Any, key: Any, test: dict[str, Any]) -> float | None:
    wanted = encode_parameters(test)
    times = [t.median_seconds for t in store.trials(key)
             if t.status == "ok" and t.parameters == wanted]
    return times[-1] if times else None


def warm_device(spec: accel.DeviceSpec, templates: list[RegisteredTemplate], *, url: str,
                force: bool, dry_run: bool, quiet: bool,
                settings: dict[str, Any] | None = None,
                share: tuple[int, int] = (0, 1), comm: Any = None,
                recorded: RecordedPlan | None = None,
                policy: WarmPolicy | None = None,
                lookahead: bool | None = None,
                prebuild: bool | None = None,
                claims: KeyClaims | None = None) -> list[WarmOutcome]:
    """Warm every template's configurations on one device, into the database ``url``.

    A key whose stored result is fresh is left alone (unless ``force``); a stale or invalid one
    is tuned again, like a missing one. ``settings`` (strategy, max_evals, max_seconds, seed,
    batches, resume) apply to every search. ``share`` ``(index, count)``: this worker takes every ``count``-th
    key from the ``index``-th (in the order the templates list them), the others going to
    workers on devices of the same class. ``comm`` (an MPI communicator, instead of ``share``):
    the ranks split their keys through :func:`autotune.tune.collective.split`: a key that
    several ranks list (devices of one class) is tuned by one of them, in turn. ``recorded``
    (``--recorded``): the keys of a record file on this device take the place of the
    templates' warm configurations. ``policy``: each key's search (:mod:`autotune.cli.warm_plan`:
    its plan wins over ``settings``' strategy and max_evals), the warm-start databases and the
    time limit of the run. ``lookahead``: start each next key while the key before it is tuned
    (:mod:`.warm_lookahead`; None: on GPUs only). ``prebuild``: low-priority helper processes
    build the keys' first candidates ahead into the compiler's disk cache
    (:mod:`.warm_prebuild`; many keys; None: on OpenCL CPU devices and CUDA devices with the
    kernel cache on). ``claims`` (instead of ``share``, for workers tuning at once): this
    worker goes through every key and warms those it takes before the other workers of its
    class (:class:`.warm_sharing.KeyClaims`).
    """
    policy = policy if policy is not None else WarmPolicy()
    if policy.started is None:
        policy = dataclasses.replace(policy, started=time.perf_counter())
    context = spec.create_context()
    device = context.device.name
    store = get_store(url)
    outcomes: list[WarmOutcome] = []
    unwritten: dict[int, Any] = {}  #: outcome index -> key of a result the database refused
    with use_database(url):
        every = ([(template, config) for template in templates
                  for config in template.configurations(context)] if recorded is None
                 else recorded.configurations(context, None if quiet else sys.stderr))
        mine = (_my_positions(every, context, share, comm) if claims is None
                else set(range(len(every))))  # listed = every: taken by position there
        listed = [(template, config, template.judge(context, config))
                  for position, (template, config) in enumerate(every) if position in mine]
        turn, plans = _tuning_order(listed, force, policy, context, store)
        plan = [listed[i] for i in turn]
        todo = [n for n, i in enumerate(turn) if i in plans]
        plans = [plans[turn[n]] for n in todo]  # in the tuning order
        order = {i: n for n, i in enumerate(todo)}  # the estimator's numbering
        estimator = Estimator(plans, deadline=policy.deadline())
        progress = Progress(sys.stderr, quiet or dry_run, len(plan), len(todo), estimator)
        starts = _starts(plan, order, plans, context, settings, policy, estimator, progress,
                         claims.workers if claims is not None else 1)
        following = _Following(order, turn, claims)
        pipeline: KeyPipeline = KeyPipeline(context, lookahead_default(context)
                                            if lookahead is None else lookahead)
        ahead = [] if dry_run or not prebuild_wanted(context, len(order), prebuild) else [
            (plan[p][0], plan[p][1], _key_settings(settings, plans[order[p]], None, policy))
            for p in sorted(order)]
        try:
            # (the host's cores and the device's memory shared by the workers warming at once)
            workers = (claims.workers if claims is not None
                       else comm.size if comm is not None else share[1])
            with prebuilding(spec.selector, ahead, bool(ahead),
                             helpers_for(context, workers)) as prebuilder:
                handled = _tune_keys(plan, order, plans, starts, following, pipeline, progress,
                                     outcomes, unwritten, device, force, dry_run, store,
                                     prebuilder)
        finally:
            pipeline.close()  # a key still running (Ctrl-C) is cancelled and waited for
            progress.close()
        say_estimates(progress, estimator, quiet or dry_run)
        outcomes = _written_late(store, outcomes, unwritten)
    where = f"{socket.gethostname()}/{spec.selector}"
    back = sorted(range(len(outcomes)), key=lambda k: turn[handled[k]])  # as templates list them
    return [dataclasses.replace(outcomes[k], where=where) for k in back]


class _Following:
    """The key to start ahead while the key at a position of the plan is tuned: the next to
    tune, or with ``claims`` the next to tune that this worker takes (taken now, so that no
    other worker starts it too)."""

    def __init__(self, order: dict[int, int], turn: list[int], claims: KeyClaims | None):
        self.positions = sorted(order)  # the plan's positions of the keys to tune, in turn
        self.turn, self.claims = turn, claims

    def mine(self, position: int) -> bool:
        """Whether this worker warms the key at ``position`` of the plan (taking it)."""
        return self.claims is None or self.claims.take(self.turn[position])

    def after(self, position: int) -> int:
        """The position of the key to start ahead of ``position``'s end (-1: none)."""
        later = self.positions[self.positions.index(position) + 1:]
        return next((p for p in later if self.mine(p)), -1)


def _tune_keys(plan: list[tuple], order: dict[int, int], plans: list[KeyPlan],
               starts: dict[int, KeyStart], following: _Following, pipeline: KeyPipeline,
               progress: Progress, outcomes: list[WarmOutcome], unwritten: dict[int, Any],
               device: str, force: bool, dry_run: bool, store: Any,
               prebuilder: Prebuilder) -> list[int]:
    """Each key of ``plan`` in turn that this worker warms (:class:`_Following`): left alone
    where stored (unless ``force``), said where ``dry_run``, else tuned (``outcomes`` and
    ``unwritten`` filled in; ``prebuilder`` told which key starts). Returns the plan's
    position of each outcome."""
    handled: list[int] = []
    for position, (template, config, verdict) in enumerate(plan):
        if not following.mine(position):
            continue
        handled.append(position)
        args = describe_arguments(encode_arguments(config))
        if tuned_here(verdict) and not force:
            outcomes.append(_stored(template, device, args, verdict.record, store))
            progress.skipped()
            continue
        why = _why_tuned(verdict)
        n = order[position]
        if dry_run:
            outcomes.append(WarmOutcome(template.name, device, args, "would tune",
                                        message=why.strip(" ()"), plan=plans[n].text(),
                                        estimate=plans[n].seconds))
            continue
        prebuilder.reached(n)
        began, began_at = time.perf_counter(), time.time()  # a key run ahead: from its turn
        with progress.key(f"{template.name} {args} on {device}{why}", n):
            found, key = pipeline.tune(starts[position], starts.get(
                following.after(position) if pipeline.enabled else -1))
        outcomes.append(dataclasses.replace(found, seconds=time.perf_counter() - began,
                                            began_at=began_at))
        if key is not None:
            unwritten[len(outcomes) - 1] = key
    return handled


def _starts(plan: list[tuple], order: dict[int, int], plans: list[KeyPlan], context: Any,
            settings: dict[str, Any] | None, policy: WarmPolicy, estimator: Estimator,
            progress: Progress, workers: int = 1) -> dict[int, KeyStart]:
    """The start of each key to tune (by its position in ``plan``; ``order``: its number among
    the keys to tune). Called when the key starts (``ahead``: while the key before it is tuned,
    :mod:`.warm_lookahead`), it fixes the key's search settings (its share of
    ``--max-minutes``, of what is left then) and returns the key's tuning. ``workers``: how
    many workers take the keys left (:class:`.warm_sharing.KeyClaims`): about every
    ``workers``-th of them is this one's, for the share."""

    def start_of(position: int) -> KeyStart:
        template, config, _ = plan[position]
        n = order[position]

        def start(ahead: bool) -> Any:
            pending = (list(range(n - 1 if ahead else n, n + 1))
                       + list(range(n + 1, len(plans)))[workers - 1::workers])
            seconds = policy.share(estimator, pending, 1 if ahead else 0)
            chosen = _key_settings(settings, plans[n], seconds, policy)
            args = describe_arguments(encode_arguments(config))
            noted = {"plan": plans[n].text(), "estimate": plans[n].seconds}

            def work() -> tuple[WarmOutcome, Any]:
                with search_settings(**chosen), observing(progress.observer(n)):
                    return _tune_key(template, context, config, args, noted)

            return work

        return start

    return {position: start_of(position) for position in order}


def _tune_key(template: RegisteredTemplate, context: Any, config: dict[str, Any], args: str,
              noted: dict[str, Any]) -> tuple[WarmOutcome, Any]:
    """Tune one key now (under the caller's search settings): its outcome, and its key if the
    database refused the result (None otherwise). A failure is reported, and warm goes on."""
    device = context.device.name  # (the key's seconds are noted by warm_device, from its turn)
    try:
        outcome = template.retune(context, config)
    except Exception as exc:  # AutotuneError and others
        return WarmOutcome(template.name, device, args, "failed",
                           message=f"{type(exc).__name__}: {exc}", **noted), None
    return WarmOutcome(
        template.name, device, args, _tuned_status(outcome),
        parameters_text(encode_parameters(outcome.parameters)), outcome.score,
        outcome.test_score, message=str(outcome.store_error or ""),
        speedup_interval=outcome.speedup_interval, **noted), (outcome.key if outcome.store_error is not None else None)


def _why_tuned(verdict: Any) -> str:
    """What the progress line says of a key about to be tuned: why its stored row (if any) is
    not used."""
    if verdict is None:
        return ""
    if verdict.record.origin == ResultOrigin.SIMILAR.value:
        return " (served from a similar size, not tuned)"
    return f" ({verdict.freshness}: {verdict.reason})" if verdict.reason else f" ({verdict.freshness})"


def _tuning_order(listed: list[tuple], force: bool, policy: WarmPolicy, context: Any,
                  store: Any) -> tuple[list[int], dict[int, KeyPlan]]:
    """The order to go through ``listed`` (template, configuration, verdict) in, and the plan
    of each key to tune by its position there: the templates' keys spread in proportion to
    their expected time (:func:`.warm_plan.interleaved`: the estimate of the time left soon
    knows what every template costs)."""
    todo = [i for i, (_, _, v) in enumerate(listed) if force or not tuned_here(v)]
    plans = dict(zip(todo, policy.plan_keys(context, [listed[i][:2] for i in todo], store,
                                            get_store)))
    turn = interleaved([t.name for t, _, _ in listed],
                       [plans[i].seconds if i in plans else 0.0 for i in range(len(listed))])
    return turn, plans


def _stored(template: RegisteredTemplate, device: str, args: str, record: Any,
            store: Any) -> WarmOutcome:
    """The outcome of a key whose stored result is fresh (with the speed-up its choice
    recorded, and that speed-up's interval, where it did)."""
    recorded = recorded_speedup(record)
    return WarmOutcome(template.name, device, args, "stored", parameters_text(record.parameters),
                       record.score, record.score * recorded[0] if recorded else
                       _test_score(store, record.key, template.test_parameters),
                       speedup_interval=recorded[1:] if recorded else None)


def _key_settings(settings: dict[str, Any] | None, plan: KeyPlan, share: float | None,
                  policy: WarmPolicy) -> dict[str, Any]:
    """A key's search settings: the command line's (seed, batches, resume, max_seconds), its
    plan's strategy and budget, the time its share of ``--max-minutes`` allows, and the
    databases its warm start reads."""
    chosen = {**(settings or {}), **plan.settings(),
              "warm_from": tuple(url for url, _ in policy.warm_from) or None}
    if share is not None:  # spent already: the search stops at its first success
        chosen["max_seconds"] = max(1e-3, min(share, chosen.get("max_seconds") or share))
    return chosen


def _my_positions(every: list[tuple[RegisteredTemplate, dict[str, Any]]], context: Any,
                  share: tuple[int, int], comm: Any) -> set[int]:
    """The positions in ``every`` (template, configuration) that this worker warms: every
    ``count``-th from the ``index``-th of ``share``; with ``comm``, those
    :func:`autotune.tune.collective.split` gives this rank (each key by one of the ranks that
    list it)."""
    if comm is None:
        index, count = share
        return {p for p in range(len(every)) if p % count == index}
    keys = [template.key(context, config) for template, config in every]
    return set(split(comm, keys, "the keys each rank would warm"))


def tuned_here(verdict: Any) -> bool:
    """Whether a key's stored row is its own fresh result (a row served from another size,
    origin ``similar``, is not: it is tuned)."""
    return (verdict is not None and verdict.freshness is Freshness.FRESH
            and verdict.record.origin != ResultOrigin.SIMILAR.value)


def _check_writable(url: str) -> None:
    """A database path that cannot be used, or a database that is wrong, is one clear error
    before anything is tuned. A read-only database is warmed into this process; one that
    cannot be written now (a full disk) is warmed all the same, and each key tuned says
    whether its result got in; one that cannot be read either (a server that is down) is the
    error of the first read."""
    try:
        get_store(url).prepare_writes()
    except (ReadOnlyStoreError, StoreUnavailableError):
        pass


def _tuned_status(outcome: Any) -> str:
    if outcome.stored:
        return "tuned"
    if isinstance(outcome.store_error, ReadOnlyStoreError):
        return "tuned, not stored"
    return "tuned, write failed"


def _written_late(store: Any, outcomes: list[WarmOutcome],
                  unwritten: dict[int, Any]) -> list[WarmOutcome]:
    """Try once more to write the results the database refused (they are kept in this process);
    those written now count as tuned."""
    if not any(outcomes[i].status == "tuned, write failed" for i in unwritten):
        return outcomes
    store.dispose()  # fresh connections (a failed one may hold on to what it could not do)
    kept = serving().kept
    kept.write_pending(store)
    still = set(kept.waiting(store.url))
    return [dataclasses.replace(o, status="tuned", message="")
            if i in unwritten and o.status == "tuned, write failed" and unwritten[i] not in still
            else o for i, o in enumerate(outcomes)]


def _warm_worker(job: tuple) -> list[WarmOutcome]:
    spec, extra, names, url, force, dry_run, settings, share, policy, recorded, ahead, claims = job
    templates = _select_templates(names, extra) if recorded is None else []
    return warm_device(spec, templates, url=url, force=force, dry_run=dry_run, quiet=True,
                       settings=settings, share=share, policy=policy, recorded=recorded,
                       lookahead=ahead, claims=claims)


def _mpi_world() -> Any:
    """mpi4py's COMM_WORLD when this process is one of several ranks started by mpiexec (read
    from the launcher's environment first, so that a plain run never imports MPI); else None."""
    sizes = [os.environ.get(v) for v in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")]
    if not any(s and s.isdigit() and int(s) > 1 for s in sizes):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise ValueError("warm runs under mpiexec but mpi4py is missing: pip install "
                         "'autotune[mpi]' (or run warm without mpiexec)") from None
    return MPI.COMM_WORLD if MPI.COMM_WORLD.size > 1 else None


def _warm_ranks(comm: Any, args: Any, templates: list[RegisteredTemplate], url: str,
                settings: dict[str, Any], policy: WarmPolicy) -> list[WarmOutcome] | None:
    """Under mpiexec: each rank warms the device its local rank picks (one GPU a rank; on a
    CPU the device one process would choose, shared), ranks with devices of one class
    splitting their keys; rank 0 gets every rank's outcomes (the others None). A rank that
    fails aborts every rank, its error headed with its rank number."""
    from mpi4py import MPI

    from ..parallel import abort_on_error

    with abort_on_error(comm, brief=(ValueError, accel.AccelError)):
        if args.all_devices or args.jobs != 1:
            raise ValueError("under mpiexec each rank warms one device: drop --all-devices "
                             "and --jobs")
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        spec = accel.device_for_local_rank(local.rank, args.device)
        local.Free()
        # each key by one of the ranks that would warm it (tune.collective's rule)
        outcomes = warm_device(spec, templates, url=url, force=args.force,
                               dry_run=args.dry_run, quiet=args.quiet or comm.rank != 0,
                               settings=settings, comm=comm, policy=policy,
                               recorded=getattr(args, "recorded_plan", None),
                               lookahead=getattr(args, "lookahead", None))
        # not bounded: a rank done with its share waits for the others' (minutes apart on
        # GPUs); a rank that fails aborts every rank (abort_on_error)
        gathered = comm.gather(outcomes, root=0)
    return [o for part in gathered for o in part] if comm.rank == 0 else None


def _select_templates(names: list[str], extra: list[str]) -> list[RegisteredTemplate]:
    """The templates to warm: those named (registered, or given with ``--template``); with no
    name, the ``--template`` ones alone if any, else every registered template."""
    loaded = [load_template(s) for s in extra]
    if not names and loaded:
        return loaded
    templates = registered_templates() + loaded
    if names:
        known = {t.name: t for t in templates}
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(
                f"unknown operation(s) {', '.join(missing)}; registered: {', '.join(sorted(known))}"
            )
        templates = [known[n] for n in names]
    return templates


def run_warm(args: Any, url: str) -> int:
    match_mode()  # a bad AUTOTUNE_MATCH is one clear error, not a failure per key
    # strategy and max_evals: each key's plan (warm_plan), which the command line overrides
    settings = {"max_seconds": args.max_seconds, "seed": args.seed, "batches": args.batches,
                "resume": args.resume or None}
    with search_settings(**settings):  # checks them once, before anything is tuned
        pass
    started, started_at = time.perf_counter(), time.time()
    if getattr(args, "recorded", None):  # the record file's keys, their templates resolved
        args.recorded_plan = recorded_plan(args)
        templates: list[RegisteredTemplate] = []
    else:
        args.recorded_plan = None
        templates = _select_templates(args.operations, args.template)
    policy = policy_from_args(args, templates or list(args.recorded_plan.templates.values()),
                              started)
    if not args.dry_run:
        _check_writable(url)
    comm = _mpi_world()
    if comm is not None:
        gathered = _warm_ranks(comm, args, templates, url, settings, policy)
        if gathered is None:  # rank 0 reports for everyone
            return 0
        outcomes = gathered
    else:
        outcomes = _warm_here(args, templates, url, settings, policy)
    # devices tuned at once (the ranks, or --jobs): the estimate of the wall time is theirs
    workers = comm.size if comm is not None else (args.jobs if args.all_devices else 1)
    return report(outcomes, dry_run=args.dry_run, workers=workers, started=started,
                  started_at=started_at, url=url,
                  limit=None if policy.max_minutes is None else policy.max_minutes * 60)


def _warm_here(args: Any, templates: list[RegisteredTemplate], url: str,
               settings: dict[str, Any], policy: WarmPolicy) -> list[WarmOutcome]:
    """One process: one device, or with --all-devices every device, devices of one class
    splitting their keys (tuned at once with --jobs)."""
    if args.jobs != 1 and not args.all_devices:
        raise ValueError(f"--jobs {args.jobs} tunes several devices at once: add --all-devices "
                         "(or drop --jobs)")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.all_devices:  # --device narrows "every device" (``--all-devices --device cuda``)
        specs = accel.select_devices(args.device)
    else:
        specs = accel.select_devices(args.device or os.environ.get(accel.ENV_DEVICE))[:1]
    classes = [device_class(s.identity) for s in specs]
    parts = shares(classes)
    jobs = max(1, min(args.jobs, len(specs)))
    if jobs > 1:  # devices of one class take their keys as each becomes free
        with start_manager() if len(set(classes)) < len(classes) else nullcontext() as manager:
            claims = claim_boards(classes, manager)
            work = [(s, args.template, args.operations, url, args.force, args.dry_run, settings,
                     part, dataclasses.replace(policy, started=None), args.recorded_plan,
                     getattr(args, "lookahead", None), claim)
                    for s, part, claim in zip(specs, parts, claims)]
            with multiprocessing.get_context("spawn").Pool(jobs) as pool:
                return [o for part in pool.map(_warm_worker, work) for o in part]
    outcomes = []
    for spec, part in zip(specs, parts):
        outcomes += warm_device(spec, templates, url=url, force=args.force, dry_run=args.dry_run,
                                quiet=args.quiet, settings=settings, share=part, policy=policy,
                                recorded=args.recorded_plan,
                                lookahead=getattr(args, "lookahead", None),
                                prebuild=getattr(args, "prebuild", None))
    return outcomes
