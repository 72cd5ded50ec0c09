"""`slurm-gavel throughputs show|import|export`: the throughput table the daemon learns.

    slurm-gavel throughputs show   [--db PATH | --config FILE] [--pairs] [--model NAME] [--json]
    slurm-gavel throughputs import FILE [--db PATH | --config FILE] [--format json|csv] [--replace]
                                        [--samples N]
    slurm-gavel throughputs export FILE|- [--db PATH | --config FILE] [--format json|csv]

`show` prints what the daemon's database holds: the measured throughputs per
model (smoothed steps/s and how many samples), and for each active job the
estimate per GPU type the policy was last given, where it came from
(measured, learned from other jobs of its model, reference table,
fingerprint, exploration, ...) and its confidence.

`import` loads a table into the database as per-model measurements (the
daemon reads them when it starts, and keeps smoothing them with what it
measures); `export` writes the per-model measurements out.  Two layouts:
Gavel's JSON (solo, pair and ``_unconsolidated`` entries; see
`estimator.table.ThroughputTable`) and a plain CSV with the header
``model,worker_type,scale_factor,steps_per_second`` (solo throughputs of
jobs on one server only).

Exit codes: 0 done, 2 bad input (one line on stderr naming the file and line,
or the field), 1 any other failure (e.g. no database).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

from ..core.display import clean
from ..core.errors import GavelError, InputError
from ..estimator.table import UNCONSOLIDATED_SUFFIX, ThroughputTable
from ..core.files import atomic_write
from ..daemon.views import throughputs
from .common import (add_database_arguments, add_json_argument, align, database_path, dumps, fail,
                     reading)

CSV_FIELDS = ("model", "worker_type", "scale_factor", "steps_per_second")
FORMATS = ("json", "csv")


def register(commands) -> argparse.ArgumentParser:
    """Add `throughputs show|import|export` to an argparse subparsers object."""
    p = commands.add_parser(
        "throughputs", help="the learned throughput table: show, import, export",
        description="Show the throughputs the daemon measured and estimated (per model and per "
                    "active job, with sample counts and confidence), or import/export the "
                    "per-model measurements in Gavel's JSON layout or a plain CSV.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    show = sub.add_parser("show", help="measured throughputs per model, estimates per active job")
    add_database_arguments(show)
    show.add_argument("--pairs", action="store_true", help="also the throughputs measured in pairs")
    show.add_argument("--model", action="append", default=[], metavar="NAME", help="only this model")
    add_json_argument(show)
    imp = sub.add_parser("import", help="load a table into the database as per-model measurements")
    imp.add_argument("file", metavar="FILE")
    add_database_arguments(imp)
    imp.add_argument("--format", choices=FORMATS, help="default: from the file name (.json/.csv)")
    imp.add_argument("--replace", action="store_true",
                     help="drop every per-model measurement first (default: add to them)")
    imp.add_argument("--samples", type=int, default=1, metavar="N",
                     help="sample count the imported values start with (default: %(default)s)")
    exp = sub.add_parser("export", help="write the per-model measurements to a file")
    exp.add_argument("file", metavar="FILE", help="output file, or - for stdout")
    add_database_arguments(exp)
    exp.add_argument("--format", choices=FORMATS, help="default: from the file name; JSON for -")
    p.set_defaults(handler=cmd_throughputs)
    return p


def cmd_throughputs(args) -> int:
    """Handler of `throughputs`: 0 ok, 2 bad input, 1 failure (one line on stderr)."""
    try:
        return {"show": _show, "import": _import, "export": _export}[args.action](args)
    except (GavelError, OSError) as err:    # called directly by `main` below and by tests
        return fail(err)


def main(argv: Sequence[str] | None = None) -> int:
    """`slurm-gavel throughputs ...` on its own parser (the tests call it)."""
    parser = argparse.ArgumentParser(prog="slurm-gavel")
    register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 2
    return args.handler(args)


def _database(args) -> str:
    return database_path(args)


# -- reading tables ----------------------------------------------------------------------
def _format(path: str, given: str | None, default: str | None = None) -> str:
    if given:
        return given
    suffix = Path(path).suffix.lower()
    if suffix in (".json", ".csv"):
        return suffix[1:]
    if default:
        return default
    raise InputError(path, "cannot tell the format from the file name: give --format json or csv")


def read_rows(path: str, fmt: str | None = None) -> list[dict]:
    """Per-model rows (model, scale_factor, worker_type, partner, spread, steps_per_second) of a file."""
    fmt = _format(path, fmt)
    if fmt == "json":
        return table_rows(ThroughputTable.from_gavel_json(path))
    return _read_csv(path)


def table_rows(table: ThroughputTable) -> list[dict]:
    """A table as per-model rows; pairs become one row per side."""
    rows: dict[tuple, float] = {}

    def put(model, sf, wt, partner, spread, value):
        rows.setdefault((model, sf, wt, partner, spread), float(value))

    for spread, solos, pairs in ((0, table.solo_by_type, table.pairs_by_type),
                                 (1, table.unconsolidated_solo_by_type, table.unconsolidated_pairs_by_type)):
        for wt, entries in solos.items():
            for (model, sf), value in entries.items():
                put(model, sf, wt, "", spread, value)
        for wt, entries in pairs.items():
            for (model, sf), others in entries.items():
                for (other, osf), (ta, tb) in others.items():
                    if osf != sf:          # Gavel pairs jobs of one scale factor only
                        continue
                    put(model, sf, wt, other, spread, ta)
                    put(other, sf, wt, model, spread, tb)
    return [{"model": k[0], "scale_factor": k[1], "worker_type": k[2], "partner": k[3], "spread": k[4],
             "steps_per_second": v} for k, v in rows.items()]


def _read_csv(path: str) -> list[dict]:
    try:
        with open(path, newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except UnicodeDecodeError:
        raise InputError(path, "not a UTF-8 text file") from None
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}:1", f"empty file: expected the header {','.join(CSV_FIELDS)}") from None
    except csv.Error as e:
        raise InputError(f"{path}:1", f"not valid CSV: {e}") from None
    header = [h.strip() for h in header]
    if sorted(header) != sorted(CSV_FIELDS):
        raise InputError(f"{path}:1", f"expected the header {','.join(CSV_FIELDS)} (any order), "
                                      f"got {','.join(header)}")
    col = {name: header.index(name) for name in CSV_FIELDS}
    rows, seen = [], {}
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise InputError(f"{path}:{reader.line_num}", f"not valid CSV: {e}") from None
        where = f"{path}:{reader.line_num}"
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            raise InputError(where, f"expected {len(header)} fields, got {len(fields)}")
        model = fields[col["model"]].strip()
        wt = fields[col["worker_type"]].strip()
        if not model:
            raise InputError(where, "model is empty")
        if not wt:
            raise InputError(where, "worker_type is empty")
        sf_text = fields[col["scale_factor"]].strip()
        try:
            sf = int(sf_text)
        except ValueError:
            raise InputError(where, f"scale_factor must be an integer, got {sf_text!r}") from None
        if sf < 1:
            raise InputError(where, f"scale_factor must be >= 1, got {sf}")
        v_text = fields[col["steps_per_second"]].strip()
        try:
            value = float(v_text)
        except ValueError:
            raise InputError(where, f"steps_per_second must be a number, got {v_text!r}") from None
        if not (math.isfinite(value) and value >= 0):
            raise InputError(where, f"steps_per_second must be a finite number >= 0, got {v_text!r}")
        spread = 0
        if wt.endswith(UNCONSOLIDATED_SUFFIX):
            wt, spread = wt[: -len(UNCONSOLIDATED_SUFFIX)], 1
        key = (model, sf, wt, spread)
        if key in seen:
            raise InputError(where, f"{model!r} on {wt} at scale factor {sf} is already given on line {seen[key]}")
        seen[key] = reader.line_num
        rows.append({"model": model, "scale_factor": sf, "worker_type": wt, "partner": "",
                     "spread": spread, "steps_per_second": value})
    return rows


# -- writing tables ----------------------------------------------------------------------
def rows_table(rows: Sequence[dict]) -> tuple[ThroughputTable, int]:
    """Per-model rows as a ThroughputTable; also how many pair rows lacked their other side."""
    solo, pairs, usolo, upairs = {}, {}, {}, {}
    types: dict[str, None] = {}
    by_key = {(r["model"], r["scale_factor"], r["worker_type"], r["partner"], int(r["spread"])):
              float(r["steps_per_second"]) for r in rows}
    missing = 0
    for (model, sf, wt, partner, spread), value in by_key.items():
        types.setdefault(wt)
        if not partner:
            (usolo if spread else solo).setdefault(wt, {})[(model, sf)] = value
            continue
        other = by_key.get((partner, sf, wt, model, spread))
        if other is None:
            missing += 1
            continue
        (upairs if spread else pairs).setdefault(wt, {}).setdefault((model, sf), {})[(partner, sf)] = (value, other)
    base = tuple(wt for wt in types if wt in solo or wt in pairs)
    for wt in list(usolo) + list(upairs):       # an unconsolidated table needs a consolidated one
        if wt not in base:
            base += (wt,)
            solo.setdefault(wt, {})
    return ThroughputTable(base, solo, pairs, usolo, upairs), missing


def csv_text(rows: Sequence[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in rows:
        if r["partner"]:
            continue
        wt = r["worker_type"] + (UNCONSOLIDATED_SUFFIX if int(r["spread"]) else "")
        writer.writerow([r["model"], wt, int(r["scale_factor"]), repr(float(r["steps_per_second"]))])
    return out.getvalue()


# -- the actions --------------------------------------------------------------------------
def _import(args) -> int:
    from ..daemon.store import SqliteStore

    if args.samples < 1:
        raise InputError("--samples", f"must be >= 1, got {args.samples}")
    rows = read_rows(args.file, args.format)
    if not rows:
        raise InputError(args.file, "no throughputs in the file")
    now = time.time()
    for r in rows:
        r["samples"], r["updated"] = args.samples, now
    path = _database(args)
    store = SqliteStore(path)
    try:
        if args.replace:
            store.replace_measured_throughputs(rows)
        else:
            store.save_throughputs(rows, [])
    finally:
        store.close()
    solo = sum(1 for r in rows if not r["partner"])
    print(f"slurm-gavel: imported {len(rows)} throughputs ({solo} alone, {len(rows) - solo} in pairs) "
          f"from {args.file} into {path}", file=sys.stderr)
    return 0


def _measured_rows(args) -> list[dict]:

    with reading(args) as store:
        model_rows, _ = store.load_throughputs()
        return model_rows


def _export(args) -> int:
    fmt = _format(args.file, args.format, default="json" if args.file == "-" else None)
    rows = _measured_rows(args)
    if fmt == "csv":
        text = csv_text(rows)
    else:
        table, missing = rows_table(rows)
        if missing:
            print(f"slurm-gavel: {missing} pair throughputs left out: the other job of the pair was "
                  f"never measured", file=sys.stderr)
        text = json.dumps(table.to_gavel_dict(), indent=4) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
    else:
        atomic_write(Path(args.file), text)
        print(f"slurm-gavel: exported {len(rows)} throughputs to {args.file}", file=sys.stderr)
    return 0


def show_text(data: dict) -> str:
    lines = []
    measured = data["measured"]
    lines.append("MEASURED (per model; smoothed steps/s)")
    if not measured:
        lines.append("  (nothing measured yet)")
    else:
        rows = [["MODEL", "GPUS", "TYPE", "PARTNER", "PLACEMENT", "STEPS/S", "SAMPLES"]]
        rows += [[r["model"], r["scale_factor"], r["worker_type"], r["partner"] or "-",
                  "spread" if r["spread"] else "packed", _number(r["steps_per_second"]), r["samples"]]
                 for r in measured]
        lines += ["  " + line for line in align(rows, right=(1, 5, 6), sep=" ", minimum={2: 8, 5: 10})]
    lines.append("")
    lines.append("ESTIMATES (active jobs; what the policy was last given)")
    estimates = data["estimates"]
    if not estimates:
        lines.append("  (no active job has been estimated)")
    else:
        # PHASE is set off by two blanks: its cell starts with one more
        rows = [["JOBID", "MODEL", "GPUS", "TYPE", "STEPS/S", "KIND", "CONF", "SAMPLES", " PHASE"]]
        for e in estimates:
            phase = e["phase"] + (f" (like {e['proxy']})" if e["phase"] == "fingerprint" and e["proxy"] else "")
            rows.append([e["job"], e["model"], e["scale_factor"], e["worker_type"],
                         _number(e["steps_per_second"]), e["kind"], f"{e['confidence']:.2f}",
                         e["samples"], " " + phase])
        lines += ["  " + line for line in align(rows, right=(2, 4, 6, 7), sep=" ",
                                                 minimum={3: 8, 4: 10, 5: 11, 6: 5})]
    return "\n".join(lines)


def _number(value) -> str:
    """A steps/s of `clean`ed data: inf and nan are strings there, shown as "-"."""
    return "-" if value is None or isinstance(value, str) else f"{value:.4g}"


def _show(args) -> int:

    with reading(args) as store:
        data = clean(throughputs(store, args.model, args.pairs))    # models, jobs: users' text
    print(dumps(data) if args.json
          else show_text(data))
    return 0


__all__ = ["CSV_FIELDS", "cmd_throughputs", "csv_text", "main", "read_rows", "register", "rows_table",
           "show_text", "table_rows"]
