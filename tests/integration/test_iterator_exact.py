"""GavelIterator resumes exactly: every loss and the final parameters of a run preempted
by real signals equal those of an uninterrupted run, bitwise.

Each "script" below is a small real training run on the CPU (dropout, so the RNG
matters; SGD with momentum, so the optimizer matters) whose save/load are the
README's: model, optimizer and scheduler only, no RNG. A preemption is a real
SIGUSR2 to this process under a fake Slurm environment; the iterator exits 85
(SystemExit), and the next "start" of the script builds everything afresh, seeds
like a new process would, and resumes from the checkpoint.
"""
from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.torch_import import import_torch  # noqa: E402

from slurm_gavel.job.iterator import GavelIterator, list_checkpoints  # noqa: E402
from slurm_gavel.job.progress import read_progress  # noqa: E402

torch = import_torch()
np = pytest.importorskip("numpy")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

SAMPLES, BATCH = 24, 4          # 6 batches an epoch


@pytest.fixture
def slurm(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "GAVEL_")):
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(tmp_path))
    before = signal.getsignal(signal.SIGUSR2)
    yield tmp_path
    signal.signal(signal.SIGUSR2, before)


def prefetching(iterable):
    """A consumer that fetches the next batch before it hands out (and trains) the
    current one, as Lightning's data fetcher does."""
    source = iter(iterable)
    try:
        current = next(source)
    except StopIteration:
        return
    while True:
        try:
            following = next(source)
        except StopIteration:
            yield current
            return
        yield current
        current = following


class Script:
    """One start of a training script; `losses`/`seen` collect what every start trained."""

    def __init__(self, losses, seen, sampler="shuffle", extra_rng=False, save_rng=False):
        self.losses, self.seen, self.extra_rng, self.save_rng = losses, seen, extra_rng, save_rng
        torch.manual_seed(0)                 # what the script does first, in every start
        random.seed(0)
        np.random.seed(0)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(SAMPLES, 6, generator=g)
        y = (x.sum(1, keepdim=True) > 0).float()
        data = TensorDataset(x, y, torch.arange(SAMPLES))
        if sampler == "shuffle":
            self.loader = DataLoader(data, batch_size=BATCH, shuffle=True)
        elif sampler == "stateful":      # torchdata's StatefulDataLoader, shuffled
            from torchdata.stateful_dataloader import StatefulDataLoader
            self.loader = StatefulDataLoader(data, batch_size=BATCH, shuffle=True)
        elif sampler == "generator":     # shuffled by a generator of the script's own
            self.loader = DataLoader(data, batch_size=BATCH, shuffle=True,
                                     generator=torch.Generator().manual_seed(7))
        else:
            self.loader = DataLoader(data, batch_size=BATCH,
                                     sampler=DistributedSampler(data, 1, 0, shuffle=True, seed=5))
        self.model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 1, 0.8)

    def save(self, path):
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                    "sched": self.sched.state_dict(),
                    **({"rng": torch.get_rng_state()} if self.save_rng else {})}, path)

    def load(self, path):
        ck = torch.load(path)
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["opt"])
        self.sched.load_state_dict(ck["sched"])
        if self.save_rng:
            torch.set_rng_state(ck["rng"])

    def train_step(self, batch):
        xb, yb, ib = batch
        self.opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(self.model(xb), yb)
        if self.extra_rng:          # python's and numpy's RNGs matter too
            loss = loss * (1 + 0.01 * random.random()) * (1 + 0.01 * float(np.random.rand()))
        loss.backward()
        self.opt.step()
        self.losses.append(loss.item())
        self.seen.append([int(i) for i in ib])

    def params(self):
        return {k: v.clone() for k, v in self.model.state_dict().items()}


def preempt_after(it, step, stops):
    """Signal (really) once `step` steps are trained, if `step` is a chosen stop."""
    if step in stops:
        stops.discard(step)
        os.kill(os.getpid(), signal.SIGUSR2)


def run(body, stops):
    """Start the script until it ends without being preempted; returns its result and
    the number of preemptions (each an exit 85)."""
    stops, exits = set(stops), 0
    while True:
        try:
            return body(stops), exits
        except SystemExit as e:
            assert e.code == 85
            exits += 1


def assert_same(a, b):
    (res_a, losses_a, seen_a), (res_b, losses_b, seen_b) = a, b
    assert seen_a == seen_b                      # the same samples in the same order
    assert losses_a == losses_b                  # every loss, bitwise
    assert res_a.keys() == res_b.keys()
    for k in res_a:
        assert torch.equal(res_a[k], res_b[k]), k


def single_loop(sampler="shuffle", extra_rng=False, total=15, prefetch=None, **kw):
    losses, seen = [], []
    save_rng = kw.get("restore_rng") is False
    if prefetch is not None:
        kw["prefetch"] = prefetch

    def body(stops):
        s = Script(losses, seen, sampler, extra_rng, save_rng)
        it = GavelIterator(s.loader, s.load, s.save, total_steps=total, **kw)
        batches = prefetching(it) if prefetch else it
        trained = it.step
        for batch in batches:
            s.train_step(batch)
            trained += 1
            preempt_after(it, trained, stops)
        it.close()
        return s.params()
    return body, losses, seen


def outcome(make, stops, **kw):
    body, losses, seen = make(**kw)
    result, exits = run(body, stops)
    assert exits == len(stops)
    return result, losses, seen


def test_shuffled_loader_resumes_in_the_same_order(slurm):
    # DataLoader(shuffle=True): a RandomSampler without a generator or set_epoch
    plain = outcome(single_loop, set())
    stopped = outcome(single_loop, {3, 8, 13})     # mid-epoch each time
    assert_same(stopped, plain)
    assert sorted(i for b in stopped[2][:6] for i in b) == list(range(SAMPLES))


