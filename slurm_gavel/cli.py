"""The `slurm-gavel` command: a thin layer over the policy library.

    slurm-gavel policies [--json]
    slurm-gavel solve --policy NAME --input FILE|- [--agnostic] [--space-sharing] [--json]

Exit codes: 0 success, 1 the solver found no optimal allocation, 2 bad input
or bad arguments (one line on stderr naming the field).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Sequence

import numpy as np

from . import __version__
from .errors import GavelError, InputError, SolverError, UnknownPolicyError

PROG = "slurm-gavel"
EXIT_OK, EXIT_SOLVER, EXIT_INPUT = 0, 1, 2
PAIR_NOISE = 1e-6   # pair rows below this (solver noise) are left out of the table


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other input error."""

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Heterogeneity-aware GPU scheduling policies "
                                            "(Gavel, OSDI '20) for Slurm clusters.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    policies = commands.add_parser("policies", help="list every policy, one line each",
                                   description="List every policy: name, aliases, summary.")
    policies.add_argument("--json", action="store_true", help="print the list as JSON")

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
    solve.add_argument("--json", action="store_true",
                       help="print the allocation as JSON instead of a table")
    return parser


# -- policies ----------------------------------------------------------------
def _alias_label(name: str, alias) -> str:
    mods = [m for m, on in (("agnostic", alias.agnostic), ("space sharing", alias.space_sharing)) if on]
    return f"{name} ({', '.join(mods)})" if mods else name


def policy_table() -> list[dict]:
    """Every registered policy with its aliases, in registry order."""
    from .policies import ALIASES, POLICIES

    rows = []
    for name, cls in POLICIES.items():
        aliases = [{"name": a, "agnostic": al.agnostic, "space_sharing": al.space_sharing}
                   for a, al in ALIASES.items() if al.policy == name]
        rows.append({"name": name, "aliases": aliases, "summary": cls.summary,
                     "supports_space_sharing": bool(getattr(cls, "supports_space_sharing", False))})
    return rows


def cmd_policies(args) -> int:
    from .policies import ALIASES

    rows = policy_table()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        labels = [_alias_label(a["name"], ALIASES[a["name"]]) for a in r["aliases"]]
        aliases = f"[aliases: {', '.join(labels)}]  " if labels else ""
        print(f"{r['name']:<{width}}  {aliases}{r['summary']}")
    return EXIT_OK


# -- solve -------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    """Plain JSON values; non-finite floats (e.g. an infinite objective) become null."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
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

    def line(cells):
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{c:>{w}}" for c, w in zip(cells[1:], widths[1:])]
        return "  ".join([first] + rest).rstrip()

    counts = ", ".join(f"{wt} x{int(c)}" for wt, c in zip(types, inp.counts))
    out = [f"policy {allocation.policy}: {inp.n_jobs} job{'' if inp.n_jobs == 1 else 's'} on {counts}",
           "fraction of time on each GPU type; throughput in steps/s; "
           "normalized = throughput / throughput under the isolated allocation",
           "", line(header), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
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
    from .inputs import load_policy_input
    from .policies import make_policy, resolve

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
        print(json.dumps(_jsonable(allocation.as_dict(inp)), indent=2))
    else:
        print(format_table(allocation, inp))
    return EXIT_OK


def _one_line(message: str) -> str:
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, usage errors
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_INPUT)
    handler = {"policies": cmd_policies, "solve": cmd_solve}[args.command]
    try:
        return handler(args)
    except (InputError, UnknownPolicyError) as err:
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_INPUT
    except SolverError as err:
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_SOLVER
    except GavelError as err:
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_SOLVER
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python's
        # final flush of stdout from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
