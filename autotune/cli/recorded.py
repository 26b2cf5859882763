"""``warm --recorded FILE``: the keys a run recorded with ``AUTOTUNE_RECORD``, as warm's plan.

A record file is data. Its functions are resolved among the registered templates and those
named with ``--template`` on the command line, never imported; its arguments are decoded as
data (dtypes from numpy's own names, enums only as members of the classes the template's own
warm configurations carry). Every line is checked before anything is tuned: a malformed line,
or a function no known template owns, is one error naming the line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TextIO

from .. import accel
from ..tune.encoding import MalformedJSONError, StoredEnum, decode_arguments, describe_arguments
from ..tune.misses import RecordedKey, read_records
from ..tune.records import TuningKey
from ..tune.registry import RegisteredTemplate, load_template, registered_templates


@dataclass(frozen=True)
class RecordedPlan:
    """The checked lines of a record file and the templates that own their functions."""

    path: str
    lines: tuple[RecordedKey, ...]
    templates: dict[str, RegisteredTemplate] = field(default_factory=dict)  #: by function

    def configurations(self, context: Any, notes: TextIO | None = None
                       ) -> list[tuple[RegisteredTemplate, dict[str, Any]]]:
        """The distinct keys recorded for ``context``'s device, as (template, configuration)
        in the file's order; lines for another device, or whose arguments cannot be rebuilt,
        are left out with a note to ``notes``."""
        device = context.device
        plan: list[tuple[RegisteredTemplate, dict[str, Any]]] = []
        seen: set[TuningKey] = set()
        other: dict[tuple[str, str], int] = {}
        for line in self.lines:
            recorded = line.key
            if (recorded.device_name, recorded.device_platform) != (device.name, device.platform):
                where = (recorded.device_name, recorded.device_platform)
                other[where] = other.get(where, 0) + 1
                continue
            template = self.templates[recorded.function]
            config, problem = _configuration(template, context, recorded.arguments)
            if config is None:
                _note(notes, f"{self.path} line {line.line}: {problem}; not tuned")
                continue
            try:
                key = template.key(context, config)
            except (TypeError, ValueError) as exc:
                _note(notes, f"{self.path} line {line.line}: {exc}; not tuned")
                continue
            if key in seen:
                continue
            seen.add(key)
            if key.version != recorded.version:
                _note(notes, f"{self.path} line {line.line}: recorded for version "
                             f"{recorded.version} of {template.name}, tuned for its version "
                             f"{key.version} now")
            plan.append((template, config))
        here: dict[tuple[str, str], str] = {}  # the first device of each identity found
        for spec in accel.list_devices() if other else []:
            here.setdefault((spec.identity.name, spec.identity.platform), spec.selector)
        for (name, platform), count in other.items():
            there = here.get((name, platform))
            hint = (f"; warm them with --device {there}" if there else
                    "; warm them on a machine with that device")
            _note(notes, f"{self.path}: {count} recorded key(s) for {name} [{platform}] "
                         f"skipped: not this device ({device.name} [{device.platform}]){hint}")
        return plan


def read_plan(path: str, extra: list[str]) -> RecordedPlan:
    """The record file ``path``, checked, with the templates that own its functions (the
    registered ones and ``extra``, named ``module:Class`` on the command line); ValueError
    naming the first line that is malformed or names a function no such template owns."""
    lines = read_records(path)
    templates = {t.function: t for t in registered_templates()}
    templates.update({t.function: t for t in (load_template(s) for s in extra)})
    for line in lines:
        if line.key.function not in templates:
            raise ValueError(
                f"{path} line {line.line}: {line.key.function} is not the autotune function of "
                "a registered template; names in a record file are never imported: name its "
                "template with --template MODULE:CLASS")
    return RecordedPlan(path, tuple(lines), templates)


def _configuration(template: RegisteredTemplate, context: Any, arguments: str
                   ) -> tuple[dict[str, Any] | None, str]:
    """The keyword arguments of ``template.autotune`` for recorded ``arguments``, or None and
    why not."""
    enums: set[type] = set()
    try:
        for config in template.configurations(context):
            enums.update(type(v) for v in config.values() if isinstance(v, enum.Enum))
    except Exception:  # noqa: BLE001 - no enum classes to offer then
        pass
    try:
        config = decode_arguments(arguments, tuple(enums))
    except MalformedJSONError as exc:
        return None, str(exc)
    enum_left = [n for n, v in config.items() if isinstance(v, StoredEnum)]
    if enum_left:
        return None, (f"arguments {describe_arguments(arguments)}: {', '.join(enum_left)} "
                      f"name an enum {template.name}'s warm configurations do not carry")
    return config, ""


def _note(stream: TextIO | None, text: str) -> None:
    if stream is not None:
        print(text, file=stream)


def recorded_plan(args: Any) -> RecordedPlan:
    """``warm --recorded FILE``'s plan: no operation may be named beside it (the file says
    what to tune), ``--template`` adds templates its functions may resolve to."""
    if args.operations:
        raise ValueError(f"--recorded tunes the keys its file lists; drop the operation(s) "
                         f"{', '.join(args.operations)}")
    return read_plan(args.recorded, args.template)
