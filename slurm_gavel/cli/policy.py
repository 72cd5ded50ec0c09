"""`slurm-gavel policies` and `slurm-gavel solve`: the policy library from the shell.

    slurm-gavel policies [--json]
    slurm-gavel solve --policy NAME --input FILE|- [--agnostic] [--space-sharing] [--json]

`solve` prints the allocation X (fraction of time each job gets on each GPU type) as a
table, or `--json`.  Exit codes as every command (`common.exit_code`): 1 the solver found
no optimal allocation, 2 bad input.
"""
from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from ..core.errors import InputError, UnknownPolicyError
from .common import EXIT_OK, PROG, add_json_argument, align, print_json

PAIR_NOISE = 1e-6   # pair rows below this (solver noise) are left out of the table


def register(commands) -> None:
    """Add `policies` and `solve` to an argparse subparsers object."""
    policies = commands.add_parser("policies", help="list every policy, one line each",
                                   description="List every policy: name, aliases, summary.")
    add_json_argument(policies, "print the list as JSON")
    policies.set_defaults(handler=cmd_policies)

    solve = commands.add_parser(
        "solve", help="compute a policy's allocation for the jobs in a JSON file",
        description="Compute the allocation X (fraction of time each job gets on each GPU "
                    "type) that a policy chooses for the jobs in a JSON input file.")
    solve.add_argument("--policy", required=True, metavar="NAME",
                       help="policy name or alias (see `slurm-gavel policies`)")
    solve.add_argument("--input", required=True, metavar="FILE",
                       help="JSON input file, or - for stdin")
    solve.add_argument("--agnostic", action="store_true",
                       help="heterogeneity-agnostic baseline: the policy sees every job run "
                            "at one speed on every type it fits")
    solve.add_argument("--space-sharing", action="store_true",
                       help="let pairs of jobs share a GPU (uses the input's `pairs`)")
    add_json_argument(solve, "print the allocation as JSON instead of a table")
    solve.set_defaults(handler=cmd_solve)


# -- policies ----------------------------------------------------------------
def _alias_label(name: str, alias) -> str:
    mods = [m for m, on in (("agnostic", alias.agnostic), ("space sharing", alias.space_sharing)) if on]
    return f"{name} ({', '.join(mods)})" if mods else name


def policy_table() -> list[dict]:
    """Every registered policy with its aliases, in registry order."""
    from ..policies import ALIASES, POLICIES

    rows = []
    for name, cls in POLICIES.items():
        aliases = [{"name": a, "agnostic": al.agnostic, "space_sharing": al.space_sharing}
                   for a, al in ALIASES.items() if al.policy == name]
        rows.append({"name": name, "aliases": aliases, "summary": cls.summary,
                     "supports_space_sharing": bool(getattr(cls, "supports_space_sharing", False))})
    return rows


def cmd_policies(args) -> int:
    from ..policies import ALIASES

    rows = policy_table()
    if args.json:
        print_json(rows)
        return EXIT_OK
    lines = []
    for r in rows:
        labels = [_alias_label(a["name"], ALIASES[a["name"]]) for a in r["aliases"]]
        aliases = f"[aliases: {', '.join(labels)}]  " if labels else ""
        lines.append([r["name"], f"{aliases}{r['summary']}"])
    for line in align(lines):
        print(line)
    return EXIT_OK


# -- solve -------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """Plain JSON values; non-finite floats (e.g. an infinite objective) become null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _num(value: float, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def _info_text(value: Any) -> str:
    """A policy's extra fact in one short line; nested details are left to --json."""
    scalar = (str, int, float, bool, np.generic)
    if isinstance(value, scalar):
        return str(value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, scalar) for v in value):
            return ", ".join(map(str, value)) if value else "none"
        return f"{len(value)} {'entry' if len(value) == 1 else 'entries'} (see --json)"
    return "(see --json)"


def format_table(allocation, inp) -> str:
    """The allocation as a readable table (one row per job, then shared pairs)."""
    types = list(allocation.worker_types)
    effective = allocation.effective_throughputs(inp)
    isolated = inp.isolated_throughputs()
    header = ["job"] + types + ["throughput", "normalized"]
    rows = []
    for i, jid in enumerate(allocation.job_ids):
        norm = effective[i] / isolated[i] if isolated[i] > 0 else float("nan")
        rows.append([jid] + [f"{allocation.x[i, j]:.3f}" for j in range(len(types))]
                    + [_num(effective[i]), _num(norm, 3)])
    for r, (a, b) in enumerate(allocation.pair_jobs.tolist()):
        if allocation.x_pairs[r].max() > PAIR_NOISE:
            rows.append([f"{allocation.job_ids[a]}+{allocation.job_ids[b]}"]
                        + [f"{allocation.x_pairs[r, j]:.3f}" for j in range(len(types))] + ["", ""])
    widths = [max(len(str(row[c])) for row in [header] + rows) for c in range(len(header))]
    # the job column left-aligned, the numbers right-aligned
    table = align([header, ["-" * w for w in widths]] + rows, right=range(1, len(header)))

    counts = ", ".join(f"{wt} x{int(c)}" for wt, c in zip(types, inp.counts))
    out = [f"policy {allocation.policy}: {inp.n_jobs} job{'' if inp.n_jobs == 1 else 's'} on {counts}",
           "fraction of time on each GPU type; throughput in steps/s; "
           "normalized = throughput / throughput under the isolated allocation",
           ""] + table
    used = allocation.gpus_used(inp.scale_factors.astype(float))
    out.append("")
    out.append("GPUs in use: " + ", ".join(f"{wt} {u:.2f}/{int(c)}"
                                            for wt, u, c in zip(types, used, inp.counts)))
    out.append(f"objective: {_num(allocation.objective, 6)}"
               f"    solve time: {allocation.solve_seconds:.3f} s")
    for key, value in (allocation.info or {}).items():
        out.append(f"{key}: {_info_text(value)}")
    return "\n".join(out)


def cmd_solve(args) -> int:
    from ..core.inputs import load_policy_input
    from ..policies import make_policy, resolve

    try:
        policy = make_policy(args.policy, agnostic=args.agnostic, space_sharing=args.space_sharing)
    except UnknownPolicyError as err:
        raise InputError("--policy", str(err)) from None
    inp = load_policy_input(args.input)
    sharing = args.space_sharing or resolve(args.policy).space_sharing
    if inp.n_pairs and not sharing:
        print(f"{PROG}: note: the input's {inp.n_pairs} pair(s) are ignored "
              f"without --space-sharing", file=sys.stderr)
    allocation = policy.allocate(inp)
    if args.json:
        print_json(jsonable(allocation.as_dict(inp)))
    else:
        print(format_table(allocation, inp))
    return EXIT_OK


__all__ = ["cmd_policies", "cmd_solve", "format_table", "policy_table", "register"]
