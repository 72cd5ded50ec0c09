"""What every command shares: where the daemon's files are, how output looks, what an error exits with.

* `--config FILE` and `--db PATH` (`add_config_argument`, `add_database_arguments`) and
  how a command finds the database from them (`config_path`, `database_path`, `reading`);
* output: `align` is the one column aligner of every table, `dumps`/`print_json` the one
  JSON printer (strict JSON: the data is `clean`ed before, so no raw control characters
  and no inf/nan reach it);
* errors: `exit_code` is the one map from an error to the exit code, `fail` prints the
  error as one line on stderr and returns that code.  0 success; 1 the work failed (the
  solver found no optimal allocation, Slurm or the database refused, ...); 2 bad input
  or bad arguments (one line naming the field); 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from ..core.errors import GavelError, InputError, UnknownPolicyError

if TYPE_CHECKING:   # imported where a database is opened: commands without one skip sqlite_utils
    from ..daemon.store import SqliteStore

PROG = "slurm-gavel"
EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


# -- where the daemon's files are --------------------------------------------------------
def add_config_argument(p: argparse.ArgumentParser) -> None:
    """`--config FILE`: the daemon's gavel.toml (read by `config_path`)."""
    p.add_argument("--config", metavar="FILE", help="the daemon's config (default: /etc/slurm/gavel.toml)")


def add_database_arguments(p: argparse.ArgumentParser) -> None:
    """`--db PATH` and `--config FILE`: where a command finds the daemon's database
    (`database_path`); every command that reads it takes these two."""
    p.add_argument("--db", metavar="PATH", help="the daemon's database (default: from --config)")
    add_config_argument(p)


def config_path(args) -> str | None:
    """--config, else /etc/slurm/gavel.toml where it exists, else None (the built-in defaults)."""
    from ..daemon import config as config_mod
    return args.config or (config_mod.DEFAULT_PATH if os.path.exists(config_mod.DEFAULT_PATH) else None)


def database_path(args) -> str:
    """--db, else the database of the config `config_path` finds."""
    if args.db:
        return args.db
    from ..daemon import config as config_mod
    return config_mod.load(config_path(args)).database


@contextmanager
def reading(args, path: str | None = None) -> Iterator[SqliteStore]:
    """The daemon's database (`path`, else `database_path(args)`) opened read-only, closed
    when the block ends.  A damaged database, one whose -wal is gone, or one that lost
    rounds the daemon committed is a StoreError in words (as the daemon and doctor say it),
    never a traceback."""
    from ..daemon.integrity import lost_rounds, refusal
    from ..daemon.store import SqliteStore, StoreDamaged

    store = SqliteStore(path or database_path(args), readonly=True)
    try:
        lost = lost_rounds(store.path, store.db.conn)
        if lost is not None:
            raise lost
        refused = refusal(store.path)
        if refused is not None:       # the daemon found it damaged and stopped (integrity.py)
            raise StoreDamaged(store.path, "was refused by the daemon, which stopped",
                               f"it said: {refused}")
        yield store
    except sqlite3.DatabaseError as e:
        raise store.unreadable(e) from None
    finally:
        store.close()


def job_ids(values: Sequence[str]) -> list[str]:
    """The job ids of repeated `-j ID[,ID]` options, in order."""
    return [i for item in values for i in item.split(",") if i]


# -- output ----------------------------------------------------------------------------
def add_json_argument(p: argparse.ArgumentParser, help: str = "print JSON") -> None:
    """`--json`: the command prints `print_json` of its rows instead of the table."""
    p.add_argument("--json", action="store_true", help=help)


def align(rows: Iterable[Sequence[str]], right: Iterable[int] = (), sep: str = "  ",
          minimum: dict[int, int] | None = None) -> list[str]:
    """Rows of cells as lines of aligned columns: each column as wide as its widest cell (at
    least `minimum[i]`), left-aligned except the column indexes in `right`; no trailing
    blanks (the last column is never padded out), so `awk` and friends split the lines as
    a reader sees them."""
    rows = [[str(c) for c in row] for row in rows]
    right, minimum = set(right), minimum or {}
    widths = [max([minimum.get(c, 0)] + [len(row[c]) for row in rows if c < len(row)])
              for c in range(max((len(row) for row in rows), default=0))]
    return [sep.join(c.rjust(w) if i in right else c.ljust(w)
                     for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]


def hours(seconds: float) -> str:
    """Seconds as H:MM:SS (hours not wrapped at a day), for TIME columns."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def dumps(data, indent: int = 2) -> str:
    """`data` (already `clean`ed: no raw control characters, no inf) as strict JSON."""
    return json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False, default=lambda v: None)


def print_json(data, indent: int = 2) -> None:
    print(dumps(data, indent))


# -- errors ----------------------------------------------------------------------------
def exit_code(err: BaseException) -> int:
    """The exit code of a command that raised `err`: 2 for what the caller got wrong (an
    argument, an input file, a policy name, a file that cannot be written), 1 for work that
    failed (GavelError: the solver, Slurm, the database), 130 for Ctrl-C."""
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(err, (InputError, UnknownPolicyError, OSError)):
        return EXIT_INPUT
    if isinstance(err, GavelError):
        return EXIT_FAILED
    raise err


def one_line(message, limit: int | None = None) -> str:
    """A message (maybe Slurm's, several lines) as one line, cut at `limit` characters."""
    line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    return line if limit is None or len(line) <= limit else line[:limit - 3] + "..."


def fail(err: BaseException, prog: str = PROG, limit: int | None = None) -> int:
    """Say `err` on stderr, one line, and return its exit code (`exit_code`)."""
    if isinstance(err, KeyboardInterrupt):
        print(f"{prog}: interrupted", file=sys.stderr)
    else:
        print(f"{prog}: error: {one_line(err, limit)}", file=sys.stderr)
    return exit_code(err)


__all__ = ["EXIT_FAILED", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "PROG", "add_config_argument",
           "add_database_arguments", "add_json_argument", "align", "config_path", "database_path", "dumps",
           "exit_code", "fail", "hours", "job_ids", "one_line", "print_json", "reading"]
