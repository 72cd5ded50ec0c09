"""Run one template job: ``python -m slurm_gavel.job.templates NAME --steps N [--gpus G]``.

The job scripts in ``job_templates/`` end with ``exec`` of this command, so the
Python process is the batch process that ``scancel --batch --signal=USR2``
signals. It trains the template's model on its synthetic data through
`GavelIterator` (checkpoint on the signal, exit 85; resume on restart; stop after
N steps), on CUDA when available, else on the CPU, seeded (``--seed``).

``--gpus G`` > 1 runs G processes on this node: this process is rank 0 and
starts ranks 1..G-1 (``gloo`` on CPU, ``nccl`` with G visible GPUs); gradients
are averaged with all-reduce after each backward pass. Only rank 0 needs the
signal: the iterator reduces the flag, every rank stops after the same step and
exits 85, and this process exits with the ranks' common exit code.

Under ``srun`` (a distributed job: job_templates/distributed/), each task is one
rank and takes its place from Slurm's variables (`slurm_gavel.job.distributed`):
the world has one rank per GPU of the job whatever its shape this run, so that a
run resumed on 1x4 after 2x2 continues exactly.  ``--save-final PATH``: rank 0
saves the trained state there at the end (to compare runs).
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import socket
import subprocess
import sys
import time

NAMES = ("resnet18", "resnet50", "transformer", "lstm", "recommendation", "cyclegan", "a3c")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m slurm_gavel.job.templates",
                                description="Train a gavel template job (preemptible).")
    p.add_argument("name", choices=NAMES)
    p.add_argument("--steps", type=int, required=True, help="total training steps of the job")
    p.add_argument("--gpus", type=int, default=1, help="processes (one per GPU; default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", help="default: the iterator's (see slurm_gavel.job.iterator)")
    p.add_argument("--threads", type=int,
                   help="CPU threads per process (default: SLURM_CPUS_PER_TASK, else torch's)")
    p.add_argument("--log-every", type=int, default=10, metavar="N", help="print the loss every N steps")
    p.add_argument("--save-final", metavar="PATH", help="rank 0 saves the final state here")
    args = p.parse_args(argv)
    if args.steps < 1 or args.gpus < 1:
        p.error("--steps and --gpus must be >= 1")
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    from slurm_gavel.job.iterator import catch_signal_early

    from slurm_gavel.job.distributed import torch_env

    catch_signal_early("USR2")         # before the slow part: importing torch, building
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.update(torch_env(os.environ))     # a task of an srun step: its rank
    if args.gpus > 1 and "RANK" not in os.environ:
        return _launch(args, sys.argv[1:] if argv is None else list(argv))
    return train(args)


def _launch(args, argv) -> int:
    """Rank 0 here, ranks 1.. as child processes; the exit code all ranks agree on."""
    port = _free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(args.gpus))
    children = []
    for rank in range(1, args.gpus):
        children.append(subprocess.Popen(
            [sys.executable, "-m", "slurm_gavel.job.templates", *argv],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank))))
    os.environ.update(env, RANK="0", LOCAL_RANK="0")
    code = 1
    try:
        code = train(args)
    except SystemExit as e:            # the iterator's exit 85 after a checkpoint
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        for child in children:         # they would wait for rank 0 in a collective
            child.kill()
        raise
    finally:
        codes = []
        for child in children:
            try:
                codes.append(child.wait(timeout=600))
            except subprocess.TimeoutExpired:
                child.kill()
                codes.append(child.wait())
    bad = [c for c in [code, *codes] if c != code]
    if bad:
        print(f"gavel: ranks exited with {[code, *codes]}", file=sys.stderr, flush=True)
        return code if code not in (0, 85) else 1
    return code


def checkpoint_functions(job, device):
    """(save, load) callbacks for GavelIterator: the workload's state and the RNG states."""
    import torch

    cuda = device.type == "cuda"

    def save(path):
        state = job.state_dict()
        state["rng"] = torch.get_rng_state()
        state["py_rng"] = random.getstate()
        if cuda:
            state["cuda_rng"] = torch.cuda.get_rng_state()
        torch.save(state, path)

    def load(path):
        state = torch.load(path, map_location=device, weights_only=False)
        job.load_state_dict(state)
        torch.set_rng_state(state["rng"].cpu())
        random.setstate(state["py_rng"])
        if cuda and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu())

    return save, load


def train(args) -> int:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from slurm_gavel.job.iterator import GavelIterator
    from slurm_gavel.job.templates.models import build

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))     # its GPU on this node
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > local
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    threads = args.threads or int(os.environ.get("SLURM_CPUS_PER_TASK") or 0)
    if threads:
        torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(minutes=10))
    random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)

    job = build(args.name, args.seed, rank, world).to(device)
    if world > 1:                      # the same initial weights on every rank
        for m in job.modules.values():
            for t in list(m.parameters()) + list(m.buffers()):
                dist.broadcast(t.data, src=0)
    job.make_optimizers()

    if args.name == "a3c":
        loader = job.data
    else:
        sampler = DistributedSampler(job.data, num_replicas=world, rank=rank, shuffle=True,
                                     seed=args.seed, drop_last=True)
        loader = DataLoader(job.data, batch_size=job.batch_size, sampler=sampler, drop_last=True,
                            pin_memory=cuda)

    def sync(modules):
        if world == 1:
            return
        for m in modules:
            for p in m.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world

    save, load = checkpoint_functions(job, device)

    it = GavelIterator(loader, load, save, checkpoint_dir=args.checkpoint_dir,
                       total_steps=args.steps)
    if rank == 0:
        print(f"gavel template {args.name}: step {it.step}/{args.steps} on {device} "
              f"(world {world}, restart {os.environ.get('SLURM_RESTART_COUNT', '0')}, "
              f"node {os.environ.get('SLURMD_NODENAME', socket.gethostname())}, "
              f"partition {os.environ.get('SLURM_JOB_PARTITION', '-')})", flush=True)
    for m in job.modules.values():
        m.train()
    t0, s0 = time.perf_counter(), it.step
    for batch in it:
        loss = job.step(batch, sync)
        if rank == 0 and (it.step % args.log_every == 0 or it.step == args.steps):
            rate = (it.step - s0) / max(time.perf_counter() - t0, 1e-9)
            print(f"step {it.step}/{args.steps} loss {loss:.4f} ({rate:.2f} steps/s)", flush=True)
    if rank == 0:
        print(f"gavel template {args.name}: done, {it.step} steps", flush=True)
        if args.save_final:
            torch.save(job.state_dict(), args.save_final)
    if world > 1:
        dist.destroy_process_group()
    return 0
