"""Reading a `PolicyInput` from JSON (the format `slurm-gavel solve` takes).

Format (every key below is the complete set allowed; anything else is an error)::

    {
      "worker_types": {"v100": {"count": 1, "price_per_hour": 2.48, "gpus_per_node": 4},
                       "k80": {"count": 1}},
      "jobs": [{"id": "0", "throughputs": {"v100": 40.0, "k80": 10.0},
                "scale_factor": 1, "weight": 1.0, "entity": "default",
                "steps_remaining": 100000, "time_since_arrival": 0, "slo": 3600}],
      "pairs": [{"jobs": ["0", "1"], "throughputs": {"v100": [20.0, 7.5]}}],
      "entities": {"default": {"weight": 1.0, "policy": "fairness"}}
    }

Every problem raises `InputError(field, problem)` with `field` a dotted path
into the document (``jobs[<id>].throughputs.v100``; a job without a usable id
is named by its index) and `problem` one line saying what is wrong.
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Callable

import numpy as np

from .errors import InputError
from .model import ENTITY_POLICIES, PolicyInput

TOP_KEYS = ("worker_types", "jobs", "pairs", "entities")
WORKER_TYPE_KEYS = ("count", "price_per_hour", "gpus_per_node")
JOB_KEYS = ("id", "throughputs", "throughputs_unconsolidated", "scale_factor", "weight",
            "entity", "steps_remaining", "time_since_arrival", "slo")
PAIR_KEYS = ("jobs", "throughputs")
ENTITY_KEYS = ("weight", "policy")

_MISSING = object()


# -- small checkers ----------------------------------------------------------
def _show(value: Any) -> str:
    """A value as the user wrote it (JSON spelling), shortened."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _object(value: Any, path: str, keys: tuple[str, ...] | None, what: str = "an object") -> dict:
    """`value` must be a JSON object; with `keys`, only those keys are allowed."""
    if not isinstance(value, dict):
        raise InputError(path, f"must be {what}, got {_kind(value)}")
    if keys is not None:
        for key in value:
            if key not in keys:
                raise InputError(path, f"unknown key {key!r} (allowed: {', '.join(keys)})")
    return value