def test_rng_is_restored_without_the_script_saving_it(slurm):
    # data order by set_epoch (fine before), dropout + python + numpy random in training
    plain = outcome(single_loop, set(), sampler="distributed", extra_rng=True)
    stopped = outcome(single_loop, {2, 6, 11}, sampler="distributed", extra_rng=True)
    assert_same(stopped, plain)


def test_prefetching_consumer_skips_no_batch(slurm):
    plain = outcome(single_loop, set(), prefetch=1)
    stopped = outcome(single_loop, {2, 6, 12}, prefetch=1)
    assert len(stopped[1]) == 15
    assert_same(stopped, plain)


def test_prefetching_consumer_gets_done_only_after_the_last_trained_step(slurm):
    s = Script([], [])
    it = GavelIterator(s.loader, s.load, s.save, total_steps=8, prefetch=1, progress_interval=0)
    for batch in prefetching(it):
        s.train_step(batch)
        events = [r["event"] for r in read_progress(it.progress_path)]
        assert "done" not in events, f"done written before step {len(s.losses)} was trained"
    assert len(s.losses) == 8
    it.close()
    last = read_progress(it.progress_path)[-1]
    assert last["event"] == "done" and last["step"] == 8


def test_asking_for_batches_after_done_is_an_error_not_a_spin(slurm):
    # an epoch loop that outlives total_steps (Lightning with max_epochs) must not spin
    s = Script([], [])
    it = GavelIterator(s.loader, s.load, s.save, total_steps=8, prefetch=1)
    with pytest.raises(RuntimeError, match="all 8 steps are done"):
        for _epoch in range(1000):
            for batch in prefetching(it):
                s.train_step(batch)
    assert len(s.losses) == 8
    assert [r["event"] for r in read_progress(it.progress_path)][-1] == "done"
    it.close()


def per_epoch(epochs=3, sampler="shuffle"):
    """The README recipe on a per-epoch script: an eval that draws random numbers and a
    scheduler step after every epoch."""
    losses, seen = [], []

    def body(stops):
        s = Script(losses, seen, sampler)
        it = GavelIterator(s.loader, s.load, s.save, epochs=epochs)
        for epoch in it.epochs(start=1):
            s.model.train()
            for batch in it:
                s.train_step(batch)
                preempt_after(it, it.step, stops)
            s.model.eval()
            losses.append(("eval", epoch, torch.rand(1).item(), s.opt.param_groups[0]["lr"]))
            s.sched.step()
        return s.params()
    return body, losses, seen


def test_per_epoch_loop_with_scheduler_and_eval_resumes_exactly(slurm):
    plain = outcome(per_epoch, set())
    assert [e[:2] for e in plain[1] if isinstance(e, tuple)] == [("eval", 1), ("eval", 2),
                                                                 ("eval", 3)]
    # 6 = the last step of epoch 1 (its eval and scheduler step still to come), 9 mid-epoch
    stopped = outcome(per_epoch, {6, 9, 16})
    assert_same(stopped, plain)
    # done: the checkpoints (step 16 the last) are gone with their directory
    assert not (slurm / ".gavel" / "31.ckpt").exists()


@pytest.mark.parametrize("sampler", ["generator", "stateful"])
def test_other_shuffled_loaders_resume_in_the_same_order(slurm, sampler):
    if sampler == "stateful":
        pytest.importorskip("torchdata.stateful_dataloader")
    plain = outcome(single_loop, set(), sampler=sampler)
    stopped = outcome(single_loop, {4, 9}, sampler=sampler)
    assert_same(stopped, plain)


@pytest.mark.parametrize("stops", [{6, 12}, {5, 11, 13}])
def test_prefetching_consumer_preempted_at_epoch_boundaries(slurm, stops):
    # the batch fetched ahead is the next epoch's first: its order drawn again, exactly
    plain = outcome(single_loop, set(), prefetch=1, total=18)
    stopped = outcome(single_loop, stops, prefetch=1, total=18)
    assert_same(stopped, plain)


def test_restore_rng_false_leaves_the_rng_to_the_script(slurm):
    # the script saves and loads torch's RNG itself; the iterator must not undo that,
    # and the shuffled order is still exact
    plain = outcome(single_loop, set(), restore_rng=False)
    stopped = outcome(single_loop, {3, 10}, restore_rng=False)
    assert_same(stopped, plain)


class ShufflingLoader:
    """Shuffles with python's `random` when an epoch's iterator is made (no set_epoch)."""

    def __len__(self):
        return 5

    def __iter__(self):
        order = list(range(5))
        random.shuffle(order)
        return iter(order)


def python_script(record):
    def body(stops):
        random.seed(3)
        state = {"x": 0.0}

        def save(path):
            with open(path, "w") as f:
                f.write(repr(state["x"]))

        def load(path):
            with open(path) as f:
                state["x"] = float(f.read())
        it = GavelIterator(ShufflingLoader(), load, save, total_steps=14)
        for b in it:
            state["x"] += b * random.random()        # training draws from it too
            record.append((b, state["x"]))
            preempt_after(it, it.step, stops)
        return state["x"]
    return body


@pytest.mark.parametrize("stops", [{2, 7, 11}, {5, 10}])   # mid-epoch; epoch boundaries
def test_a_loader_shuffling_with_pythons_random_resumes_exactly(slurm, stops):
    plain, stopped = [], []
    assert run(python_script(plain), set()) == (plain[-1][1], 0)
    assert run(python_script(stopped), stops) == (plain[-1][1], len(stops))
    assert stopped == plain
