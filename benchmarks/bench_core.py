"""Overhead of the v1 state dict: a Learner with v1-style callbacks vs the same Learner without them.

Interleaved rounds (plain, v1, plain, v1, ...) of `fit` on the same small conv net and in-memory batches;
prints the median seconds per batch of each and their ratio. Run: `.venv/bin/python benchmarks/bench_core.py`.
"""
import argparse, statistics, time
import torch
from torch import nn
from fastai.basics import Learner, DataLoaders, MSELossFlat, SGD, set_seed
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.v1.bridge import StateDictCallback


class EveryEvent(StateDictCallback):
    "A v1-style callback listening to every event and reading the state, as a v1 callback would"
    def on_train_begin(self, **kw): pass
    def on_epoch_begin(self, **kw): pass
    def on_batch_begin(self, last_input, **kw): pass
    def on_loss_begin(self, last_output, **kw): pass
    def on_backward_begin(self, last_loss, **kw): pass
    def on_backward_end(self, **kw): pass
    def on_step_end(self, **kw): pass
    def on_batch_end(self, last_loss, train, **kw): pass
    def on_epoch_end(self, last_metrics, **kw): pass
    def on_train_end(self, **kw): pass


def make_learner(v1, n_batches, bs, size):
    set_seed(0)
    x = torch.randn(n_batches * bs, 3, size, size); y = torch.randn(n_batches * bs, 3, size, size)
    items = list(zip(x, y))
    dls = DataLoaders.from_dsets(items, items[:bs], bs=bs, device='cpu')
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 3, 3, padding=1))
    cbs = [EveryEvent(), EveryEvent()] if v1 else []
    learn = Learner(dls, model, loss_func=MSELossFlat(), opt_func=SGD, cbs=cbs)
    return learn


def time_fit(learn):
    with learn.no_bar(), learn.no_logging():
        t = time.perf_counter(); learn.fit(1, 1e-3); return time.perf_counter() - t


def main(rounds=7, n_batches=50, bs=8, size=32):
    learners = {'plain': make_learner(False, n_batches, bs, size), 'v1': make_learner(True, n_batches, bs, size)}
    for l in learners.values(): time_fit(l)   # warm-up
    times = {k: [] for k in learners}
    for _ in range(rounds):
        for k, l in learners.items(): times[k].append(time_fit(l) / (n_batches + 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items(): print(f"{k:6s} median {v*1e3:.2f} ms/batch over {rounds} rounds")
    print(f"SUMMARY v1 callbacks / plain = {med['v1']/med['plain']:.3f}")


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument('--rounds', type=int, default=7)
    p.add_argument('--batches', type=int, default=50)
    a = p.parse_args()
    main(a.rounds, a.batches)
