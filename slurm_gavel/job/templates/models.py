"""The template jobs' models and synthetic data: the paper's seven model families, small.

Each `Workload` holds its modules, optimizers, a dataset (the same on every rank
and every restart: made from a fixed seed), and `step(batch)`, one training step.
Sizes are small so that a step takes about a second or less on a CPU; the
architectures are the real ones (ResNet-18/50 with basic/bottleneck blocks,
an encoder-decoder Transformer, a 2-layer LSTM language model, an autoencoder
recommender, CycleGAN's two generators and two discriminators, an advantage
actor-critic). Needs torch.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, TensorDataset

GradSync = Callable[[list], None]        # averages the gradients of these modules over ranks


def _no_sync(_modules) -> None:
    pass


class Workload:
    """Modules, optimizers, data and one training step of a template job."""

    batch_size: int = 4

    def __init__(self):
        self.modules: dict[str, nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.data: Dataset | None = None

    def to(self, device) -> Workload:
        for m in self.modules.values():
            m.to(device)
        self.device = device
        return self

    def make_optimizers(self) -> None:
        raise NotImplementedError

    def step(self, batch, sync: GradSync = _no_sync) -> float:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"modules": {k: m.state_dict() for k, m in self.modules.items()},
                "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()}}

    def load_state_dict(self, state: dict) -> None:
        for k, m in self.modules.items():
            m.load_state_dict(state["modules"][k])
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])

    def _batch(self, batch):
        return [b.to(self.device, non_blocking=True) for b in batch]


def _classes(x: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """Labels that depend on the inputs (a fixed random projection), so loss can fall."""
    w = torch.randn(x[0].numel(), n, generator=g)
    return (x.flatten(1) @ w).argmax(dim=1)


# -- ResNet (CIFAR-style stem for 32x32 images) -------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(width)
        self.short = _shortcut(cin, width, stride)

    def forward(self, x):
        out = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(out)) + self.short(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.c1 = nn.Conv2d(cin, width, 1, bias=False)
        self.b1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.b2 = nn.BatchNorm2d(width)
        self.c3 = nn.Conv2d(width, cout, 1, bias=False)
        self.b3 = nn.BatchNorm2d(cout)
        self.short = _shortcut(cin, cout, stride)

    def forward(self, x):
        out = F.relu(self.b1(self.c1(x)))
        out = F.relu(self.b2(self.c2(out)))
        return F.relu(self.b3(self.c3(out)) + self.short(x))


def _shortcut(cin, cout, stride):
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block, layers, width=64, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        stages, cin = [], width
        for i, n in enumerate(layers):
            w = width * 2 ** i
            for j in range(n):
                stages.append(block(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * block.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ImageClassification(Workload):
    def __init__(self, depth: int, g: torch.Generator, samples=256, classes=10, width=64):
        super().__init__()
        block, layers = {18: (BasicBlock, [2, 2, 2, 2]), 50: (Bottleneck, [3, 4, 6, 3])}[depth]
        self.modules["model"] = ResNet(block, layers, width=width, classes=classes)
        x = torch.randn(samples, 3, 32, 32, generator=g)
        self.data = TensorDataset(x, _classes(x, classes, g))

    def make_optimizers(self):
        self.optimizers["sgd"] = torch.optim.SGD(self.modules["model"].parameters(), lr=0.05,
                                                 momentum=0.9, weight_decay=5e-4)

    def step(self, batch, sync=_no_sync):
        x, y = self._batch(batch)
        model, opt = self.modules["model"], self.optimizers["sgd"]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        sync([model])
        opt.step()
        return loss.item()


# -- Transformer (translation-style encoder-decoder) --------------------------------
class Seq2Seq(nn.Module):
    def __init__(self, vocab=8000, d=256, heads=4, layers=3, ff=1024, length=16):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, length + 1, d))
        self.core = nn.Transformer(d, heads, layers, layers, ff, dropout=0.1, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt_in):
        n = tgt_in.shape[1]
        mask = self.core.generate_square_subsequent_mask(n, device=src.device)
        h = self.core(self.src_emb(src) + self.pos[:, :src.shape[1]],
                      self.tgt_emb(tgt_in) + self.pos[:, :n], tgt_mask=mask)
        return self.out(h)


class Translation(Workload):
    BOS = 1

    def __init__(self, g, samples=512, vocab=8000, length=16):
        super().__init__()
        self.vocab = vocab
        self.modules["model"] = Seq2Seq(vocab=vocab, length=length)
        src = torch.randint(2, vocab, (samples, length), generator=g)
        # "translation": reverse the sentence and map each word through a fixed permutation
        perm = torch.cat([torch.arange(2), 2 + torch.randperm(vocab - 2, generator=g)])
        tgt = perm[src.flip(1)]
        self.data = TensorDataset(src, tgt)

    def make_optimizers(self):
        self.optimizers["adam"] = torch.optim.Adam(self.modules["model"].parameters(), lr=1e-3)

    def step(self, batch, sync=_no_sync):
        src, tgt = self._batch(batch)
        bos = torch.full((tgt.shape[0], 1), self.BOS, dtype=tgt.dtype, device=tgt.device)
        model, opt = self.modules["model"], self.optimizers["adam"]
        opt.zero_grad(set_to_none=True)
        logits = model(src, torch.cat([bos, tgt[:, :-1]], dim=1))
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), tgt.reshape(-1))
        loss.backward()
        sync([model])
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()


# -- LSTM language model -------------------------------------------------------------
class LSTMLM(nn.Module):
    def __init__(self, vocab=10000, emb=200, hidden=200, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, layers, dropout=0.2, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


class LanguageModel(Workload):
    def __init__(self, g, samples=256, vocab=10000, bptt=35):
        super().__init__()
        self.vocab = vocab
        self.modules["model"] = LSTMLM(vocab)
        # a synthetic corpus from a sparse random Markov chain (8 successors per word)
        succ = torch.randint(0, vocab, (vocab, 8), generator=g)
        words = torch.empty(samples * bptt + 1, dtype=torch.long)
        words[0] = 0
        choice = torch.randint(0, 8, (len(words),), generator=g)
        for i in range(1, len(words)):
            words[i] = succ[words[i - 1], choice[i]]
        seqs = words[:-1].view(samples, bptt)
        nxt = words[1:].view(samples, bptt)
        self.data = TensorDataset(seqs, nxt)

    def make_optimizers(self):
        self.optimizers["sgd"] = torch.optim.SGD(self.modules["model"].parameters(), lr=1.0)

    def step(self, batch, sync=_no_sync):
        x, y = self._batch(batch)
        model, opt = self.modules["model"], self.optimizers["sgd"]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, self.vocab), y.reshape(-1))
        loss.backward()
        sync([model])
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss.item()


# -- Recommendation: an autoencoder over users' item vectors (Recoder-style) ---------
class AutoEncoder(nn.Module):
    def __init__(self, items=10000, hidden=(512, 128)):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(items, hidden[0]), nn.SELU(),
                                     nn.Linear(hidden[0], hidden[1]), nn.SELU())
        self.decoder = nn.Sequential(nn.Linear(hidden[1], hidden[0]), nn.SELU(),
                                     nn.Linear(hidden[0], items))
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.decoder(self.drop(self.encoder(x)))


class Recommendation(Workload):
    batch_size = 128

    def __init__(self, g, users=1024, items=10000, factors=16):
        super().__init__()
        self.modules["model"] = AutoEncoder(items)
        # implicit feedback from a low-rank taste model: each user likes ~2% of items
        u = torch.randn(users, factors, generator=g)
        v = torch.randn(items, factors, generator=g)
        score = u @ v.T
        liked = (score > score.quantile(0.98, dim=1, keepdim=True)).float()
        self.data = TensorDataset(liked)

    def make_optimizers(self):
        self.optimizers["adam"] = torch.optim.Adam(self.modules["model"].parameters(), lr=1e-3)

    def step(self, batch, sync=_no_sync):
        (x,) = self._batch(batch)
        model, opt = self.modules["model"], self.optimizers["adam"]
        opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(model(x), x)
        loss.backward()
        sync([model])
        opt.step()
        return loss.item()


# -- CycleGAN --------------------------------------------------------------------------
class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.InstanceNorm2d(c), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, 1, 1), nn.InstanceNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


def generator(c=32, blocks=6):
    return nn.Sequential(
        nn.Conv2d(3, c, 7, 1, 3), nn.InstanceNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, 2 * c, 3, 2, 1), nn.InstanceNorm2d(2 * c), nn.ReLU(),
        *[ResBlock(2 * c) for _ in range(blocks)],
        nn.ConvTranspose2d(2 * c, c, 3, 2, 1, output_padding=1), nn.InstanceNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, 3, 7, 1, 3), nn.Tanh())


def discriminator(c=32):
    return nn.Sequential(                       # a PatchGAN
        nn.Conv2d(3, c, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Conv2d(c, 2 * c, 4, 2, 1), nn.InstanceNorm2d(2 * c), nn.LeakyReLU(0.2),
        nn.Conv2d(2 * c, 1, 4, 1, 1))


class CycleGAN(Workload):
    batch_size = 1                               # as in the paper's table

    def __init__(self, g, samples=128):
        super().__init__()
        self.modules.update(g_ab=generator(), g_ba=generator(), d_a=discriminator(),
                            d_b=discriminator())
        # two "domains": smooth blobs and stripes
        a = F.avg_pool2d(torch.randn(samples, 3, 32, 32, generator=g), 5, 1, 2).tanh()
        stripes = torch.sin(torch.arange(32.0) / 2).view(1, 1, 1, 32)
        b = (stripes * torch.rand(samples, 3, 1, 1, generator=g) * 2 - 0.5).expand(-1, -1, 32, -1)
        self.data = TensorDataset(a, b.contiguous())

    def make_optimizers(self):
        m = self.modules
        self.optimizers["g"] = torch.optim.Adam(list(m["g_ab"].parameters()) +
                                                list(m["g_ba"].parameters()), lr=2e-4,
                                                betas=(0.5, 0.999))
        self.optimizers["d"] = torch.optim.Adam(list(m["d_a"].parameters()) +
                                                list(m["d_b"].parameters()), lr=2e-4,
                                                betas=(0.5, 0.999))

    def step(self, batch, sync=_no_sync):
        real_a, real_b = self._batch(batch)
        m, og, od = self.modules, self.optimizers["g"], self.optimizers["d"]
        gen = [m["g_ab"], m["g_ba"]]
        disc = [m["d_a"], m["d_b"]]
        # generators: LSGAN loss + cycle consistency (10) + identity (5)
        for d in disc:
            d.requires_grad_(False)
        og.zero_grad(set_to_none=True)
        fake_b, fake_a = m["g_ab"](real_a), m["g_ba"](real_b)
        pred_b, pred_a = m["d_b"](fake_b), m["d_a"](fake_a)
        loss_g = (F.mse_loss(pred_b, torch.ones_like(pred_b)) +
                  F.mse_loss(pred_a, torch.ones_like(pred_a)) +
                  10 * (F.l1_loss(m["g_ba"](fake_b), real_a) + F.l1_loss(m["g_ab"](fake_a), real_b)) +
                  5 * (F.l1_loss(m["g_ab"](real_b), real_b) + F.l1_loss(m["g_ba"](real_a), real_a)))
        loss_g.backward()
        sync(gen)
        og.step()
        # discriminators
        for d in disc:
            d.requires_grad_(True)
        od.zero_grad(set_to_none=True)
        loss_d = 0.0
        for d, real, fake in ((m["d_a"], real_a, fake_a), (m["d_b"], real_b, fake_b)):
            pr, pf = d(real), d(fake.detach())
            loss_d = loss_d + 0.5 * (F.mse_loss(pr, torch.ones_like(pr)) +
                                     F.mse_loss(pf, torch.zeros_like(pf)))
        loss_d.backward()
        sync(disc)
        od.step()
        return float(loss_g.item() + loss_d.item())


# -- A3C: advantage actor-critic on a synthetic environment -------------------------
class Episodes:
    """Episode numbers, `per_epoch` of them per epoch; a function of the epoch and rank.

    A data "loader" for the iterator: `set_epoch` makes the order a function of the
    step, so a resumed run plays exactly the episodes the uninterrupted run would.
    """

    def __init__(self, per_epoch=64, rank=0, world_size=1):
        self.per_epoch, self.rank, self.world_size = per_epoch, rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.per_epoch

    def __iter__(self):
        base = self.epoch * self.per_epoch
        return iter([(base + i) * self.world_size + self.rank for i in range(self.per_epoch)])


class SyntheticEnv:
    """Continuous 16-d state, 4 actions; reward for steering coordinate 0 up and 1 to 0."""

    def __init__(self, episode: int, obs=16, actions=4):
        g = torch.Generator().manual_seed(1_000_003)          # the same dynamics everywhere
        self.dynamics = torch.randn(actions, obs, obs, generator=g) * 0.3
        self.g = torch.Generator().manual_seed(episode)       # this episode's randomness
        self.state = torch.randn(obs, generator=self.g)

    def step(self, action: int):
        noise = 0.1 * torch.randn(self.state.shape, generator=self.g)
        self.state = torch.tanh(self.dynamics[action] @ self.state + noise)
        return self.state, float(self.state[0] - self.state[1].abs())


class ActorCritic(nn.Module):
    def __init__(self, obs=16, actions=4, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                  nn.Tanh())
        self.policy = nn.Linear(hidden, actions)
        self.value = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        return self.policy(h), self.value(h).squeeze(-1)


class A3C(Workload):
    batch_size = 1
    rollout, gamma = 20, 0.99

    def __init__(self, g, rank=0, world_size=1):
        super().__init__()
        self.modules["model"] = ActorCritic()
        self.data = Episodes(rank=rank, world_size=world_size)

    def make_optimizers(self):
        self.optimizers["adam"] = torch.optim.Adam(self.modules["model"].parameters(), lr=7e-4)

    def step(self, episode, sync=_no_sync):
        model, opt = self.modules["model"], self.optimizers["adam"]
        env = SyntheticEnv(int(episode))
        state = env.state
        logps, values, rewards, entropies = [], [], [], []
        for _ in range(self.rollout):
            logits, value = model(state.to(self.device))
            dist = torch.distributions.Categorical(logits=logits)
            action = torch.multinomial(dist.probs.detach().cpu(), 1, generator=env.g).item()
            logps.append(dist.log_prob(torch.tensor(action, device=self.device)))
            entropies.append(dist.entropy())
            values.append(value)
            state, reward = env.step(action)
            rewards.append(reward)
        with torch.no_grad():
            ret = model(state.to(self.device))[1]
        policy_loss, value_loss = 0.0, 0.0
        for t in reversed(range(self.rollout)):
            ret = rewards[t] + self.gamma * ret
            adv = ret - values[t]
            value_loss = value_loss + adv.pow(2)
            policy_loss = policy_loss - logps[t] * adv.detach() - 0.01 * entropies[t]
        loss = (policy_loss + 0.5 * value_loss) / self.rollout
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sync([model])
        nn.utils.clip_grad_norm_(model.parameters(), 40.0)
        opt.step()
        return loss.item()


def build(name: str, seed: int, rank: int = 0, world_size: int = 1) -> Workload:
    """The workload of template `name`, with data made from `seed` (no optimizers yet)."""
    g = torch.Generator().manual_seed(seed)
    if name == "resnet18":
        return ImageClassification(18, g)
    if name == "resnet50":
        return ImageClassification(50, g)
    if name == "transformer":
        return Translation(g)
    if name == "lstm":
        return LanguageModel(g)
    if name == "recommendation":
        return Recommendation(g)
    if name == "cyclegan":
        return CycleGAN(g)
    if name == "a3c":
        return A3C(g, rank, world_size)
    raise KeyError(name)
