#!/usr/bin/env python3
"""How well the throughput estimator fills in hidden entries of Gavel's measured table.

Rows: the 26 single-GPU models of Gavel's table.  A model's row has 3 solo
entries (steps/s alone on v100, p100, k80) and, per type, one pair entry per
partner model: its throughput next to that partner as a fraction of its own
solo throughput on that type (Gavel's normalization).  In each row a share p
(10%, 30%, 50%) of the entries is hidden at random, keeping at least one solo
entry (a job that has run somewhere has one measurement), over several seeds.

Two protocols:

* leave-one-out fingerprint (what `EstimatingThroughputs` does for a job of
  an unknown model): the row under test is partial, the other 25 models are
  the reference (fully known; the hidden model's own pair columns are left
  out, so the row has 3 + 3 x 25 = 78 entries).  Estimates: the nearest
  reference row scaled to the measurements (the paper's estimate, the
  default), and the completed row's own values ("completion").
* all rows at once: every row of the 26 x 81 matrix (3 solo + 3 x 26 pair
  entries, self-pairs included) is partial; `complete` fills the whole matrix
  (solo entries as log steps/s).

Baselines, per hidden entry (m = the model of the row):
* "model's mean": the mean of m's own observed entries of the same kind (a
  hidden solo entry: the mean of m's observed solo steps/s on the other
  types; a hidden pair entry: the mean of m's observed pair fractions).
* "type-scaled mean": a hidden solo entry on type t is the geometric mean
  over m's observed types u of  x_m,u * (G_t / G_u), G = the geometric mean
  of the reference models' solo steps/s per type (a rank-1 model in log
  space); a hidden pair entry is the mean over the other models of their
  fraction in that column (m's own observed pair entries are not used).

Error: |estimate - truth| / truth over the hidden entries with truth > 0
(the pairs that cannot share a GPU, truth 0, are counted apart), median and
90th percentile, solo and pair entries reported separately.

    python bench/estimator_accuracy.py              # 10 seeds, about 20 s
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_THROUGHPUTS = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"

from slurm_gavel.estimator.learning import (DEFAULT_RANK, DEFAULT_REG,  # noqa: E402
                                            DEFAULT_SOLO_WEIGHT, ReferenceSet, complete)
from slurm_gavel.estimator.table import ThroughputTable  # noqa: E402

TYPES = ("v100", "p100", "k80")


def hide(rng, n_entries: int, share: float, k: int) -> np.ndarray:
    """Indices of the hidden entries of a row: round(share * n) of them, never all k solo ones."""
    count = int(round(share * n_entries))
    while True:
        hidden = np.sort(rng.choice(n_entries, size=count, replace=False))
        if (hidden < k).sum() < k:
            return hidden


def truth_without(table, m, rank, reg, solo_weight):
    """The reference set without model m, and m's true row: solo steps/s (k,) and its pair
    fractions next to each reference model (k, R; NaN where the table has no pair)."""
    rs = ReferenceSet(table, 1, TYPES, exclude=m, rank=rank, reg=reg, solo_weight=solo_weight)
    solo = np.array([table.solo(m, 1)[wt] for wt in TYPES])
    pairs = np.full((len(TYPES), len(rs)), np.nan)
    for j, other in enumerate(rs.models):
        p = table.pair(m, other, 1)
        for t, wt in enumerate(TYPES):
            if wt in p:
                pairs[t, j] = p[wt][0] / solo[t]
    return rs, solo, pairs


def rel(est, truth):
    return np.abs(est - truth) / truth


class Errors:
    def __init__(self):
        self.solo, self.pair, self.zero_pairs = [], [], 0

    def add(self, solo_est, solo_true, pair_est, pair_true):
        self.solo.extend(rel(np.asarray(solo_est), np.asarray(solo_true)).tolist())
        pair_est, pair_true = np.asarray(pair_est, dtype=float), np.asarray(pair_true, dtype=float)
        pos = pair_true > 0
        self.zero_pairs += int((~pos).sum())
        self.pair.extend(rel(pair_est[pos], pair_true[pos]).tolist())

    @staticmethod
    def _q(values, q):
        v = np.asarray(values, dtype=float)
        v = np.where(np.isfinite(v), v, np.inf)
        return float(np.percentile(v, q)) if len(v) else float("nan")

    def row(self):
        return (self._q(self.solo, 50), self._q(self.solo, 90), self._q(self.pair, 50),
                self._q(self.pair, 90), len(self.solo), len(self.pair))


def leave_one_out(table, models, shares, seeds, rank, reg, solo_weight):
    k = len(TYPES)
    out = {}
    for share in shares:
        errs = {name: Errors() for name in ("nearest", "completion", "model_mean", "type_mean")}
        for seed in seeds:
            rng = np.random.default_rng([seed, int(share * 1000)])
            for m in models:
                rs, solo, pairs = truth_without(table, m, rank, reg, solo_weight)
                R = len(rs)
                n = k + k * R
                hidden = hide(rng, n, share, k)
                hidden_solo = hidden[hidden < k]
                hidden_pair = hidden[hidden >= k] - k
                obs_solo = {t: solo[t] for t in range(k) if t not in set(hidden_solo)}
                hp = set(hidden_pair.tolist())
                obs_pairs = {(t, j): pairs[t, j] for t in range(k) for j in range(R)
                             if t * R + j not in hp and np.isfinite(pairs[t, j])}
                fp = rs.fingerprint(obs_solo, obs_pairs)
                ht, hj = hidden_pair // R, hidden_pair % R
                truth_pair = pairs[ht, hj]
                truth_solo = solo[hidden_solo]
                errs["nearest"].add(fp.solo[hidden_solo], truth_solo,
                                    rs.pairs[ht, fp.index, hj], truth_pair)
                errs["completion"].add(fp.completed_solo[hidden_solo], truth_solo,
                                       fp.completed_pairs[ht, hj], truth_pair)
                # baselines
                seen_solo = np.array(list(obs_solo.values()))
                seen_pairs = np.array(list(obs_pairs.values()))
                pair_mean = seen_pairs.mean() if len(seen_pairs) else 1.0
                errs["model_mean"].add(np.full(len(hidden_solo), seen_solo.mean()), truth_solo,
                                       np.full(len(hidden_pair), pair_mean), truth_pair)
                g = np.exp(np.nanmean(rs.log_solo, axis=0))          # per type, over the reference
                ts = [np.exp(np.mean([np.log(obs_solo[u] * g[t] / g[u]) for u in obs_solo]))
                      for t in hidden_solo]
                col_mean = np.nanmean(rs.pairs[ht, :, hj], axis=1) if len(ht) else np.zeros(0)
                errs["type_mean"].add(ts, truth_solo, col_mean, truth_pair)
        out[share] = {name: e.row() for name, e in errs.items()}
        out[share]["zero_pairs"] = errs["nearest"].zero_pairs
    return out


def solo_only(table, models, rank, reg, solo_weight):
    """A job of an unknown model measured alone on some types (no pair measured): the online case."""
    from itertools import combinations
    k = len(TYPES)
    out = {}
    for measured in (1, 2):
        errs = {name: Errors() for name in ("nearest", "completion", "model_mean", "type_mean")}
        for m in models:
            rs, solo, pairs = truth_without(table, m, rank, reg, solo_weight)
            R = len(rs)
            for seen in combinations(range(k), measured):
                hs = np.array([t for t in range(k) if t not in seen])
                fp = rs.fingerprint({t: solo[t] for t in seen})
                truth_pair = pairs.reshape(-1)
                errs["nearest"].add(fp.solo[hs], solo[hs], rs.pairs[:, fp.index, :].reshape(-1), truth_pair)
                errs["completion"].add(fp.completed_solo[hs], solo[hs], fp.completed_pairs.reshape(-1),
                                       truth_pair)
                mean = np.mean([solo[t] for t in seen])
                col_mean = np.nanmean(rs.pairs, axis=1).reshape(-1)
                errs["model_mean"].add(np.full(len(hs), mean), solo[hs], col_mean, truth_pair)
                g = np.exp(np.nanmean(rs.log_solo, axis=0))
                ts = [np.exp(np.mean([np.log(solo[u] * g[t] / g[u]) for u in seen])) for t in hs]
                errs["type_mean"].add(ts, solo[hs], col_mean, truth_pair)
        out[measured] = {name: e.row() for name, e in errs.items()}
    return out


def all_rows(table, models, shares, seeds, rank, reg, solo_weight):
    k, M = len(TYPES), len(models)
    solo = np.array([[table.solo(m, 1)[wt] for wt in TYPES] for m in models])
    pairs = np.full((M, k, M), np.nan)
    for i, a in enumerate(models):
        for j, b in enumerate(models):
            p = table.pair(a, b, 1)
            for t, wt in enumerate(TYPES):
                if wt in p:
                    pairs[i, t, j] = p[wt][0] / solo[i, t]
    full = np.concatenate([np.log(solo), pairs.reshape(M, k * M)], axis=1)
    n = full.shape[1]
    weights = np.concatenate([np.full(k, solo_weight), np.ones(k * M)])
    out = {}
    for share in shares:
        errs = {name: Errors() for name in ("completion", "model_mean", "type_mean")}
        for seed in seeds:
            rng = np.random.default_rng([seed, int(share * 1000), 7])
            mask = np.ones_like(full, dtype=bool)
            for i in range(M):
                mask[i, hide(rng, n, share, k)] = False
            offset = np.arange(n) < k          # a row's scale is free on its (log) solo entries
            done, *_ = complete(full, mask, rank=rank, reg=reg, weights=weights, offset_columns=offset)
            for i in range(M):
                hs = np.flatnonzero(~mask[i, :k])
                hp = np.flatnonzero(~mask[i, k:])
                errs["completion"].add(np.exp(done[i, hs]), solo[i, hs], done[i, k + hp],
                                       pairs[i].reshape(-1)[hp])
                seen_solo = solo[i, mask[i, :k]]
                seen_pairs = full[i, k:][mask[i, k:]]
                errs["model_mean"].add(np.full(len(hs), seen_solo.mean()), solo[i, hs],
                                       np.full(len(hp), seen_pairs.mean() if len(seen_pairs) else 1.0),
                                       pairs[i].reshape(-1)[hp])
                others = np.arange(M) != i        # column statistics of the other rows' observed entries
                obs = np.where(mask[others], full[others], np.nan)
                g = np.nanmean(obs[:, :k], axis=0)                  # mean log steps/s per type
                seen = np.flatnonzero(mask[i, :k])
                ts = [np.exp(np.mean(full[i, seen] + g[t] - g[seen])) for t in hs]
                errs["type_mean"].add(ts, solo[i, hs], np.nanmean(obs[:, k + hp], axis=0),
                                      pairs[i].reshape(-1)[hp])
        out[share] = {name: e.row() for name, e in errs.items()}
    return out


def print_table(title, results, names):
    print(f"\n{title}")
    print(f"{'hidden':>6}  {'estimate':<12} {'solo p50':>9} {'solo p90':>9} {'pair p50':>9} "
          f"{'pair p90':>9} {'n solo':>7} {'n pair':>7}")
    for share, rows in results.items():
        for name in names:
            s50, s90, p50, p90, ns, npair = rows[name]
            print(f"{share:6.0%}  {name:<12} {s50:9.1%} {s90:9.1%} {p50:9.1%} {p90:9.1%} {ns:7d} {npair:7d}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughputs", default=str(DEFAULT_THROUGHPUTS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--shares", default="0.1,0.3,0.5")
    parser.add_argument("--rank", type=int, default=DEFAULT_RANK)
    parser.add_argument("--reg", type=float, default=DEFAULT_REG)
    parser.add_argument("--solo-weight", type=float, default=DEFAULT_SOLO_WEIGHT)
    args = parser.parse_args()
    if not Path(args.throughputs).exists():
        print(f"throughput file not found: {args.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    table = ThroughputTable.from_gavel_json(args.throughputs)
    models = table.models(1)
    shares = [float(s) for s in args.shares.split(",")]
    seeds = list(range(args.seeds))
    started = time.perf_counter()
    print(f"{len(models)} single-GPU models x {len(TYPES)} types (+ pair entries), seeds 0-{args.seeds - 1}, "
          f"rank {args.rank}, reg {args.reg}, solo weight {args.solo_weight}")
    loo = leave_one_out(table, models, shares, seeds, args.rank, args.reg, args.solo_weight)
    print_table("leave-one-out fingerprint (row under test partial, the other 25 models known)",
                loo, ("nearest", "completion", "model_mean", "type_mean"))
    print("  pair entries with truth 0 (cannot share), left out of the errors: "
          + ", ".join(f"{s:.0%}: {loo[s]['zero_pairs']}" for s in shares))
    online = solo_only(table, models, args.rank, args.reg, args.solo_weight)
    print("\nleave-one-out, measured alone on 1 or 2 of the 3 types, no pair measured (the online case;")
    print("every combination of measured types; pair entries: all of them, from the nearest row / the")
    print("completion / the other models' mean fraction in that column)")
    print(f"{'types':>6}  {'estimate':<12} {'solo p50':>9} {'solo p90':>9} {'pair p50':>9} "
          f"{'pair p90':>9} {'n solo':>7} {'n pair':>7}")
    for measured, rows in online.items():
        for name in ("nearest", "completion", "model_mean", "type_mean"):
            s50, s90, p50, p90, ns, npair = rows[name]
            print(f"{measured:6d}  {name:<12} {s50:9.1%} {s90:9.1%} {p50:9.1%} {p90:9.1%} {ns:7d} {npair:7d}")
    every = all_rows(table, models, shares, seeds, args.rank, args.reg, args.solo_weight)
    print_table("all rows partial at once (26 x 81 matrix completed by ALS)", every,
                ("completion", "model_mean", "type_mean"))
    print(f"\nwall {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
