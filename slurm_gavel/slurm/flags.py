"""Gavel job flags: the grammar users write in `sbatch --comment`, and its canonical form.

This module owns the flag grammar. It is the one pure parser of it on the Python
side (the daemon uses it), and the reference that ``slurm_conf/job_submit.lua``
mirrors rule for rule and message for message (tests/test_flags.py runs one table
of cases through both). Change one, change the other.

User grammar (``sbatch --comment "gavel model=resnet50 weight=2 slo=36h steps=100000
speeds=v100:4.2,p100:2.1"``):

- The comment starts with the word ``gavel`` (case-sensitive), followed by the end
  of the comment or ASCII whitespace. ``gavel`` alone is valid: every flag takes
  its default. Anything else (``gavelx``, ``Gavel``, `` gavel``) is not a gavel
  comment and such a job is left alone.
- Then zero or more ``key=value`` items separated by ASCII whitespace, each key at
  most once:

  ``model``   job type name, 1-64 characters of ``A-Z a-z 0-9 . _ + -`` (may be a
              name no throughput table knows; default: none)
  ``weight``  decimal number, > 0 and <= 1000000, at most 6 digits after the
              point (default 1)
  ``entity``  1-64 characters of ``A-Z a-z 0-9 . _ -`` (default: the job's Slurm
              account, filled in by the caller)
  ``slo``     decimal number with a unit ``s``, ``m``, ``h`` or ``d`` (``90m``,
              ``36h``, ``1.5d``), at most 6 digits after the point, rounded to
              whole seconds (half up); between 1 second and 365d. A bare number
              is an error: the unit would be a guess.
  ``steps``   whole number, 1 to 10**15
  ``speeds``  a throughput hint: the job's training steps per second on each
              named GPU type, at the job's own GPU count. A comma-separated list
              of ``TYPE:NUMBER`` entries, 1 to 16 of them, each TYPE at most once;
              TYPE is 1-32 characters of ``A-Z a-z 0-9 . _ -`` (a GPU type as in
              gres.conf: ``v100``, ``a100-80gb``; compared as written, so case
              matters), NUMBER a decimal like ``weight``'s: > 0 and <= 1000000, at
              most 6 digits after the point. No empty entries (``v100:1,`` and
              ``v100:1,,p100:2`` are errors). Entries are checked left to right,
              each one whole (type, then number) before the next; a repeated type
              is reported at its second entry.

  ``types``   the GPU types the job accepts (it is never given a share of, nor started on,
              any other): a comma-separated list of 1 to 16 GPU types as in ``speeds``
              (``types=v100,p100``), each at most once, no empty entries. Where the
              administrator listed the cluster's types (``GAVEL_GPU_TYPES`` in
              job_submit.lua; ``gpu_types`` here) a type not among them is an error;
              the daemon checks again against the types it schedules.

  Numbers are plain decimals (``2``, ``0.5``, ``.5``, ``5.``): no sign, no exponent.

The partition list given at submission (``sbatch -p v100,p100``: the plugin's
``job_desc.partition``, ``partition`` here; nothing when the job was submitted
without one) is kept too, as ``partitions``: the daemon then starts the job only
on those partitions' GPU types. Entries are separated by commas (empty ones
skipped), each 1-64 characters of ``A-Z a-z 0-9 . _ -``, at most 32 of them;
a bad one is reported as ``--partition=<list>`` after every comment item.

Every mistake raises `FlagError` (an `InputError`) whose text is the one line
shown to the user at ``sbatch``: ``gavel flags: <item>: <why>``, for example
``gavel flags: slo=36: needs a unit (s, m, h or d), e.g. slo=36h``. The first bad
item (left to right) is reported.

Canonical form (what the plugin stores in the job's AdminComment, and what the
daemon reads back with `from_admin_comment`)::

    gavel:v1 model=resnet50 weight=2 entity=physics slo=129600 steps=100000 speeds=p100:2.1,v100:4.2 types=p100,v100 partitions=p100,v100

Keys in that order, separated by one space, ``weight`` always present, the others
only when set; ``slo`` in whole seconds; ``weight`` and each speed printed with
``%.6f`` and their trailing zeros (and point) removed; ``speeds`` entries sorted
by GPU type, bytewise (ASCII order: digits, upper case, lower case; the plugin
does not use Lua's locale-dependent string order); ``types`` and ``partitions``
sorted the same way, duplicates of a partition dropped. `to_admin_comment` and
`from_admin_comment` round-trip exactly. AdminComments written before ``speeds``
existed read as before, with ``speeds`` None.

On `GavelFlags` the hint is ``speeds``: None, or a tuple of ``(gpu_type,
steps_per_second)`` pairs sorted by type (hashable; ``speed_map()`` gives a dict).
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Optional

from ..core.errors import InputError

KEYS = ("model", "weight", "entity", "slo", "steps", "speeds", "types")
EXAMPLES = {"model": "model=resnet50", "weight": "weight=2", "entity": "entity=physics",
            "slo": "slo=36h", "steps": "steps=100000", "speeds": "speeds=v100:4.2,p100:2.1",
            "types": "types=v100,p100"}
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_NAME_LEN = 64
MAX_WEIGHT = 1_000_000
MAX_DECIMALS = 6
MAX_SLO_SECONDS = 365 * 86400
MAX_STEPS = 10 ** 15
MAX_SPEED = 1_000_000
MAX_SPEEDS = 16          # entries in one speeds= list
MAX_GPU_TYPE_LEN = 32
MAX_TYPES = 16           # entries in one types= list
MAX_PARTITIONS = 32      # partitions in the list given at submission
ADMIN_PREFIX = "gavel:"
ADMIN_VERSION = "gavel:v1"

# Long items are shortened in messages: more than SHOW_LIMIT bytes (UTF-8) shows
# the first SHOW_KEEP bytes, cut back to a character boundary, then "...".
# Bytes, not characters, because the Lua plugin only sees bytes.
SHOW_LIMIT = 72
SHOW_KEEP = 64

# ASCII only, spelled out: Python's \s and \d also match other Unicode characters,
# which Lua's patterns do not, and both sides must agree on every input.
_WS = " \t\n\v\f\r"
_ITEM = re.compile(r"[^ \t\n\v\f\r]+")
_MODEL = re.compile(r"[A-Za-z0-9._+-]+")
_ENTITY = re.compile(r"[A-Za-z0-9._-]+")
_DECIMAL = re.compile(r"([0-9]*)\.?([0-9]*)")
_SLO = re.compile(r"([0-9.]*)(.*)", re.DOTALL)
_DIGITS = re.compile(r"[0-9]+")
_GPU_TYPE = re.compile(r"[A-Za-z0-9._-]+")


class FlagError(InputError):
    """A bad gavel flag: `field` is the item as written (``slo=36``), `problem` says why.

    ``str(error)`` is the whole line the user sees, ``gavel flags: slo=36: needs a unit ...``.
    """

    def __init__(self, field: str, problem: str):
        super().__init__(field, problem)
        self.args = (f"gavel flags: {field}: {problem}",)


class _Bad(ValueError):
    """Internal: a value's problem, before we know how to name the field."""


