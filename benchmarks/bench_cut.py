"""Seconds per CUT training iteration on the CPU: fastai `Learner` + `CUTTrainer` vs a plain PyTorch loop of the same math, and CUT vs CycleGAN (step time and peak memory) at the same size.

The CUT paths run the same anti-aliased ResnetGenerator, anti-aliased instance-norm PatchGAN and `PatchSampleF`
(its MLPs made beforehand), the same fused Adam for G, D and F, lsgan, PatchNCE on layers 0, 4, 8, 12, 16 with 256
patches, the NCE identity term (CUT's defaults) and the same in-memory batches. CycleGAN is `cyclegan_learner` with
its defaults on networks of the same width. Variants are timed in interleaved rounds (the order reversed every round),
as `bench_step.py` does; peak memory is the RSS high-water mark of a fresh process per variant, above its RSS once
the imports and batches are in.
"""
from __future__ import annotations
import argparse, contextlib, copy, io, json, gc, os, subprocess, sys, time, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings('ignore')

import torch
import torch.nn.functional as F
from fastai.data.load import DataLoader
from fastai.data.core import DataLoaders

from gan_callbacks.nets.networks import ResnetGenerator, PatchDiscriminator, PatchSampleF, init_weights
from gan_callbacks.nets.losses import PatchNCELoss
from gan_callbacks.gans.cut import cut_learner
from bench_step import interleave, machine, _status
from bench_cyclegan import make_models as cyclegan_models, make_batches, TrainerLoop as CycleGANLoop, Unpaired

LR, BETAS, EPS, LAYERS, PATCHES = 2e-4, (0.5, 0.999), 1e-8, (0, 4, 8, 12, 16), 256

def cut_models(ngf, n_blocks, size, seed=0):
    "G, D and F (its MLPs made for G's features at `size`)"
    torch.manual_seed(seed)
    G = init_weights(ResnetGenerator(ngf=ngf, n_blocks=n_blocks, antialias=True, antialias_up=True), 'xavier')
    D = init_weights(PatchDiscriminator(3, ndf=ngf, norm='instance', antialias=True), 'xavier')
    with torch.no_grad(): feats = G(torch.zeros(1, 3, size, size), LAYERS, encode_only=True)
    return G, D, PatchSampleF().create_mlp([f.shape[1] for f in feats])

