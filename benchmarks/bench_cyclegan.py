"""Seconds per CycleGAN training iteration on the CPU: fastai `Learner` + `CycleGANTrainer` vs a plain PyTorch loop.

Both paths run the same G_A, G_B, D_A, D_B (ResnetGenerator, instance-norm PatchGAN), the same fused Adam (one
optimizer over both generators, one over both discriminators), the same image pools (size 50), lsgan, identity 0.5,
the same autocast and the same in-memory batches. Variants are timed in interleaved rounds (the order reversed every
round), as `bench_step.py` does; results are medians over quiet rounds and paired per-round ratios.
"""
from __future__ import annotations
import argparse, contextlib, copy, io, itertools, os, random, sys, time, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings('ignore')

import torch
import torch.nn.functional as F
from fastai.data.load import DataLoader
from fastai.data.core import DataLoaders

from gan_callbacks.nets.networks import ResnetGenerator, PatchDiscriminator
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.trainer.image_pool import ImagePool
from bench_step import interleave, machine

LR, BETAS, EPS, LAMBDA, LAMBDA_IDT, POOL = 2e-4, (0.5, 0.999), 1e-8, 10., 0.5, 50

def make_models(ngf, n_blocks, seed=0):
    torch.manual_seed(seed)
    return (ResnetGenerator(ngf=ngf, n_blocks=n_blocks), ResnetGenerator(ngf=ngf, n_blocks=n_blocks),
            PatchDiscriminator(3, ndf=ngf, norm='instance'), PatchDiscriminator(3, ndf=ngf, norm='instance'))

def make_batches(n, size, bs=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(bs, 3, size, size, generator=g)*2-1, torch.rand(bs, 3, size, size, generator=g)*2-1) for _ in range(n)]

def _amp(bf16): return torch.autocast('cpu', dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
def _adam(*ms): return torch.optim.Adam(itertools.chain(*(m.parameters() for m in ms)), LR, betas=BETAS, eps=EPS, fused=True)

class PlainLoop:
    "The CycleGAN iteration of DESIGN §9 as a bare PyTorch loop: the math `CycleGANTrainer` does, nothing else"
    def __init__(self, nets, batches, bf16=False):
        self.GA, self.GB, self.DA, self.DB = (m.train() for m in nets)
        self.batches, self.bf16 = batches, bf16
        self.g_opt, self.d_opt = _adam(self.GA, self.GB), _adam(self.DA, self.DB)
        self.pool_A, self.pool_B = ImagePool(POOL), ImagePool(POOL)

    @staticmethod
    def gan(pred, real): pred = pred.float(); return F.mse_loss(pred, torch.full_like(pred, float(real)))

    def step(self, real_A, real_B):
        GA, GB, DA, DB, l1 = self.GA, self.GB, self.DA, self.DB, lambda a, b: F.l1_loss(a.float(), b.float())
        self.g_opt.zero_grad()
        DA.requires_grad_(False); DB.requires_grad_(False)
        with _amp(self.bf16):
            fake_B = GA(real_A); rec_A = GB(fake_B); fake_A = GB(real_B); rec_B = GA(fake_A)
            idt_A, idt_B = GA(real_B), GB(real_A)
            loss = (self.gan(DA(fake_B), True) + self.gan(DB(fake_A), True) + l1(rec_A, real_A) * LAMBDA + l1(rec_B, real_B) * LAMBDA
                    + l1(idt_A, real_B) * LAMBDA * LAMBDA_IDT + l1(idt_B, real_A) * LAMBDA * LAMBDA_IDT)
        loss.backward(); self.g_opt.step()
        DA.requires_grad_(True); DB.requires_grad_(True); self.d_opt.zero_grad()
        with _amp(self.bf16):
            d = 0.5 * (self.gan(DA(real_B), True) + self.gan(DA(self.pool_B.query(fake_B).detach()), False))
            d = d + 0.5 * (self.gan(DB(real_A), True) + self.gan(DB(self.pool_A.query(fake_A).detach()), False))
        d.backward(); self.d_opt.step()

    def run(self):
        for A, B in self.batches: self.step(A, B)

class Unpaired(list): n_inp = 2   # each pre-made batch is (real_A, real_B): two model inputs

class TrainerLoop:
    "`cyclegan_learner` (its defaults: `pix2pix_adam`, pools of 50, lsgan, identity 0.5) fitted one epoch, all callbacks on"
    def __init__(self, nets, batches, bf16=False):
        mk = lambda items: DataLoader(items, bs=None, shuffle=False, num_workers=0, device='cpu')
        self.learn = cyclegan_learner(DataLoaders(mk(Unpaired(batches)), mk(Unpaired()), device='cpu'), *nets)
        if bf16: self.learn.to_bf16()
    def run(self):
        with contextlib.redirect_stdout(io.StringIO()): self.learn.fit(1, LR)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--size', type=int, default=64); ap.add_argument('--ngf', type=int, default=32)
    ap.add_argument('--blocks', type=int, default=9); ap.add_argument('--iters', type=int, default=3)
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--max-other', type=float, default=0.1, help="a run counts as quiet when other processes used at most "
                    "this many CPU cores meanwhile; medians and ratios use quiet runs (all runs when fewer than 3 are quiet)")
    a = ap.parse_args()
    print(f"bench_cyclegan {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\nmachine: {machine()}\nload average at start: {os.getloadavg()[0]:.2f}")
    print(f"resnet_{a.blocks}blocks ngf {a.ngf}, PatchGAN ndf {a.ngf}, instance norm, {a.size}x{a.size}, batch 1; "
          f"fits of {a.iters} iterations, {a.rounds} interleaved rounds after a warm-up\n")
    nets, batches = make_models(a.ngf, a.blocks), make_batches(a.iters, a.size)
    paths = dict(trainer=TrainerLoop, plain=PlainLoop)
    variants = {f'{p} {prec}': paths[p](copy.deepcopy(nets), batches, prec == 'bf16') for prec in ('fp32', 'bf16') for p in paths}
    res, _ = interleave(variants, a.rounds, a.iters, a.max_other, [(p, f'trainer {p}', f'plain {p}') for p in ('fp32', 'bf16')])
    for prec in ('fp32', 'bf16'):
        t, p = res.median(f'trainer {prec}'), res.median(f'plain {prec}')
        r, q1, q3, n = res.paired(f'trainer {prec}', f'plain {prec}')
        print(f"{prec}: trainer {t:.3f} s, plain {p:.3f} s per iteration; trainer/plain {r:.3f} (quartiles {q1:.3f}-{q3:.3f}, {n} rounds)")
    print(f"bf16 speed-up (plain): {res.median('plain fp32') / res.median('plain bf16'):.2f}x")

if __name__ == '__main__': main()