@dataclass(frozen=True)
class GavelFlags:
    """A gavel job's flags; every instance is valid and serializes exactly."""

    model: Optional[str] = None
    weight: float = 1.0
    entity: Optional[str] = None
    slo_seconds: Optional[int] = None
    steps: Optional[int] = None
    # The throughput hint: ((gpu type, steps per second), ...) sorted by type, or
    # None. Any mapping or iterable of pairs is accepted and normalized to this.
    speeds: Optional[tuple[tuple[str, float], ...]] = None
    # The GPU types it accepts (types=), and the partitions it was submitted to (-p):
    # sorted tuples of names, or None (no restriction).
    types: Optional[tuple[str, ...]] = None
    partitions: Optional[tuple[str, ...]] = None

    def __post_init__(self):
        # Checked here (not only in the parser) so that any GavelFlags, however
        # built, has a canonical form that reads back equal.
        for name, check in (("model", _check_model), ("entity", _check_entity)):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, str):
                    raise InputError(name, f"must be a string, got {type(value).__name__}")
                _wrap(name, check, value)
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise InputError("weight", f"must be a number, got {type(w).__name__}")
        w = float(w)
        if not math.isfinite(w) or w <= 0:
            raise InputError("weight", "must be greater than 0")
        if w > MAX_WEIGHT:
            raise InputError("weight", f"must be at most {MAX_WEIGHT}")
        if float(_format_weight(w)) != w:
            raise InputError("weight", f"at most {MAX_DECIMALS} digits after the decimal point")
        object.__setattr__(self, "weight", w)
        for name, low, high in (("slo_seconds", 1, MAX_SLO_SECONDS), ("steps", 1, MAX_STEPS)):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(name, f"must be a whole number, got {type(value).__name__}")
            if not low <= value <= high:
                raise InputError(name, f"must be between {low} and {high}")
        if self.speeds is not None:
            object.__setattr__(self, "speeds", _normalize_speeds(self.speeds))
        for name, check, most in (("types", _check_gpu_type, MAX_TYPES),
                                  ("partitions", _check_partition, MAX_PARTITIONS)):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, (str, bytes)) or not all(isinstance(v, str) for v in value):
                raise InputError(name, "must be a list of names")
            names = sorted(set(value))
            if name == "types" and len(names) != len(value):
                raise InputError(name, "a GPU type is given twice")
            if not 1 <= len(names) <= most:
                raise InputError(name, f"must have 1 to {most} entries (None for any)")
            for v in names:
                _wrap(name, check, v)
            object.__setattr__(self, name, tuple(names))

    def speed_map(self) -> dict:
        """The throughput hint as {gpu type: steps per second} ({} when none)."""
        return dict(self.speeds or ())