def _amp(bf16): return torch.autocast('cpu', dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
def _adam(m): return torch.optim.Adam(m.parameters(), LR, betas=BETAS, eps=EPS, fused=True)

class PlainCUT:
    "The CUT iteration of DESIGN §11 as a bare PyTorch loop: the math `CUTTrainer` does, nothing else"
    def __init__(self, nets, batches, bf16=False):
        self.G, self.D, self.F = (m.train() for m in nets)
        self.batches, self.bf16, self.nce_loss = batches, bf16, PatchNCELoss()
        self.g_opt, self.d_opt, self.f_opt = _adam(self.G), _adam(self.D), _adam(self.F)

    @staticmethod
    def gan(pred, real): pred = pred.float(); return F.mse_loss(pred, torch.full_like(pred, float(real)))

    def nce(self, src, tgt):
        fq, fk = self.G(tgt, LAYERS, encode_only=True), self.G(src, LAYERS, encode_only=True)
        k, ids = self.F(fk, PATCHES)
        q, _ = self.F(fq, PATCHES, ids)
        return sum(self.nce_loss(a, b, len(src)).mean() for a, b in zip(q, k)) / len(LAYERS)

    def step(self, real_A, real_B):
        G, D = self.G, self.D
        with _amp(self.bf16):
            fake = G(torch.cat([real_A, real_B]))
        fake_B, idt_B = fake[:len(real_A)], fake[len(real_A):]
        D.requires_grad_(True); self.d_opt.zero_grad()
        with _amp(self.bf16): d = 0.5 * (self.gan(D(fake_B.detach()), False) + self.gan(D(real_B), True))
        d.backward(); self.d_opt.step()
        D.requires_grad_(False); self.g_opt.zero_grad(); self.f_opt.zero_grad()
        with _amp(self.bf16):
            loss = self.gan(D(fake_B), True) + 0.5 * (self.nce(real_A, fake_B) + self.nce(real_B, idt_B))
        loss.backward(); self.g_opt.step(); self.f_opt.step()

    def run(self):
        for A, B in self.batches: self.step(A, B)

def _dls(batches):
    mk = lambda items: DataLoader(items, bs=None, shuffle=False, num_workers=0, device='cpu')
    return DataLoaders(mk(Unpaired(batches)), mk(Unpaired()), device='cpu')

class TrainerCUT:
    "`cut_learner` (its defaults: `pix2pix_adam` for G, D and F, lsgan, NCE identity on) fitted one epoch, all callbacks on"
    def __init__(self, nets, batches, bf16=False):
        self.learn = cut_learner(_dls(batches), *nets)
        if bf16: self.learn.to_bf16()
    def run(self):
        with contextlib.redirect_stdout(io.StringIO()): self.learn.fit(1, LR)

def build(path, a, batches):
    if path == 'cyclegan': return CycleGANLoop(cyclegan_models(a['ngf'], a['blocks']), batches, a['bf16'])
    nets = cut_models(a['ngf'], a['blocks'], a['size'])
    return (TrainerCUT if path == 'cut' else PlainCUT)(nets, batches, a['bf16'])

def mem_worker(spec):
    "In a fresh process: RSS once imports and batches are in, then the RSS high-water mark after the iterations"
    a = json.loads(spec)
    batches = make_batches(a['iters'], a['size'])
    gc.collect(); base = _status('VmRSS')
    build(a['path'], a, batches).run()
    print('MEM ' + json.dumps(dict(base=base, peak=_status('VmHWM'))))

def peak_memory(path, a):
    spec = json.dumps(dict(path=path, ngf=a.ngf, blocks=a.blocks, size=a.size, bf16=a.bf16, iters=a.iters))
    out = subprocess.run([sys.executable, __file__, '--mem-worker', spec], capture_output=True, text=True)
    line = [l for l in out.stdout.splitlines() if l.startswith('MEM ')]
    if out.returncode or not line: raise RuntimeError(f"memory worker failed:\n{out.stderr[-2000:]}")
    m = json.loads(line[-1][4:])
    return (m['peak'] - m['base']) / 2**20

def main():
    if len(sys.argv) == 3 and sys.argv[1] == '--mem-worker': return mem_worker(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--size', type=int, default=64); ap.add_argument('--ngf', type=int, default=32)
    ap.add_argument('--blocks', type=int, default=9); ap.add_argument('--iters', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=3); ap.add_argument('--bf16', action='store_true')
    ap.add_argument('--max-other', type=float, default=0.1, help="a run counts as quiet when other processes used at most "
                    "this many CPU cores meanwhile; medians and ratios use quiet runs (all runs when fewer than 3 are quiet)")
    a = ap.parse_args()
    print(f"bench_cut {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\nmachine: {machine()}\nload average at start: {os.getloadavg()[0]:.2f}")
    print(f"resnet_{a.blocks}blocks ngf {a.ngf}, PatchGAN ndf {a.ngf}, instance norm, {a.size}x{a.size}, batch 1, "
          f"{'bf16' if a.bf16 else 'fp32'}; fits of {a.iters} iterations, {a.rounds} interleaved rounds after a warm-up\n")
    batches = make_batches(a.iters, a.size)
    spec = dict(ngf=a.ngf, blocks=a.blocks, size=a.size, bf16=a.bf16)
    variants = {k: build(k, spec, batches) for k in ('cut', 'plain', 'cyclegan')}
    res, _ = interleave(variants, a.rounds, a.iters, a.max_other, [('', 'cut', 'plain'), ('', 'cut', 'cyclegan')])
    t, p, c = (res.median(k) for k in ('cut', 'plain', 'cyclegan'))
    r, q1, q3, n = res.paired('cut', 'plain')
    print(f"CUT: trainer {t:.3f} s, plain {p:.3f} s per iteration; trainer/plain {r:.3f} (quartiles {q1:.3f}-{q3:.3f}, {n} rounds)")
    r, q1, q3, n = res.paired('cut', 'cyclegan')
    print(f"CycleGAN trainer {c:.3f} s per iteration; CUT/CycleGAN {r:.3f} (quartiles {q1:.3f}-{q3:.3f}, {n} rounds)")
    mem = {k: peak_memory(k, a) for k in ('cut', 'plain', 'cyclegan')}
    print(f"peak memory above start (MiB): CUT trainer {mem['cut']:.0f}, CUT plain {mem['plain']:.0f}, "
          f"CycleGAN trainer {mem['cyclegan']:.0f}; CUT/CycleGAN {mem['cut'] / mem['cyclegan']:.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")

if __name__ == '__main__': main()
