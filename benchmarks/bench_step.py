"""Seconds per pix2pix training iteration on the CPU: fastai `Learner` + `Pix2pixTrainer` vs a plain PyTorch loop.

Both paths run the same G and D, the same fused Adam, the same autocast and the same in-memory batches. All variants
of one model size are timed in one process in interleaved rounds (A B C ..., ... C B A, ...); results are medians
and paired per-round ratios. Peak memory comes from a fresh subprocess per configuration.
`--quick`: small models, a smoke test. `--full`: more rounds, the options on both sizes.
"""
from __future__ import annotations
import argparse, contextlib, copy, gc, io, json, logging, os, platform, statistics, subprocess, sys, time, warnings
from dataclasses import dataclass, asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout
warnings.filterwarnings('ignore')

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode
import fastai
from fastai.data.load import DataLoader
from fastai.data.core import DataLoaders
from fastai.learner import Learner
from fastai.losses import L1LossFlat
from fastai.callback.core import Callback, CancelBackwardException, CancelStepException
import skimage.data
from PIL import Image

from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import pix2pix_learner, Pix2pixTrainer
from gan_callbacks.data.samples import make_pair
from gan_callbacks.trainer.precision import maybe_autocast

logging.getLogger('torch.utils.cpp_extension').setLevel(logging.ERROR)  # "no CUDA runtime" when compiling on the CPU

LR, BETAS, EPS, LAMBDA_L1 = 2e-4, (0.5, 0.999), 1e-8, 100.

# ---------------------------------------------------------------------------------------------------------------------
# Settings

@dataclass
class Cfg:
    name: str
    num_downs: int
    size: int
    bs: int
    ngf: int = 64
    ndf: int = 64

    def __str__(self): return (f"{self.name}: {self.size}x{self.size}, batch {self.bs}, num_downs {self.num_downs}, "
                               f"ngf {self.ngf}, ndf {self.ndf}")

UNET_128, UNET_256 = Cfg('unet_128', 7, 128, 4), Cfg('unet_256', 8, 256, 1)
TINY = Cfg('tiny', 5, 32, 1, 4, 4)  # almost no compute: what remains is the cost of the loop itself

PROFILES = {  # iters: batches per timed run (one fit); rounds: timed runs per variant after one warm-up run; loop_rounds: the loop cost's
    'quick':   dict(configs=[Cfg('unet_64/16', 6, 64, 2, 16, 16), Cfg('unet_128/16', 7, 128, 1, 16, 16)],
                    iters=3, rounds=4, options_on=['unet_64/16'], compile=False, mem_on=['unet_64/16'], mem_iters=2,
                    mem_reps=1, curve_iters=15, overhead_iters=10, loop_rounds=3, mm_n=1024),
    'default': dict(configs=[UNET_128, UNET_256], iters=3, rounds=5, options_on=['unet_256'], compile=True,
                    mem_on=['unet_128', 'unet_256'], mem_iters=2, mem_reps=1, curve_iters=30, overhead_iters=20, loop_rounds=9, mm_n=2048),
    'full':    dict(configs=[UNET_128, UNET_256], iters=5, rounds=7, options_on=['unet_128', 'unet_256'], compile=True,
                    mem_on=['unet_128', 'unet_256'], mem_iters=3, mem_reps=3, curve_iters=60, overhead_iters=40, loop_rounds=15, mm_n=2048),
}

# ---------------------------------------------------------------------------------------------------------------------
# Data and models

_PHOTOS = ('astronaut', 'coffee', 'chelsea', 'rocket', 'immunohistochemistry')

