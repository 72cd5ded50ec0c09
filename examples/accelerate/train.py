"""A plain Accelerate training loop made preemptible by slurm-gavel (docs/accelerate.md).

A small GPT-2 built from a config (nothing is downloaded) learns random token
sequences made from a seed: dropout on, shuffled batches, a linear LR schedule
with warmup, AdamW. The lines marked "gavel" are all that the loop adds. Run it
under Slurm with train.sbatch, or anywhere:

    accelerate launch examples/accelerate/train.py --steps 40
    python -m slurm_gavel.job.accelerate launch --num_processes 1 examples/accelerate/train.py
"""
from slurm_gavel.job.iterator import catch_signal_early                 # gavel
catch_signal_early()                                                    # gavel: first thing

import argparse
import time

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from transformers import GPT2Config, GPT2LMHeadModel

from slurm_gavel.job.accelerate import GavelAccelerateIterator         # gavel


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=8, help="per process")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even with a GPU")
    p.add_argument("--slow", type=float, default=0.0, help="seconds to sleep after each step")
    p.add_argument("--save-final", help="rank 0 writes the final parameters here")
    args = p.parse_args(argv)

    accelerator = Accelerator(                                          # gavel: seedable sampler
        cpu=args.cpu, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    set_seed(args.seed)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    model = GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, config.vocab_size, (args.samples, 12), generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens),
                                         batch_size=args.batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warmup = 3
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / max(1, args.steps - warmup))))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    model.train()
    batches = GavelAccelerateIterator(accelerator, loader, total_steps=args.steps)   # gavel
    for (ids,) in batches:                                              # gavel: was `for ... in loader`
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if accelerator.is_main_process:
            print(f"step {batches.step} loss {loss.item().hex()} lr {scheduler.get_last_lr()[0].hex()}",
                  flush=True)
        if args.slow:
            time.sleep(args.slow)
    if args.save_final and accelerator.is_main_process:
        state = accelerator.unwrap_model(model).state_dict()
        torch.save({k: v.detach().cpu().clone() for k, v in state.items()}, args.save_final)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        print(f"done: {batches.step} steps", flush=True)


if __name__ == "__main__":
    main()
