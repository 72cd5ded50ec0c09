"""Checkpoint save and load time of each job template, and the preemption overhead per round.

    python bench/checkpoint_overhead.py [--repeats 5] [--round 360] [--move-fraction 0.16]

For each template (slurm_gavel/templates/models.py, the sizes the templates
train): build the model on the CPU, train 2 steps (so that optimizer state such
as Adam's moments exists), then measure, `--repeats` times each, the median of

- save: `GavelIterator.checkpoint()` with the template's own save callback
  (torch.save of modules, optimizers and RNG states to a temporary file, fsync,
  rename): what a job pays between the signal and its exit 85;
- load: `GavelIterator(...)` construction, which finds the newest checkpoint and
  calls the template's load callback (torch.load + load_state_dict);
- restart (informational): a fresh Python process importing torch and building
  the template's model and data, which every Slurm requeue also pays.

Overhead is the share of a round (`--round`, 360 s as in the paper) lost to
checkpointing:

- without lease renewal: every round ends with a save and the next starts with a
  load: (save + load) / round;
- with lease renewal (a job that keeps its GPUs in the next round is not
  signalled, which is what the daemon does): only the rounds in which the job
  moves pay: move_fraction * (save + load) / round.

The default move fraction 0.16 is not stated in the paper: it is implied by its
Table 4, whose overheads with renewal are about 0.16 of those without
(LSTM 2.91% -> 0.47%, ResNet-50 1.58% -> 0.25%; seed section 7.6), i.e. the
share of rounds in which a job had to move on the paper's physical cluster.
The "+restart" columns add the process restart to save + load.

Numbers depend on the disk and the page cache (loads right after saves read from
memory); the checkpoint directory is `--dir` (default: a temporary directory).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch
from torch.utils.data import DataLoader

from slurm_gavel.job.iterator import GavelIterator
from slurm_gavel.slurm.jobscript import NAMES
from slurm_gavel.job.templates.models import build
from slurm_gavel.job.templates.train import checkpoint_functions

PAPER_MOVE_FRACTION = 0.16


def measure(name: str, directory: Path, repeats: int) -> dict:
    device = torch.device("cpu")
    job = build(name, 0).to(device)
    job.make_optimizers()
    data = job.data if name == "a3c" else DataLoader(job.data, batch_size=job.batch_size)
    batches = iter(data)
    for _ in range(2):
        job.step(next(batches))
    save, load = checkpoint_functions(job, device)
    ckpt_dir = directory / name
    saver = GavelIterator([None], load, save, checkpoint_dir=ckpt_dir, progress=False)
    saves, loads = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        path = saver.checkpoint()
        saves.append(time.perf_counter() - t0)
        loader = GavelIterator([None], load, save, checkpoint_dir=ckpt_dir, progress=False)
        loads.append(loader.load_seconds)
    params = sum(p.numel() for m in job.modules.values() for p in m.parameters())
    return {"name": name, "params_m": params / 1e6, "mb": path.stat().st_size / 2**20,
            "save": statistics.median(saves), "load": statistics.median(loads)}


def restart_seconds(name: str) -> float:
    code = ("import torch\nfrom slurm_gavel.job.templates.models import build\n"
            f"build({name!r}, 0).make_optimizers()")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--templates", nargs="+", default=list(NAMES), choices=NAMES)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--round", type=float, default=360.0, metavar="SECONDS", dest="round_seconds")
    p.add_argument("--move-fraction", type=float, default=PAPER_MOVE_FRACTION,
                   help="share of rounds in which a job moves, with lease renewal "
                        "(default %(default)s: implied by the paper's Table 4)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dir", type=Path, help="checkpoint directory (default: a temporary one)")
    p.add_argument("--no-restart", action="store_true", help="skip the process restart timing")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gavel-ckpt-bench-")
        args.dir = Path(tmp.name)
    print(f"round {args.round_seconds:g} s, move fraction with renewal {args.move_fraction:g}, "
          f"median of {args.repeats}, torch {torch.__version__}, {args.threads} thread(s), "
          f"checkpoints in {args.dir}")
    header = (f"{'template':<15}{'params M':>9}{'ckpt MB':>9}{'save s':>8}{'load s':>8}"
              f"{'restart s':>10}{'no renewal':>12}{'renewal':>9}{'+restart':>10}{'renewal+r':>11}")
    print(header)
    print("-" * len(header))
    for name in args.templates:
        r = measure(name, args.dir, args.repeats)
        restart = None if args.no_restart else restart_seconds(name)
        io = r["save"] + r["load"]
        without = 100 * io / args.round_seconds
        with_renewal = without * args.move_fraction
        cells = [f"{name:<15}{r['params_m']:>9.2f}{r['mb']:>9.1f}{r['save']:>8.3f}{r['load']:>8.3f}",
                 f"{'-' if restart is None else f'{restart:.2f}':>10}",
                 f"{without:>11.3f}%{with_renewal:>8.3f}%"]
        if restart is not None:
            full = 100 * (io + restart) / args.round_seconds
            cells.append(f"{full:>9.3f}%{full * args.move_fraction:>10.3f}%")
        print("".join(cells), flush=True)
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