def _normalize_speeds(speeds) -> tuple:
    """GavelFlags.speeds from a mapping or pairs: checked, sorted, a tuple of tuples."""
    if isinstance(speeds, (str, bytes)):
        raise InputError("speeds", "must be pairs (gpu type, speed), not a string")
    try:
        pairs = list(speeds.items() if hasattr(speeds, "items") else speeds)
        pairs = [(t, v) for t, v in pairs]
    except (TypeError, ValueError):
        raise InputError("speeds", "must be a mapping or pairs (gpu type, speed)") from None
    if not 1 <= len(pairs) <= MAX_SPEEDS:
        raise InputError("speeds", f"must have 1 to {MAX_SPEEDS} entries (None for no hint)")
    out = {}
    for gpu_type, speed in pairs:
        if not isinstance(gpu_type, str):
            raise InputError("speeds", f"GPU type must be a string, got {type(gpu_type).__name__}")
        _wrap("speeds", _check_gpu_type, gpu_type)
        if gpu_type in out:
            raise InputError("speeds", f"GPU type {gpu_type} is given twice")
        if isinstance(speed, bool) or not isinstance(speed, (int, float)):
            raise InputError("speeds", f"speed must be a number, got {type(speed).__name__}")
        speed = float(speed)
        if not math.isfinite(speed) or speed <= 0:
            raise InputError("speeds", f"speed of {gpu_type} must be greater than 0")
        if speed > MAX_SPEED:
            raise InputError("speeds", f"speed of {gpu_type} must be at most {MAX_SPEED}")
        if float(_format_weight(speed)) != speed:
            raise InputError("speeds", f"speed of {gpu_type}: at most {MAX_DECIMALS} digits "
                                       f"after the decimal point")
        out[gpu_type] = speed
    return tuple(sorted(out.items()))


# -- value checkers: return the value or raise _Bad(problem) ------------------
def _check_name(value: str, pattern: re.Pattern, allowed: str) -> str:
    if not pattern.fullmatch(value):
        raise _Bad(f"may use only letters, digits and {allowed}")
    if len(value) > MAX_NAME_LEN:   # after the pattern: ASCII, so characters == bytes
        raise _Bad(f"longer than {MAX_NAME_LEN} characters")
    return value


def _check_model(value: str) -> str:
    return _check_name(value, _MODEL, ". _ + -")


def _check_entity(value: str) -> str:
    return _check_name(value, _ENTITY, ". _ -")


def _decimal(text: str):
    """(integer digits, fraction digits) of a plain decimal, or None."""
    m = _DECIMAL.fullmatch(text)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    return m.group(1), m.group(2)


def _check_weight(value: str) -> float:
    parts = _decimal(value)
    if parts is None:
        raise _Bad("must be a number, e.g. weight=2 or weight=0.5")
    if len(parts[1]) > MAX_DECIMALS:
        raise _Bad(f"at most {MAX_DECIMALS} digits after the decimal point")
    w = float(value)
    if w <= 0:
        raise _Bad("must be greater than 0")
    if w > MAX_WEIGHT:
        raise _Bad(f"must be at most {MAX_WEIGHT}")
    return w