def make_batches(cfg:Cfg, n:int, seed:int=0):
    "`n` (A, B) batches of gray -> colour pairs cut from `skimage.data` photos, in [-1, 1]"
    rng = np.random.default_rng(seed)
    photos = [Image.fromarray(getattr(skimage.data, p)()).convert('RGB') for p in _PHOTOS]
    def pair():
        im = photos[int(rng.integers(len(photos)))]
        w, h = im.size
        s = int(min(w, h) * rng.uniform(0.3, 1))
        l, t = int(rng.integers(w - s + 1)), int(rng.integers(h - s + 1))
        ab = torch.from_numpy(np.asarray(make_pair(im, (l, t, l+s, t+s), cfg.size))).permute(2, 0, 1).float() / 127.5 - 1
        return ab[..., :cfg.size], ab[..., cfg.size:]
    res = []
    for _ in range(n):
        ps = [pair() for _ in range(cfg.bs)]
        res.append((torch.stack([a for a, _ in ps]).contiguous(), torch.stack([b for _, b in ps]).contiguous()))
    return res

def make_models(cfg:Cfg, seed:int=0):
    torch.manual_seed(seed)
    return UnetGenerator(num_downs=cfg.num_downs, ngf=cfg.ngf), PatchDiscriminator(ndf=cfg.ndf)

def _amp(bf16, mc=False):
    "bf16 autocast: PyTorch's alone, or the trainers' (`mc`: with `MatmulConvs`)"
    return maybe_autocast('cpu', torch.bfloat16 if bf16 else None, matmul_convs=mc)

# ---------------------------------------------------------------------------------------------------------------------
# The two training paths

class PlainLoop:
    "The pix2pix iteration as a bare PyTorch loop: the math `Pix2pixTrainer` does, nothing else"
    def __init__(self, G, D, batches, bf16=False, mc=False):
        self.G, self.D, self.batches, self.bf16, self.mc = G.train(), D.train(), batches, bf16, mc
        adam = lambda m: torch.optim.Adam(m.parameters(), LR, betas=BETAS, eps=EPS, weight_decay=0., fused=True)
        self.g_opt, self.d_opt = adam(G), adam(D)

    @staticmethod
    def gan(pred, real):
        pred = pred.float()
        return F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, 1. if real else 0.))

    def step(self, A, B):
        G, D = self.G, self.D
        self.g_opt.zero_grad()   # G's gradients released before the forward, as the Learner does after it
        with _amp(self.bf16, self.mc): fake = G(A)
        fake = fake.float()
        D.requires_grad_(True)
        self.d_opt.zero_grad()
        with _amp(self.bf16, self.mc):
            d_fake = self.gan(D(torch.cat([A, fake.detach()], 1)), False)
            d_real = self.gan(D(torch.cat([A, B], 1)), True)
            d_loss = 0.5 * (d_fake + d_real)
        d_loss.backward(); self.d_opt.step()
        D.requires_grad_(False)
        with _amp(self.bf16, self.mc):
            g_loss = self.gan(D(torch.cat([A, fake], 1)), True) + LAMBDA_L1 * F.l1_loss(fake.float(), B.float())
        g_loss.backward(); self.g_opt.step()

    def run(self, batches=None):
        for A, B in (self.batches if batches is None else batches): self.step(A, B)

def _dls(batches):
    "fastai `DataLoaders` yielding the pre-made `batches` as they are (no collation, shuffle or workers); no validation"
    mk = lambda items: DataLoader(items, bs=None, shuffle=False, num_workers=0, device='cpu')
    return DataLoaders(mk(batches), mk([]), device='cpu')

OPTIONS = {'cl': dict(channels_last=True), 'compile': dict(compile=True)}   # `Pix2pixTrainer` flags

class TrainerLoop:
    "`pix2pix_learner` (its defaults: `pix2pix_adam` for G and D) fitted one epoch over the batches, all callbacks on"
    def __init__(self, G, D, batches, bf16=False, option=None):
        self.learn = pix2pix_learner(_dls(batches), generator=G, discriminator=D, trainer_kwargs=OPTIONS.get(option))
        if bf16: self.learn.to_bf16()

    @property
    def trainer(self): return next(cb for cb in self.learn.cbs if isinstance(cb, Pix2pixTrainer))

    def run(self, batches=None):
        if batches is not None: self.learn.dls = _dls(batches)
        with contextlib.redirect_stdout(io.StringIO()): self.learn.fit(1, LR)  # the progress bar prints to stdout

