"""A small, deterministic PyTorch training run through GavelIterator (tests/integration/test_iterator.py).

    python tiny_train.py OUT_DIR TOTAL_STEPS

Seeded CPU training of a two-layer MLP with dropout (so the RNG state matters)
and SGD with momentum (so the optimizer state matters) on 40 synthetic samples,
batch 4, shuffled per epoch by DistributedSampler (order = f(seed, epoch)).
Distributed with gloo when WORLD_SIZE > 1 (RANK, MASTER_ADDR, MASTER_PORT set).

Writes OUT_DIR/batches-<rank>.log ("step s: i,j,k,l" per step, after training
on it), OUT_DIR/final-<rank>.pt (the parameters) when all steps are done.
Environment knobs: TINY_SLEEP (seconds per step, default 0.02),
TINY_CRASH_IN_SAVE=raise|kill (the save writes half a file, then raises or
SIGKILLs its own process), TINY_CHECKPOINT_DIR (default: the iterator's).
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from slurm_gavel.iterator import GavelIterator

SEED = 1234


def main():
    out, total = sys.argv[1], int(sys.argv[2])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(40, 8, generator=g)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    index = torch.arange(40)
    data = TensorDataset(x, y, index)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=SEED)
    loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crash = os.environ.get("TINY_CRASH_IN_SAVE")

    def save(path):
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state()}
        if crash:
            with open(path, "wb") as f:
                f.write(b"half a checkpoint")
                f.flush()
            if crash == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError("disk full (simulated)")
        torch.save(state, path)

    def load(path):
        ck = torch.load(path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["rng"])

    it = GavelIterator(loader, load, save, total_steps=total,
                       checkpoint_dir=os.environ.get("TINY_CHECKPOINT_DIR"))
    sleep = float(os.environ.get("TINY_SLEEP", "0.02"))
    with open(os.path.join(out, f"batches-{rank}.log"), "a") as log:
        for xb, yb, ib in it:
            opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
            loss.backward()
            opt.step()
            log.write(f"step {it.step}: {','.join(str(int(i)) for i in ib)}\n")
            log.flush()
            time.sleep(sleep)
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save({"params": params, "step": it.step, "start": it.start_step},
               os.path.join(out, f"final-{rank}.pt"))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