def _check_slo(value: str) -> int:
    number, unit = _SLO.fullmatch(value).groups()
    parts = _decimal(number)
    if parts is None:
        raise _Bad("must be a number with a unit (s, m, h or d), e.g. slo=36h")
    if unit == "":
        raise _Bad("needs a unit (s, m, h or d), e.g. slo=36h")
    if unit not in UNIT_SECONDS:
        raise _Bad(f"unknown unit {unit} (use s, m, h or d), e.g. slo=36h")
    whole, frac = parts
    if len(frac) > MAX_DECIMALS:
        raise _Bad(f"at most {MAX_DECIMALS} digits after the decimal point")
    whole = whole.lstrip("0")
    if whole == "" and frac.strip("0") == "":
        raise _Bad("must be greater than 0")
    too_long = f"must be at most {MAX_SLO_SECONDS // 86400}d"
    if len(whole) > 9:
        raise _Bad(too_long)
    # Exact integer arithmetic (the Lua side stays below 2**53): the whole part
    # times the unit, plus the fraction's seconds rounded half up.
    mult = UNIT_SECONDS[unit]
    seconds = int(whole or "0") * mult
    if seconds > MAX_SLO_SECONDS:
        raise _Bad(too_long)
    den = 10 ** len(frac)
    seconds += (2 * int(frac or "0") * mult + den) // (2 * den)
    if seconds > MAX_SLO_SECONDS:
        raise _Bad(too_long)
    if seconds < 1:
        raise _Bad("must be at least 1s")
    return seconds


def _check_steps(value: str) -> int:
    if not _DIGITS.fullmatch(value):
        raise _Bad("must be a whole number, e.g. steps=100000")
    digits = value.lstrip("0")
    if digits == "":
        raise _Bad("must be at least 1")
    if len(digits) > 16 or int(digits) > MAX_STEPS:
        raise _Bad(f"must be at most {MAX_STEPS}")
    return int(digits)


def _check_gpu_type(value: str) -> str:
    if not _GPU_TYPE.fullmatch(value):
        raise _Bad(f"GPU type {_shown(value)} may use only letters, digits and . _ -")
    if len(value) > MAX_GPU_TYPE_LEN:   # after the pattern: ASCII
        raise _Bad(f"GPU type {_shown(value)} is longer than {MAX_GPU_TYPE_LEN} characters")
    return value


def _check_types(value: str, known=None) -> tuple:
    """``TYPE,...`` -> (type, ...) sorted; with `known` (the cluster's types) only those."""
    example = EXAMPLES["types"]
    seen: set = set()
    for index, entry in enumerate(value.split(","), 1):
        if entry == "":
            raise _Bad(f"empty entry (a stray comma), e.g. {example}")
        if index > MAX_TYPES:
            raise _Bad(f"at most {MAX_TYPES} GPU types")
        _check_gpu_type(entry)
        if known is not None and entry not in known:
            raise _Bad(f"unknown GPU type {entry} (this cluster has {', '.join(sorted(known))})")
        if entry in seen:
            raise _Bad(f"GPU type {entry} is given twice")
        seen.add(entry)
    return tuple(sorted(seen))


def _check_partition(value: str) -> str:
    if not _ENTITY.fullmatch(value):
        raise _Bad(f"partition {_shown(value)} may use only letters, digits and . _ -")
    if len(value) > MAX_NAME_LEN:
        raise _Bad(f"partition {_shown(value)} is longer than {MAX_NAME_LEN} characters")
    return value


def _check_partitions(value: str) -> tuple:
    """The submission's ``a,b`` partition list -> (a, b) sorted, duplicates and empties dropped."""
    names = [p for p in value.split(",") if p != ""]
    if len(names) > MAX_PARTITIONS:
        raise _Bad(f"at most {MAX_PARTITIONS} partitions")
    for p in names:
        _check_partition(p)
    return tuple(sorted(set(names)))


def _check_admin_partitions(value: str) -> tuple:
    names = _check_partitions(value)
    if not names:
        raise _Bad("empty partition list")
    return names


def _check_speeds(value: str) -> tuple:
    """``TYPE:NUMBER,...`` -> ((type, speed), ...) sorted by type."""
    example = EXAMPLES["speeds"]
    speeds: dict = {}
    for index, entry in enumerate(value.split(","), 1):
        if entry == "":
            raise _Bad(f"empty entry (a stray comma), e.g. {example}")
        if index > MAX_SPEEDS:
            raise _Bad(f"at most {MAX_SPEEDS} GPU types")
        gpu_type, colon, number = entry.partition(":")
        if not colon:
            raise _Bad(f"entry {_shown(entry)} is not TYPE:NUMBER, e.g. {example}")
        if gpu_type == "":
            raise _Bad(f"entry {_shown(entry)} has no GPU type before ':', e.g. {example}")
        _check_gpu_type(gpu_type)
        parts = _decimal(number)
        if parts is None:
            raise _Bad(f"speed of {gpu_type} must be a number, e.g. {example}")
        if len(parts[1]) > MAX_DECIMALS:
            raise _Bad(f"speed of {gpu_type}: at most {MAX_DECIMALS} digits after the decimal point")
        speed = float(number)
        if speed <= 0:
            raise _Bad(f"speed of {gpu_type} must be greater than 0")
        if speed > MAX_SPEED:
            raise _Bad(f"speed of {gpu_type} must be at most {MAX_SPEED}")
        if gpu_type in speeds:
            raise _Bad(f"GPU type {gpu_type} is given twice")
        speeds[gpu_type] = speed
    return tuple(sorted(speeds.items()))


