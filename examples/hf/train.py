"""A Hugging Face Trainer script made preemptible by slurm-gavel (docs/huggingface.md).

A small BERT sequence classifier built from a config (nothing is downloaded)
trains on random token sequences made from a seed: dropout on, shuffled batches,
a linear LR schedule with warmup. The lines marked "gavel" are all that a Trainer
script adds. Run it under Slurm with train.sbatch, or anywhere:

    python examples/hf/train.py --steps 40
"""
from slurm_gavel.job.iterator import catch_signal_early          # gavel
catch_signal_early()                                             # gavel: first thing

import argparse
import time

import torch
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)

from slurm_gavel.job.hf import GavelCallback, checkpoint_dir, resume_checkpoint  # gavel


class RandomTokens(torch.utils.data.Dataset):
    """`n` random sequences of `length` tokens with a label each, from `seed`."""

    def __init__(self, n, length, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, vocab, (n, length), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class Slow(TrainerCallback):
    """Sleep after each step: to watch a preemption by hand on a tiny model."""

    def __init__(self, seconds):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main(argv=None, extra_callbacks=()):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output-dir", default=checkpoint_dir("out"),
                   help="checkpoints go here (default: the job's gavel checkpoint directory under "
                        "Slurm, else ./out)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--slow", type=float, default=0.0, help="seconds to sleep after each step")
    p.add_argument("--save-final", help="write the final parameters and the log history here")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2,
                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = BertForSequenceClassification(config)
    data = RandomTokens(args.samples, 12, config.vocab_size, args.seed)
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=3, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=args.seed, use_cpu=True,
        dataloader_num_workers=0)
    callbacks = [GavelCallback()]                                               # gavel
    callbacks += ([Slow(args.slow)] if args.slow else []) + list(extra_callbacks)
    trainer = Trainer(model=model, args=training, train_dataset=data, callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resume_checkpoint(args.output_dir))   # gavel
    if args.save_final and trainer.is_world_process_zero():
        torch.save({"params": {k: v.detach().clone() for k, v in model.state_dict().items()},
                    "log": [{k: e[k] for k in ("step", "loss", "grad_norm", "learning_rate") if k in e}
                            for e in trainer.state.log_history if "loss" in e]},
                   args.save_final)
    print(f"done: {trainer.state.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