class _PlainStep(Callback):
    "Does `PlainLoop`'s step on each training batch inside fastai's loop and cancels fastai's own backward and step"
    def __init__(self, loop): self.loop = loop
    def before_backward(self):
        if not self.training: return
        L, A, B, fake, G, D = self.loop, self.xb[0], self.yb[0], self.pred, self.loop.G, self.loop.D
        D.requires_grad_(True); L.d_opt.zero_grad()
        with _amp(L.bf16, L.mc):
            d_loss = 0.5 * (L.gan(D(torch.cat([A, fake.detach()], 1)), False) + L.gan(D(torch.cat([A, B], 1)), True))
        d_loss.backward(); L.d_opt.step(); D.requires_grad_(False)
        with _amp(L.bf16, L.mc): g_loss = L.gan(D(torch.cat([A, fake], 1)), True) + LAMBDA_L1 * F.l1_loss(fake.float(), B.float())
        g_loss.backward(); L.g_opt.step(); L.g_opt.zero_grad()
        raise CancelBackwardException()
    def before_step(self): raise CancelStepException()
    def before_batch(self): self.ctx = _amp(self.loop.bf16, self.loop.mc); self.ctx.__enter__()
    def after_pred(self): self.ctx.__exit__(None, None, None); self.learn.pred = self.pred.float()

class FastaiLoop:
    "The plain loop's math as one callback of a bare fastai `Learner` (default callbacks, fastai's L1 as loss): what fastai itself adds"
    def __init__(self, G, D, batches, bf16=False, mc=False):
        self.loop = PlainLoop(G, D, batches, bf16, mc)
        self.learn = Learner(_dls(batches), G, loss_func=L1LossFlat(), cbs=_PlainStep(self.loop))
    def run(self, batches=None):
        with contextlib.redirect_stdout(io.StringIO()): self.learn.fit(1, LR)

PATHS = dict(trainer=TrainerLoop, plain=PlainLoop, fastai=FastaiLoop)

def build(path, cfg, batches, bf16=False, option=None, models=None):
    "A `path` ('trainer', 'plain' or 'fastai') on a copy of `models` (or new ones); `option` ('cl', 'compile'): a trainer flag, 'mc': the trainers' autocast for the others"
    G, D = copy.deepcopy(models) if models is not None else make_models(cfg)
    if option is None: return PATHS[path](G, D, batches, bf16)
    if option == 'mc' and path != 'trainer': return PATHS[path](G, D, batches, bf16, mc=True)
    if path != 'trainer' or option not in OPTIONS: raise ValueError(f"no option {option!r} for {path}")
    return TrainerLoop(G, D, batches, bf16, option)

# ---------------------------------------------------------------------------------------------------------------------
# Measurements

def _timed(f):
    t = time.perf_counter(); f(); return time.perf_counter() - t

_TCK = os.sysconf('SC_CLK_TCK')
def _cpu_snapshot():
    "(wall time, busy CPU seconds of the whole machine, CPU seconds of this process)"
    with open('/proc/stat') as f: v = [int(x) for x in f.readline().split()[1:]]
    t = os.times()
    return time.perf_counter(), (sum(v) - v[3] - v[4]) / _TCK, t.user + t.system

def timed_run(f):
    "Seconds `f()` takes, and the CPU (in cores) other processes and the hypervisor used meanwhile"
    w0, b0, s0 = _cpu_snapshot(); f(); w1, b1, s1 = _cpu_snapshot()
    return w1 - w0, max(0., (b1 - b0) - (s1 - s0)) / (w1 - w0)