def _list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise InputError(path, f"must be a list, got {_kind(value)}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, path: str, bound: str, integer: bool = False) -> float:
    """`value` must be a finite number (an integer if `integer`) satisfying `bound`.

    `bound` is ">= 0", "> 0" or ">= 1".
    """
    op, limit = bound.split()
    limit = float(limit)
    kind = "an integer" if integer else "a number"
    problem = f"must be {kind} {bound}, got {_show(value)}"
    if not _is_number(value) or (integer and not isinstance(value, int)):
        raise InputError(path, problem)
    try:
        number = float(value)
    except OverflowError:
        raise InputError(path, problem) from None
    if not math.isfinite(number) or (integer and abs(value) > 2 ** 53):
        raise InputError(path, problem)
    if not (number >= limit if op == ">=" else number > limit):
        raise InputError(path, problem)
    return number


def _optional(obj: dict, key: str, default: Any, check: Callable[[Any], Any]) -> Any:
    """obj[key] checked by `check`; `default` when the key is absent or null."""
    value = obj.get(key)
    return default if value is None else check(value)


def _job_id(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(path, f"must be a string or an integer, got {_show(value)}")
    text = str(value)
    if not text:
        raise InputError(path, "must not be empty")
    return text


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(path, f"must be a non-empty string, got {_show(value)}")
    return value


# -- sections ----------------------------------------------------------------
def _worker_types(section: Any):
    section = _object(section, "worker_types", None, "an object mapping worker type names to "
                      "{count, price_per_hour, gpus_per_node}")
    if not section:
        raise InputError("worker_types", "must name at least one worker type")
    names, counts, prices, per_node = [], [], [], []
    for name, spec in section.items():
        if not name:
            raise InputError("worker_types", "worker type names must not be empty")
        path = f"worker_types.{name}"
        spec = _object(spec, path, WORKER_TYPE_KEYS)
        if "count" not in spec:
            raise InputError(f"{path}.count", "is required")
        counts.append(_number(spec["count"], f"{path}.count", ">= 0", integer=True))
        prices.append(_optional(spec, "price_per_hour", math.nan,
                                lambda v: _number(v, f"{path}.price_per_hour", ">= 0")))
        per_node.append(_optional(spec, "gpus_per_node", math.nan,
                                  lambda v: _number(v, f"{path}.gpus_per_node", ">= 1", integer=True)))
        names.append(name)
    return tuple(names), np.array(counts), np.array(prices), np.array(per_node, dtype=float)


def _throughput_row(value: Any, path: str, types: tuple[str, ...], column: dict) -> np.ndarray:
    """{type: steps/s or null} -> (k,) with NaN where not given."""
    given = _object(value, path, None, "an object mapping worker type to steps/s")
    row = np.full(len(types), np.nan)
    for wt, number in given.items():
        if wt not in column:
            raise InputError(path, f"unknown worker type {wt!r} (known: {', '.join(types)})")
        if number is not None:
            row[column[wt]] = _number(number, f"{path}.{wt}", ">= 0")
    return row


def _jobs(section: Any, types: tuple[str, ...]):
    jobs = _list(section, "jobs")
    column = {wt: j for j, wt in enumerate(types)}
    rows = {key: [] for key in JOB_KEYS}
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        at = f"jobs[{index}]"
        if not isinstance(job, dict):
            raise InputError(at, f"must be an object, got {_kind(job)}")
        # Name the job by its id as soon as it has a usable one.
        if "id" not in job:
            raise InputError(f"{at}.id", "is required")
        jid = _job_id(job["id"], f"{at}.id")
        if jid in seen:
            raise InputError(f"jobs[{jid}].id",
                             f"duplicate job id (jobs at index {seen[jid]} and {index})")
        seen[jid] = index
        at = f"jobs[{jid}]"
        _object(job, at, JOB_KEYS)

        if "throughputs" not in job:
            raise InputError(f"{at}.throughputs", "is required")
        row = _throughput_row(job["throughputs"], f"{at}.throughputs", types, column)
        spread = _optional(job, "throughputs_unconsolidated", None,
                           lambda v: _throughput_row(v, f"{at}.throughputs_unconsolidated",
                                                     types, column))
        rows["throughputs_unconsolidated"].append(
            np.full(len(types), np.nan) if spread is None else spread)
        rows["id"].append(jid)
        rows["throughputs"].append(row)
        rows["scale_factor"].append(_optional(
            job, "scale_factor", 1, lambda v: int(_number(v, f"{at}.scale_factor", ">= 1", integer=True))))
        rows["weight"].append(_optional(
            job, "weight", 1.0, lambda v: _number(v, f"{at}.weight", "> 0")))
        rows["entity"].append(_optional(
            job, "entity", "default", lambda v: _name(v, f"{at}.entity")))
        rows["steps_remaining"].append(_optional(
            job, "steps_remaining", math.nan, lambda v: _number(v, f"{at}.steps_remaining", ">= 0")))
        rows["time_since_arrival"].append(_optional(
            job, "time_since_arrival", 0.0,
            lambda v: _number(v, f"{at}.time_since_arrival", ">= 0")))
        rows["slo"].append(_optional(job, "slo", math.nan, lambda v: _number(v, f"{at}.slo", "> 0")))
    return rows, seen


def _pairs(section: Any, types: tuple[str, ...], job_index: dict[str, int]):
    pairs = _list(section, "pairs")
    column = {wt: j for j, wt in enumerate(types)}
    members, values = [], []
    seen: dict[frozenset, int] = {}
    for p, pair in enumerate(pairs):
        at = f"pairs[{p}]"
        pair = _object(pair, at, PAIR_KEYS)
        for key in PAIR_KEYS:
            if key not in pair:
                raise InputError(f"{at}.{key}", "is required")
        ids = pair["jobs"]
        if not isinstance(ids, list) or len(ids) != 2:
            raise InputError(f"{at}.jobs", f"must be a list of two job ids, got {_show(ids)}")
        index = []
        for m, raw in enumerate(ids):
            jid = _job_id(raw, f"{at}.jobs[{m}]")
            if jid not in job_index:
                raise InputError(f"{at}.jobs[{m}]", f"unknown job {jid!r}")
            index.append(job_index[jid])
        if index[0] == index[1]:
            raise InputError(f"{at}.jobs", "a job cannot be paired with itself")
        key = frozenset(index)
        if key in seen:
            raise InputError(f"{at}.jobs", f"the same two jobs as pairs[{seen[key]}]")
        seen[key] = p
        given = _object(pair["throughputs"], f"{at}.throughputs", None,
                        "an object mapping worker type to [steps/s of first job, of second job]")
        shared = np.zeros((len(types), 2))
        for wt, value in given.items():
            if wt not in column:
                raise InputError(f"{at}.throughputs",
                                 f"unknown worker type {wt!r} (known: {', '.join(types)})")
            if value is None:
                continue
            if not isinstance(value, list) or len(value) != 2:
                raise InputError(f"{at}.throughputs.{wt}",
                                 f"must be a list of two numbers >= 0, got {_show(value)}")
            for m, v in enumerate(value):
                shared[column[wt], m] = _number(v, f"{at}.throughputs.{wt}[{m}]", ">= 0")
        members.append(index)
        values.append(shared)
    return (np.array(members, dtype=np.int64).reshape(-1, 2),
            np.array(values, dtype=float).reshape(-1, len(types), 2))


def _entities(section: Any):
    section = _object(section, "entities", None, "an object mapping entity names to {weight, policy}")
    weights, policies = {}, {}
    for name, spec in section.items():
        path = f"entities.{name}"
        spec = _object(spec, path, ENTITY_KEYS)
        weights[name] = _optional(spec, "weight", 1.0, lambda v: _number(v, f"{path}.weight", "> 0"))
        policy = spec.get("policy")
        if policy is None:
            policy = "fairness"
        if policy not in ENTITY_POLICIES:
            raise InputError(f"{path}.policy",
                             f"must be one of {', '.join(map(repr, ENTITY_POLICIES))}, got {_show(policy)}")
        policies[name] = policy
    return weights, policies


# -- entry points ------------------------------------------------------------
def parse_policy_input(obj: Any) -> PolicyInput:
    """Check a decoded JSON document and build the `PolicyInput` it describes.

    Raises `InputError` naming the first bad field.  `PolicyInput`'s own
    checks (a job that fits no worker type, pairs of different scale factors)
    raise `InputError` too.
    """
    doc = _object(obj, "input", TOP_KEYS, "a JSON object with keys worker_types and jobs")
    for key in ("worker_types", "jobs"):
        if key not in doc:
            raise InputError(key, "is required")
    types, counts, prices, per_node = _worker_types(doc["worker_types"])
    rows, job_index = _jobs(doc["jobs"], types)
    pair_jobs, pair_throughputs = _pairs(doc.get("pairs") or [], types, job_index)
    weights, policies = _entities(doc["entities"]) if doc.get("entities") is not None else ({}, {})
    n = len(rows["id"])
    return PolicyInput(
        worker_types=types,
        counts=counts,
        job_ids=tuple(rows["id"]),
        throughputs=np.array(rows["throughputs"], dtype=float).reshape(n, len(types)),
        scale_factors=np.array(rows["scale_factor"], dtype=np.int64),
        weights=np.array(rows["weight"], dtype=float),
        prices=prices,
        entities=tuple(rows["entity"]),
        steps_remaining=np.array(rows["steps_remaining"], dtype=float),
        time_since_arrival=np.array(rows["time_since_arrival"], dtype=float),
        slo=np.array(rows["slo"], dtype=float),
        pair_jobs=pair_jobs,
        pair_throughputs=pair_throughputs,
        entity_weights=weights,
        entity_policies=policies,
        unconsolidated_throughputs=np.array(rows["throughputs_unconsolidated"],
                                            dtype=float).reshape(n, len(types)),
        gpus_per_node=per_node,
    )


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def parse_json(text: str, source: str = "input") -> Any:
    """Decode JSON text; malformed text (or a key given twice) is an InputError on `source`."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        raise InputError(source, f"malformed JSON at line {err.lineno} column {err.colno}: "
                                 f"{err.msg}") from None
    except _DuplicateKey as err:
        raise InputError(source, f"malformed JSON: key {err.args[0]!r} given twice in one object") from None
    except RecursionError:
        raise InputError(source, "malformed JSON: nested too deeply") from None


def read_text(path_or_dash: str | os.PathLike) -> tuple[str, str]:
    """(text, name) of a file, or of stdin for "-"; unreadable files are InputErrors."""
    if str(path_or_dash) == "-":
        name = "<stdin>"
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read() if stream is not None else sys.stdin.read()
    else:
        name = os.fspath(path_or_dash)
        try:
            with open(name, "rb") as handle:
                data = handle.read()
        except OSError as err:
            raise InputError("--input", f"cannot read {name!r}: {err.strerror or err}") from None
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise InputError(name, f"is not UTF-8 text (byte {err.start})") from None
    return data, name


def load_policy_input(path_or_dash: str | os.PathLike) -> PolicyInput:
    """Read a JSON input document from a file, or from stdin when given "-"."""
    text, name = read_text(path_or_dash)
    return parse_policy_input(parse_json(text, name))


__all__ = ["parse_policy_input", "load_policy_input", "parse_json", "read_text"]
