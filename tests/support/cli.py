"""`slurm-gavel submit`'s command line parsed as the CLI parses it, without running the command."""
from __future__ import annotations

import argparse

from slurm_gavel.cli.submit import register


def parse(argv):
    parser = argparse.ArgumentParser(prog="slurm-gavel")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)
