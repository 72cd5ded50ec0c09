"""A small PyTorch Lightning job made preemptible by slurm-gavel (docs/lightning.md).

A tiny MLP with dropout on random data made from a seed, shuffled every epoch by a
StatefulDataLoader, an LR schedule that steps per epoch. Each trained step prints
``step S epoch E lr LR loss LOSS`` (floats in hex, exact), so runs can be compared bit
for bit; ``--save-final PATH`` saves the final parameters once training is complete.
The lines marked ``# gavel`` are all that slurm-gavel needs.
"""
from slurm_gavel.job.lightning import GavelCallback, catch_signal_early   # gavel
catch_signal_early()                                                        # gavel

import argparse  # noqa: E402  (after catching the signal: imports take a while)

import lightning.pytorch as L  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler  # noqa: E402


class Model(L.LightningModule):
    def __init__(self, features: int, lr: float):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        if self.trainer.is_global_zero:
            print(f"step {self.global_step + 1} epoch {self.current_epoch} lr {float(lr).hex()} "
                  f"loss {loss.item().hex()}", flush=True)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7),
                                 "interval": "epoch"}}


def main(argv=None, extra_callbacks=()):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=1,
                        help="processes (DDP on the CPU when more than one; under Slurm one task each)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="sleep after each step (makes a tiny model slow enough to preempt)")
    parser.add_argument("--save-final", help="save the final parameters here")
    args = parser.parse_args(argv)

    L.seed_everything(args.seed, verbose=False)
    x = torch.randn(args.samples, args.features)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(args.samples, 1)
    dataset = torch.utils.data.TensorDataset(x, y)
    if args.devices > 1:
        data = {"datamodule": ShardedData(dataset, args.batch_size, args.seed)}
    else:
        data = {"train_dataloaders": StatefulDataLoader(dataset, batch_size=args.batch_size, shuffle=True)}
    model = Model(args.features, lr=0.05)
    gavel = GavelCallback()                                                 # gavel
    callbacks = [gavel, *extra_callbacks]                                   # gavel
    if args.step_seconds:
        callbacks.append(Sleep(args.step_seconds))
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto",
                        use_distributed_sampler=args.devices == 1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=callbacks)
    trainer.fit(model, **data, ckpt_path=gavel.resume_path())               # gavel
    if not trainer.is_global_zero:
        return
    print(f"done: {trainer.global_step} steps, {trainer.current_epoch} epochs", flush=True)
    if args.save_final:
        torch.save(model.state_dict(), args.save_final)


class ShardedData(L.LightningDataModule):
    """With DDP, each rank's shuffled shard from torchdata's StatefulDistributedSampler, made
    once the ranks are known: its position is saved in the checkpoint, so a resumed run takes
    the next batch of the same order. (Lightning's own wrapper around a shuffling loader draws
    a new order when it restarts; GavelCallback refuses it.)"""

    def __init__(self, dataset, batch_size: int, seed: int):
        super().__init__()
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed

    def train_dataloader(self):
        sampler = StatefulDistributedSampler(self.dataset, num_replicas=self.trainer.world_size,
                                             rank=self.trainer.global_rank, shuffle=True, seed=self.seed)
        return StatefulDataLoader(self.dataset, batch_size=self.batch_size, sampler=sampler)


class Sleep(L.Callback):
    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_train_batch_end(self, *args):
        import time
        time.sleep(self.seconds)


if __name__ == "__main__":
    main()