def _check_seconds(value: str) -> int:
    """The canonical form's slo: whole seconds."""
    if not _DIGITS.fullmatch(value):
        raise _Bad("must be a whole number of seconds")
    digits = value.lstrip("0")
    if digits == "" or len(digits) > 9 or not 1 <= int(digits) <= MAX_SLO_SECONDS:
        raise _Bad(f"must be between 1 and {MAX_SLO_SECONDS} seconds")
    return int(digits)


_USER_CHECKS = {"model": _check_model, "weight": _check_weight, "entity": _check_entity,
                "slo": _check_slo, "steps": _check_steps, "speeds": _check_speeds,
                "types": _check_types}
_ADMIN_CHECKS = dict(_USER_CHECKS, slo=_check_seconds, partitions=_check_admin_partitions)
_FIELD = {"model": "model", "weight": "weight", "entity": "entity", "slo": "slo_seconds",
          "steps": "steps", "speeds": "speeds", "types": "types", "partitions": "partitions"}


def _wrap(field: str, check, value: str):
    try:
        return check(value)
    except _Bad as bad:
        raise InputError(field, str(bad)) from None


def _shown(item: str) -> str:
    """The item as it appears in a message; long ones shortened the way Lua does it."""
    raw = item.encode("utf-8", "surrogateescape")
    if len(raw) <= SHOW_LIMIT:
        return item
    cut = SHOW_KEEP
    while cut > 0 and (raw[cut] & 0xC0) == 0x80:   # don't split a UTF-8 sequence
        cut -= 1
    return raw[:cut].decode("utf-8", "surrogateescape") + "..."


def _format_weight(w: float) -> str:
    return ("%.6f" % w).rstrip("0").rstrip(".")


# -- public API ----------------------------------------------------------------
def is_gavel_comment(text: Optional[str]) -> bool:
    """True when `text` starts with the word ``gavel`` (then its end or ASCII whitespace)."""
    return isinstance(text, str) and text.startswith("gavel") and (
        len(text) == 5 or text[5] in _WS)


def parse_comment(text: str, default_entity: Optional[str] = None, gpu_types=None,
                  partition: Optional[str] = None) -> GavelFlags:
    """The flags of a gavel comment (see the module docstring); raises `FlagError`.

    `default_entity` (the job's Slurm account) is used when the comment names no
    entity and is itself a valid entity name; otherwise entity stays None.
    `gpu_types` (the cluster's, when known) are the names ``types=`` may use;
    `partition` is the partition list the job was submitted to (None: none given).
    """
    if not is_gavel_comment(text):
        raise FlagError("comment", "must start with the word gavel")
    values: dict = {}
    for item in _ITEM.findall(text[5:]):
        key, eq, value = item.partition("=")
        shown = _shown(item)
        if not eq:
            raise FlagError(shown, "expected key=value, e.g. model=resnet50")
        if key == "":
            raise FlagError(shown, "missing the key before '='")
        if key not in _USER_CHECKS:
            raise FlagError(shown, f"unknown key {_shown(key)} (known keys: {', '.join(KEYS)})")
        if key in values:
            raise FlagError(shown, f"{key} is given twice")
        if value == "":
            raise FlagError(shown, f"empty value, e.g. {EXAMPLES[key]}")
        try:
            values[key] = (_check_types(value, gpu_types) if key == "types"
                           else _USER_CHECKS[key](value))
        except _Bad as bad:
            raise FlagError(shown, str(bad)) from None
    if isinstance(partition, str):
        try:
            values["partitions"] = _check_partitions(partition) or None
        except _Bad as bad:
            raise FlagError(_shown(f"--partition={partition}"), str(bad)) from None
        if values["partitions"] is None:
            del values["partitions"]
    if "entity" not in values and isinstance(default_entity, str):
        try:
            values["entity"] = _check_entity(default_entity)
        except _Bad:
            pass   # an account name the grammar cannot carry: leave entity unset
    return GavelFlags(**{_FIELD[k]: v for k, v in values.items()})