class Timings:
    "Per-round seconds per iteration of each variant, with the other load seen during each run"
    def __init__(self, names, max_other): self.t, self.other, self.max_other = {k: [] for k in names}, {k: [] for k in names}, max_other
    def add(self, k, t, other): self.t[k].append(t); self.other[k].append(other)
    def clean(self, k): return [o <= self.max_other for o in self.other[k]]
    def n_quiet_pairs(self, a, b): return sum(x and y for x, y in zip(self.clean(a), self.clean(b)))
    def median(self, k):
        ts = [t for t, c in zip(self.t[k], self.clean(k)) if c]
        return statistics.median(ts if len(ts) >= 2 else self.t[k])
    def paired(self, a, b):
        "Median, quartiles and count of the per-round ratios `a`/`b`, over rounds where both ran on a quiet machine"
        rs = [(x / y, ca and cb) for x, y, ca, cb in zip(self.t[a], self.t[b], self.clean(a), self.clean(b))]
        r = sorted(x for x, c in rs if c)
        if len(r) < 3: r = sorted(x for x, _ in rs)
        q = statistics.quantiles(r, n=4, method='inclusive') if len(r) > 1 else r * 3
        return statistics.median(r), q[0], q[2], len(r)

def interleave(variants:dict, rounds:int, iters:int, max_other:float, pairs=()):
    """Seconds per iteration of each variant, after one warm-up run each, in interleaved rounds (the order reversed
    every round); up to `rounds` more rounds while a pair (a, b) in `pairs` has fewer than 3 rounds where both ran quiet"""
    warm = {k: _timed(v.run) for k, v in variants.items()}
    res, names, r = Timings(variants, max_other), list(variants), 0
    while r < rounds or (r < 2 * rounds and any(res.n_quiet_pairs(a, b) < 3 for _, a, b in pairs)):
        for k in (names if r % 2 == 0 else names[::-1]):
            t, other = timed_run(variants[k].run)
            res.add(k, t / iters, other)
        r += 1
    return res, warm

def matmul_gflops(dtype, n, reps=10):
    "Best GFLOP/s of an n x n matmul in `dtype`"
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    return 2 * n**3 / min(_timed(lambda: a @ b) for _ in range(reps)) / 1e9

def count_flops(loop:PlainLoop, batch):
    "FLOPs of one pix2pix iteration (convolutions and matmuls, forward and backward)"
    with FlopCounterMode(display=False) as fc: loop.step(*batch)
    return fc.get_total_flops()

def _status(key):
    "A size from /proc/self/status, in bytes"
    with open('/proc/self/status') as f: return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key + ':'))

def mem_worker(spec):
    """In a fresh process: RSS once imports and batches are in, then the RSS high-water mark after `iters` iterations
    (VmHWM: `getrusage`'s ru_maxrss would include the parent's RSS, which Linux carries over the `exec`)"""
    cfg = Cfg(**spec['cfg'])
    batches = make_batches(cfg, spec['iters'])
    gc.collect(); base = _status('VmRSS')
    build(spec['path'], cfg, batches, spec['bf16']).run()
    print('MEM ' + json.dumps(dict(base=base, peak=_status('VmHWM'))))

