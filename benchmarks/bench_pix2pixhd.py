"""Seconds per pix2pixHD training iteration: fastai `Learner` + `Pix2pixHDTrainer` vs a plain PyTorch loop of the same math, fp32 and bf16.

Both run the same `GlobalGenerator` and `MultiscaleDiscriminator` (instance norm, 2 scales, 3 layers, intermediate
features), fused Adam(0.5, 0.999) for G and D, LSGAN, feature matching and the VGG19 term (randomly initialised VGG19:
the same cost as ImageNet's weights), on the same in-memory batches of one-hot label maps with an instance-boundary
channel. The plain loop is the reference's iteration (`pix2pixHD_model.py` + `train.py`): one G forward, D on the
detached fake and the real, G's loss through D, G's step, then D's. Variants are timed in interleaved rounds (the order
reversed every round), as `bench_step.py` does. `--device cuda` runs on a GPU (synchronised at the end of each fit).
"""
from __future__ import annotations
import argparse, contextlib, copy, io, os, sys, time, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings('ignore')

import torch
import torch.nn.functional as F
from fastai.data.load import DataLoader
from fastai.data.core import DataLoaders

from gan_callbacks.nets.hd_networks import GlobalGenerator, MultiscaleDiscriminator
from gan_callbacks.nets.hd_losses import VGG19Features, vgg_weights
from gan_callbacks.data.label_maps import one_hot_labels, get_edges
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from bench_step import interleave, machine

LR, BETAS, EPS, LAMBDA_FEAT = 2e-4, (0.5, 0.999), 1e-8, 10.

def make_batches(n, size, label_nc, bs, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    res = []
    for _ in range(n):
        x = torch.cat([one_hot_labels(torch.randint(0, label_nc, (bs, 1, size, size), generator=g), label_nc),
                       get_edges(torch.randint(0, 4, (bs, 1, size, size), generator=g))], 1)
        res.append((x.to(device), (torch.rand(bs, 3, size, size, generator=g) * 2 - 1).to(device)))
    return res

def make_models(a):
    torch.manual_seed(0)
    G = GlobalGenerator(a.label_nc + 1, 3, a.ngf, a.n_down, a.blocks)
    D = MultiscaleDiscriminator(a.label_nc + 4, a.ngf, 3, num_D=2)
    return G, D, VGG19Features()

def _sync(device):
    if torch.device(device).type == 'cuda': torch.cuda.synchronize()

class Plain:
    "The reference's iteration as a bare PyTorch loop"
    def __init__(self, nets, batches, device, bf16):
        self.G, self.D, self.vgg = (copy.deepcopy(m).to(device) for m in nets)
        self.G.train(); self.D.train(); self.vgg.eval()
        self.batches, self.device, self.bf16 = batches, device, bf16
        self.g_opt, self.d_opt = (torch.optim.Adam(m.parameters(), LR, betas=BETAS, eps=EPS, fused=True) for m in (self.G, self.D))
    def amp(self): return torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
    @staticmethod
    def gan(preds, real): return sum(F.mse_loss(p[-1].float(), torch.full_like(p[-1].float(), float(real))) for p in preds)
    def step(self, A, B):
        G, D = self.G, self.D
        for p in G.parameters(): p.grad = None
        with self.amp():
            fake = G(A)
            D.requires_grad_(True)
            pred_fake_pool, pred_real = D(torch.cat([A, fake.detach()], 1)), D(torch.cat([A, B], 1))
            d_fake, d_real = self.gan(pred_fake_pool, False), self.gan(pred_real, True)
            D.requires_grad_(False)
            pred_fake = D(torch.cat([A, fake], 1))
            g = self.gan(pred_fake, True)
            w = (4. / (D.n_layers + 1)) * (1. / D.num_D)
            feat = sum(w * F.l1_loss(f.float(), r.detach().float()) * LAMBDA_FEAT for fs, rs in zip(pred_fake, pred_real) for f, r in zip(fs[:-1], rs[:-1]))
            vf, vr = self.vgg(fake), self.vgg(B)
            vgg = sum(k * F.l1_loss(a.float(), b.detach().float()) for k, a, b in zip(vgg_weights, vf, vr)) * LAMBDA_FEAT
        (g + feat + vgg).backward(); self.g_opt.step()
        D.requires_grad_(True); self.d_opt.zero_grad()
        (0.5 * (d_fake + d_real)).backward(); self.d_opt.step()
    def run(self):
        for A, B in self.batches: self.step(A, B)
        _sync(self.device)

class Trainer:
    "`pix2pixhd_learner` with its defaults (`pix2pix_adam`, LSGAN, feature matching, VGG) fitted one epoch, all callbacks on"
    def __init__(self, nets, batches, device, bf16):
        G, D, vgg = (copy.deepcopy(m) for m in nets)
        mk = lambda items: DataLoader(items, bs=None, shuffle=False, num_workers=0, device=device)
        dls = DataLoaders(mk(batches), mk([]), device=device)
        self.learn = pix2pixhd_learner(dls, G, D, trainer_kwargs=dict(vgg=vgg))
        if bf16: self.learn.to_bf16()
        self.device = device
    def run(self):
        with contextlib.redirect_stdout(io.StringIO()): self.learn.fit(1, LR)
        _sync(self.device)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--size', type=int, default=64); ap.add_argument('--ngf', type=int, default=16)
    ap.add_argument('--n-down', type=int, default=3); ap.add_argument('--blocks', type=int, default=3)
    ap.add_argument('--label-nc', type=int, default=8); ap.add_argument('--bs', type=int, default=1)
    ap.add_argument('--iters', type=int, default=3); ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--max-other', type=float, default=0.1, help="a run counts as quiet when other processes used at most "
                    "this many CPU cores meanwhile; medians and ratios use quiet runs (all runs when fewer than 3 are quiet)")
    a = ap.parse_args()
    dev = a.device
    gpu = f", {torch.cuda.get_device_name()}" if torch.device(dev).type == 'cuda' else ''
    print(f"bench_pix2pixhd {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\nmachine: {machine()}{gpu}\nload average at start: {os.getloadavg()[0]:.2f}")
    print(f"GlobalGenerator ngf {a.ngf}, {a.n_down} halvings, {a.blocks} blocks; 2 D scales of 3 layers; VGG19; {a.label_nc}+1 input "
          f"channels, {a.size}x{a.size}, batch {a.bs}, on {dev}; fits of {a.iters} iterations, {a.rounds} interleaved rounds after a warm-up\n")
    nets, batches = make_models(a), make_batches(a.iters, a.size, a.label_nc, a.bs, dev)
    med = {}
    for bf16 in (False, True):
        p = 'bf16' if bf16 else 'fp32'
        variants = {f'trainer {p}': Trainer(nets, batches, dev, bf16), f'plain {p}': Plain(nets, batches, dev, bf16)}
        res, _ = interleave(variants, a.rounds, a.iters, a.max_other, [('', f'trainer {p}', f'plain {p}')])
        t, q = res.median(f'trainer {p}'), res.median(f'plain {p}')
        r, q1, q3, n = res.paired(f'trainer {p}', f'plain {p}')
        med[p] = t
        print(f"{p}: trainer {t * 1e3:.1f} ms, plain {q * 1e3:.1f} ms per iteration; trainer/plain {r:.3f} (quartiles {q1:.3f}-{q3:.3f}, {n} rounds)")
    print(f"trainer bf16/fp32 step time: {med['bf16'] / med['fp32']:.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")

if __name__ == '__main__': main()