def to_admin_comment(flags: GavelFlags) -> str:
    """The canonical one-line form stored in the job's AdminComment."""
    parts = [ADMIN_VERSION]
    if flags.model is not None:
        parts.append(f"model={flags.model}")
    parts.append(f"weight={_format_weight(flags.weight)}")
    if flags.entity is not None:
        parts.append(f"entity={flags.entity}")
    if flags.slo_seconds is not None:
        parts.append(f"slo={flags.slo_seconds}")
    if flags.steps is not None:
        parts.append(f"steps={flags.steps}")
    if flags.speeds is not None:
        parts.append("speeds=" + ",".join(f"{t}:{_format_weight(v)}" for t, v in flags.speeds))
    if flags.types is not None:
        parts.append("types=" + ",".join(flags.types))
    if flags.partitions is not None:
        parts.append("partitions=" + ",".join(flags.partitions))
    return " ".join(parts)


def is_admin_comment(text: Optional[str]) -> bool:
    """True when an AdminComment marks a gavel job (the plugin's `gavel:` prefix)."""
    return isinstance(text, str) and text.startswith(ADMIN_PREFIX)


# What the daemon says about a held job, after the flags in its AdminComment (the one
# field an admin can set and every user can read in `scontrol show job` and `squeue
# --json`): "gavel:v1 model=x weight=1 | held by slurm-gavel: waiting for its round".
# The flags never hold a "|" (their grammar allows no such character).
STATUS_MARK = " | "
STATUS_LIMIT = 200
_NOT_STATUS = re.compile(r"[^ -{}~]")          # printable ASCII without "|"


def admin_flags(text: str) -> str:
    """An AdminComment without the daemon's status: the flags the plugin wrote."""
    return text.split(STATUS_MARK, 1)[0].rstrip()


def admin_status(text: str) -> str:
    """The daemon's status in an AdminComment ('' when none)."""
    return text.split(STATUS_MARK, 1)[1] if STATUS_MARK in text else ""


def with_status(text: str, status: str) -> str:
    """`text`'s flags followed by `status` (made printable ASCII, at most STATUS_LIMIT
    characters: it may quote Slurm's or a user's words); no status: the flags alone."""
    status = _NOT_STATUS.sub("?", " ".join((status or "").split()))[:STATUS_LIMIT]
    return admin_flags(text) + (STATUS_MARK + status if status else "")


def from_admin_comment(text: str) -> GavelFlags:
    """Parse the canonical form back; raises `InputError` (field ``admin_comment...``).

    Accepts any valid v1 form (keys in any order), so an administrator's hand edit
    that keeps the grammar still reads; `to_admin_comment` writes the canonical one.
    """
    if not is_admin_comment(text):
        raise InputError("admin_comment", "does not start with gavel:")
    text = admin_flags(text)            # the daemon's status after " | " is no flag
    head, _, rest = text.partition(" ")
    if head != ADMIN_VERSION:
        raise InputError("admin_comment", f"unsupported version {head[len(ADMIN_PREFIX):]!r} "
                                          f"(this slurm-gavel reads v1)")
    values: dict = {}
    for item in rest.split(" ") if rest else []:
        key, eq, value = item.partition("=")
        if not eq or key not in _ADMIN_CHECKS:
            raise InputError("admin_comment", f"unexpected item {_shown(item)!r}")
        if key in values:
            raise InputError(f"admin_comment.{key}", "given twice")
        try:
            values[key] = _ADMIN_CHECKS[key](value)
        except _Bad as bad:
            raise InputError(f"admin_comment.{key}", str(bad)) from None
    return GavelFlags(**{_FIELD[k]: v for k, v in values.items()})


def entity_name_problem(name) -> str:
    """Why `name` cannot be an entity (the ``entity=`` grammar), "" when it can."""
    if not isinstance(name, str):
        return "must be a string"
    try:
        _check_entity(name)
    except _Bad as bad:
        return str(bad)
    return ""


def with_entity(flags: GavelFlags, entity: str) -> GavelFlags:
    """`flags` with `entity` filled in when it has none (the job's account)."""
    return flags if flags.entity is not None else dataclasses.replace(flags, entity=entity)