def peak_memory(cfg, path, bf16, iters, reps=1):
    "Start RSS and peak RSS of `path` (median over `reps` fresh processes, by memory above the start)"
    spec, res = json.dumps(dict(cfg=asdict(cfg), path=path, bf16=bf16, iters=iters)), []
    for _ in range(reps):
        out = subprocess.run([sys.executable, __file__, '--mem-worker', spec], capture_output=True, text=True)
        line = [l for l in out.stdout.splitlines() if l.startswith('MEM ')]
        if out.returncode or not line: raise RuntimeError(f"memory worker failed:\n{out.stderr[-2000:]}")
        res.append(json.loads(line[-1][4:]))
    return sorted(res, key=lambda m: m['peak'] - m['base'])[len(res) // 2]

def loss_curves(cfg, n):
    "The trainer's smoothed losses over `n` iterations in fp32 and in bf16, from one init on the same batches"
    batches, models, hist = make_batches(cfg, n, seed=1), make_models(cfg, seed=1), {}
    for bf16 in (False, True):
        t = build('trainer', cfg, batches, bf16, models=models)
        torch.manual_seed(2)  # the same dropout masks
        t.run()
        hist[bf16] = torch.stack(t.trainer.hist).float()
        del t
    return hist[False], hist[True]

# ---------------------------------------------------------------------------------------------------------------------
# One model size

def bench_config(cfg:Cfg, P, peak, lap, max_other):
    "Time all variants of `cfg` in one interleaved group, then measure peak memory; returns the ratios"
    batches, models, r = make_batches(cfg, P['iters']), make_models(cfg), {}
    print(f"== {cfg} [{cpu_tag()}]")
    variants = {f"{p} {prec}": build(p, cfg, batches, prec == 'bf16', models=models)
                for prec in ('fp32', 'bf16') for p in ('trainer', 'plain')}
    opts = (['cl'] + (['compile'] if P['compile'] else [])) if cfg.name in P['options_on'] else []
    for o in opts:
        for prec in ('fp32', 'bf16'): variants[f"trainer {prec} {o}"] = build('trainer', cfg, batches, prec == 'bf16', o, models)
    pairs = [('fp32 trainer/plain', 'trainer fp32', 'plain fp32'), ('bf16 trainer/plain', 'trainer bf16', 'plain bf16'),
             ('bf16 trainer speedup vs plain fp32', 'plain fp32', 'trainer bf16'),
             ('bf16 plain speedup vs plain fp32', 'plain fp32', 'plain bf16')]
    for o in opts:
        pairs += [(f"{o} speedup {prec}", f"trainer {prec}", f"trainer {prec} {o}") for prec in ('fp32', 'bf16')]
        pairs += [(f"bf16 trainer {o} speedup vs plain fp32", 'plain fp32', f"trainer bf16 {o}")]
    flops = count_flops(variants['plain fp32'], batches[0])
    times, warm = interleave(variants, P['rounds'], P['iters'], max_other, pairs)
    trainer = variants['trainer fp32']
    fit_cost = statistics.median(_timed(lambda: trainer.run([])) for _ in range(5))  # a fit over no batches
    del variants, trainer
    torch._dynamo.reset(); gc.collect()   # compiled graphs hold on to their models

    ref = " (reference: about 87)" if (cfg.num_downs, cfg.size, cfg.bs, cfg.ngf) == (8, 256, 1, 64) else ""
    print(f"FLOPs per iteration (FlopCounterMode, conv/matmul forward+backward): {flops/1e9:.1f} GFLOP{ref}")
    print(f"{'variant':<24}{'s/iter':>9}{'img/s':>8}{'GFLOP/s':>9}{'% of matmul peak':>18}{'quiet runs':>12}")
    for k in times.t:
        m, prec = times.median(k), k.split()[1]
        print(f"{k:<24}{m:9.3f}{cfg.bs/m:8.2f}{flops/m/1e9:9.1f}{100*flops/m/1e9/peak[prec]:17.0f}%"
              f"{sum(times.clean(k)):6d}/{len(times.t[k])}")
    print("paired per-round ratios: median (quartiles, rounds)")
    for name, a, b in pairs:
        m, lo, hi, n = times.paired(a, b)
        r[name] = m
        print(f"  {name:<42}{m:6.3f}  ({lo:.3f}-{hi:.3f}, {n})")
    for o in opts:
        if o == 'compile': print(f"  first fit with torch.compile (compiling, {P['iters']} iterations): "
                                 f"fp32 {warm['trainer fp32 compile']:.0f} s, bf16 {warm['trainer bf16 compile']:.0f} s")
    it = times.median('trainer fp32')
    print(f"  per-fit fixed cost (a fit over no batches): {fit_cost*1e3:.1f} ms, {100*fit_cost/(P['iters']*it):.2f}% "
          f"of a timed fp32 fit ({P['iters']} iterations)")
    r['_quiet'] = sum(sum(times.clean(k)) for k in times.t), sum(len(v) for v in times.t.values())
    lap('timing')

    if cfg.name in P['mem_on']:
        for prec in ('fp32', 'bf16'):
            a, b = (peak_memory(cfg, p, prec == 'bf16', P['mem_iters'], P['mem_reps']) for p in ('trainer', 'plain'))
            r[f'{prec} mem'] = (a['peak'] - a['base']) / (b['peak'] - b['base'])
            mib = lambda x: f"{x/2**20:.0f} MiB"
            print(f"peak RSS {prec}: trainer {mib(a['peak'])} ({mib(a['peak']-a['base'])} above start), plain "
                  f"{mib(b['peak'])} ({mib(b['peak']-b['base'])} above start): trainer/plain {r[f'{prec} mem']:.3f} "
                  f"above start, {a['peak']/b['peak']:.3f} whole process")
        lap('memory')
    print()
    return r

def loop_counts(n=20):
    "Python function calls and PyTorch operators per iteration of each path on the tiny model (fp32): counts do not depend on the machine's load"
    import cProfile, pstats
    from torch.profiler import profile, ProfilerActivity
    batches, models = make_batches(TINY, n), make_models(TINY)
    res = {}
    for path in ('trainer', 'fastai', 'plain'):
        v = build(path, TINY, batches, models=models); v.run()
        pr = cProfile.Profile(); pr.enable(); v.run(); pr.disable()
        calls = sum(s[1] for s in pstats.Stats(pr).stats.values()) / n
        with profile(activities=[ProfilerActivity.CPU]) as prof: v.run()
        ops = sum(1 for e in prof.events() if e.key.startswith('aten::') and e.cpu_parent is None) / n
        res[path] = calls, ops
        print(f"{path:8s} {calls:6.0f} Python calls, {ops:4.0f} top-level PyTorch operators per iteration")
    return res

def loop_cost(P, max_other):
    """What the trainer path adds per iteration on a model that does almost no work, against a plain PyTorch loop and
    against the plain step inside a bare fastai `Learner` (what fastai itself adds). Each path fits `n` and `3n`
    iterations in every round: the slope, (t(3n) - t(n)) / 2n, is the cost of one more iteration, and what remains of
    t(n) is the cost of a fit's start and end (set-up, epoch events), which a per-iteration figure should not carry.
    Per-round differences, in wall time and in this process's CPU time (the host work itself, which other processes on
    the machine disturb less)"""
    n = P['overhead_iters']
    models = make_models(TINY)
    lens = (n, 3 * n)
    # the plain and fastai paths autocast as the trainer does (`MatmulConvs` in bf16): the same step in all three
    tv = {(f"{p} {prec}", k): build(p, TINY, make_batches(TINY, k), prec == 'bf16', None if p == 'trainer' else 'mc', models)
          for prec in ('fp32', 'bf16') for p in ('trainer', 'fastai', 'plain') for k in lens}
    for v in tv.values(): v.run()   # warm-up
    wall, cpu, names = {k: [] for k in tv}, {k: [] for k in tv}, list(tv)
    for r in range(P['loop_rounds']):
        for k in (names if r % 2 == 0 else names[::-1]):
            c0, w0 = time.process_time(), time.perf_counter(); tv[k].run()
            cpu[k].append(time.process_time() - c0); wall[k].append(time.perf_counter() - w0)
    del tv; gc.collect()
    print(f"== loop cost: {TINY} (almost no compute), fits of {n} and {3*n} iterations, {torch.get_num_threads()} threads, "
          f"{P['loop_rounds']} interleaved rounds; load average now {os.getloadavg()[0]:.2f}")
    slope = lambda t, k: [(b - a) / (2 * n) for a, b in zip(t[k, n], t[k, 3 * n])]
    def quart(d):
        d = sorted(d)
        q = statistics.quantiles(d, n=4, method='inclusive') if len(d) > 1 else d * 3
        return f"{statistics.median(d):.2f} ms (per-round median, quartiles {q[0]:.2f}-{q[2]:.2f})"
    res = {}
    for prec in ('fp32', 'bf16'):
        for what, t in (('CPU', cpu), ('wall', wall)):
            s = {p: slope(t, f'{p} {prec}') for p in ('trainer', 'fastai', 'plain')}
            f = {p: [a - n * x for a, x in zip(t[f'{p} {prec}', n], s[p])] for p in ('trainer', 'fastai')}
            ms = lambda xs: f"{statistics.median(xs) * 1e3:.2f}"
            print(f"{prec} {what:>4}: one more iteration costs trainer {ms(s['trainer'])} ms, fastai {ms(s['fastai'])} ms, "
                  f"plain {ms(s['plain'])} ms; a fit's start and end trainer {ms(f['trainer'])} ms, fastai {ms(f['fastai'])} ms")
            for a, b in (('trainer', 'fastai'), ('fastai', 'plain'), ('trainer', 'plain')):
                d = [(x - y) * 1e3 for x, y in zip(s[a], s[b])]
                print(f"    per iteration, {a} - {b}: {quart(d)}")
                res[a, b, prec, what] = statistics.median(d)
            per_fit_n = [(x - y) / n * 1e3 for x, y in zip(t[f'trainer {prec}', n], t[f'fastai {prec}', n])]
            print(f"    a fit of {n} iterations, per iteration, trainer - fastai (start and end included): {quart(per_fit_n)}")
    loop_counts()
    return res

def loop_target(loop):
    "The loop cost's target line: (what, whether it holds, the figures), from `loop_cost`'s results"
    d = {p: loop['trainer', 'fastai', p, 'wall'] for p in ('fp32', 'bf16')}
    return ('trainer - bare fastai Learner <= 0.25 ms per iteration (wall)', max(d.values()) <= 0.25,
            ', '.join(f"{p} {v:.2f} ms" for p, v in d.items()))

def print_targets(checks):
    for what, ok, detail in checks: print(f"TARGET {what}: {'holds' if ok else 'MISSED'} ({detail}) [{cpu_tag()}]")

# ---------------------------------------------------------------------------------------------------------------------
# Report

def cpu_tag():
    "The CPU's model, family and whether it computes bfloat16 natively: beside every figure, which depends on them"
    from gan_callbacks.trainer.precision import cpu_info
    c = cpu_info()
    return f"{c['model']} family {c['family']}, {'native' if c['native_bf16'] else 'emulated'} bfloat16"

def machine():
    from gan_callbacks.trainer.precision import cpu_info, auto_precision
    c = cpu_info()
    feats = ', '.join(f"{k} {'yes' if v else 'no'}" for k, v in (c['features'] or {}).items()) or 'instruction sets unknown'
    return (f"{c['model']} (family {c['family']}; {feats}; native bfloat16 {c['native_bf16']}; precision auto picks "
            f"{auto_precision('cpu')[0]}), {os.cpu_count()} logical CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads, "
            f"{torch.backends.cpu.get_cpu_capability()}), fastai {fastai.__version__}, python {platform.python_version()}")

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument('--quick', action='store_true', help='small models, few rounds, no torch.compile: a smoke test')
    g.add_argument('--full', action='store_true', help='more rounds and iterations; the options on both sizes')
    ap.add_argument('--max-other', type=float, default=0.1, help="a run counts as quiet when other processes used at "
                    "most this many CPU cores meanwhile (default 0.1); medians and ratios use quiet runs")
    ap.add_argument('--mem-worker', help=argparse.SUPPRESS)
    ap.add_argument('--loop-only', action='store_true', help='only the loop cost (tiny model): what the trainer adds per iteration')
    args = ap.parse_args()
    if args.mem_worker: return mem_worker(json.loads(args.mem_worker))

    name = 'quick' if args.quick else 'full' if args.full else 'default'
    P, t0 = PROFILES[name], time.perf_counter()
    last = [t0]
    def lap(what):
        now = time.perf_counter(); print(f"[{what}: {now - last[0]:.0f} s]"); last[0] = now

    print(f"bench_step ({name}) {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\nmachine: {machine()}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}; per variant: 1 warm-up fit, then {P['rounds']} "
          f"interleaved rounds of {P['iters']} iterations, up to twice as many rounds while a comparison has fewer "
          f"than 3 rounds with both runs quiet (other processes using at most {args.max_other} cores)\n")

    if args.loop_only:
        loop = loop_cost(P, args.max_other); lap('loop cost')
        print_targets([loop_target(loop)]); return
    from gan_callbacks.trainer.precision import native_bf16
    if not native_bf16('cpu'): print("this CPU emulates bfloat16: the bf16 variants below run many times slower than fp32 "
                                     "(precision 'auto' trains in fp32 here); --quick keeps the run short\n")
    peak = {'fp32': matmul_gflops(torch.float32, P['mm_n']), 'bf16': matmul_gflops(torch.bfloat16, P['mm_n'])}
    print(f"matmul peak ({P['mm_n']}x{P['mm_n']}): fp32 {peak['fp32']:.0f} GFLOP/s, bf16 {peak['bf16']:.0f} GFLOP/s")
    lap('matmul')
    print()

    res = {cfg.name: bench_config(cfg, P, peak, lap, args.max_other) for cfg in P['configs']}

    loop = loop_cost(P, args.max_other)
    lap('loop cost')
    print()

    cfg = P['configs'][0]
    h32, h16 = loss_curves(cfg, P['curve_iters'])
    print(f"== loss curves [{cpu_tag()}]: trainer, {cfg.name}, {P['curve_iters']} iterations from one init on the same batches, fp32 vs bf16")
    curve = {}
    for i, c in enumerate(('g_gan', 'g_l1', 'd_real', 'd_fake')):
        d = (h32[:, i] - h16[:, i]).abs()
        curve[c] = d.max().item(), (d / h32[:, i].abs().clamp_min(1e-8)).max().item()
        print(f"{c:<7} last fp32 {h32[-1, i]:8.4f}  bf16 {h16[-1, i]:8.4f}   max abs diff {curve[c][0]:.4f}   "
              f"max rel diff {curve[c][1]:.4f}")
    lap('loss curves')
    print()

    # Targets and summary
    names = list(res)
    worst = lambda *keys: max(res[c][k] for c in names for k in keys if k in res[c])
    least = lambda key: min(res[c][key] for c in names)
    per = lambda key: ', '.join(f"{c} {res[c][key]:.3f}" for c in names if key in res[c])
    checks = [('fp32 trainer/plain time <= 1.03', worst('fp32 trainer/plain') <= 1.03, per('fp32 trainer/plain')),
              ('trainer/plain peak memory <= 1.10', worst('fp32 mem', 'bf16 mem') <= 1.10,
               f"fp32: {per('fp32 mem')}; bf16: {per('bf16 mem')}"),
              ('bf16 trainer step <= 0.50x plain fp32 step', least('bf16 trainer speedup vs plain fp32') >= 2.0,
               per('bf16 trainer speedup vs plain fp32')),
              loop_target(loop)]
    print_targets(checks)
    opts = ' '.join(f"{k.replace('cl ', 'channels_last ').replace(' speedup', '')}({c})={res[c][k]:.2f}"
                    for c in names for k in ('cl speedup fp32', 'cl speedup bf16', 'compile speedup fp32', 'compile speedup bf16')
                    if k in res[c])
    curves = ' '.join(f"{c}={curve[c][1]:.3f}" for c in ('g_l1', 'd_real', 'd_fake'))
    print(f"SUMMARY fp32 trainer/plain={worst('fp32 trainer/plain'):.3f} bf16 trainer/plain={worst('bf16 trainer/plain'):.3f} "
          f"mem={worst('fp32 mem', 'bf16 mem'):.3f} | bf16 trainer speedup vs plain fp32="
          f"{least('bf16 trainer speedup vs plain fp32'):.2f} (plain bf16 {least('bf16 plain speedup vs plain fp32'):.2f}) "
          f"| option speedups {opts} | bf16/fp32 loss curves max rel diff {curves} "
          f"| quiet runs {sum(res[c]['_quiet'][0] for c in names)}/{sum(res[c]['_quiet'][1] for c in names)} "
          f"| {time.perf_counter()-t0:.0f} s | {cpu_tag()}")

if __name__ == '__main__': main()
