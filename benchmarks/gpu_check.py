"""`make gpu-check`: what needs a CUDA GPU, in one command of at most 8 minutes on one GPU, and one table of figures.

Without a GPU it says so and exits 0: no GPU figures exist then. With one it
1. runs the tests marked `cuda` (fp16 with its scalers, bf16, channels_last, torch.compile, nccl with one process);
2. times training iterations of pix2pix (256 px, batch 1 and 16), CycleGAN (256 px) and pix2pixHD (1024 px wide), each built by
   its registered model (`GANModel`) on its built-in sample, in bfloat16 (float16 where the GPU has no bfloat16): images per
   second, peak memory, and the share of the GPU's own matmul peak in that precision, measured in the same run;
3. writes the table to `gpu_check.md` (`--out`) and prints it.

`--device cpu --tiny` runs step 2 on tiny models on the CPU: how the test suite checks this script without a GPU.
"""
from __future__ import annotations
import argparse, os, platform, subprocess, sys, tempfile, time, warnings
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))   # this checkout
warnings.filterwarnings('ignore')
from fastai.callback.core import Callback, CancelFitException

# (label, model, sample options, loader options, learner options); `tiny` shrinks each to a CPU smoke test
cases = [
    ('pix2pix 256 px, batch 1', 'pix2pix', dict(n_train=4, n_valid=1, size=256), dict(load_size=256, crop_size=256, bs=1), {}),
    ('pix2pix 256 px, batch 16', 'pix2pix', dict(n_train=32, n_valid=1, size=256), dict(load_size=256, crop_size=256, bs=16), {}),
    ('CycleGAN 256 px, batch 1', 'cyclegan', dict(n_train=4, n_test=1, size=256), dict(load_size=256, crop_size=256, bs=1), {}),
    ('pix2pixHD 1024x1024, batch 1', 'pix2pixhd', dict(n_train=2, n_valid=1, size=512, label_nc=8), dict(label_nc=8, load_size=1024, bs=1),
     dict(vgg=False)),
]

def tiny(case):
    "`case` at 32 px with tiny networks"
    label, model, s, l, kw = case
    s = {**s, 'size': 32, **{k: min(v, 4) for k, v in s.items() if k.startswith('n_')}}
    l = {**l, 'load_size': 36 if 'crop_size' in l else 32, **({'crop_size': 32} if 'crop_size' in l else {}), 'bs': min(l['bs'], 2)}
    return f"{model} tiny, 32 px, batch {l['bs']}", model, s, l, {**kw, 'ngf': 8, **({'n_blocks': 1} if model != 'pix2pix' else {})}

def sync(device):
    import torch
    if device.type == 'cuda': torch.cuda.synchronize(device)

def matmul_peak(device, dtype, n=4096, reps=10) -> float:
    "FLOP/s of an `n`x`n` matmul in `dtype` on `device`, the best of `reps`"
    import torch
    if device.type == 'cpu': n = 1024
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    a @ b; sync(device)
    best = float('inf')
    for _ in range(reps):
        t = time.perf_counter(); a @ b; sync(device); best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best

class Timer(Callback):
    "Seconds of each training batch, the device synchronised at each end"
    order = 100
    def __init__(self, device): self.device, self.times = device, []
    def before_batch(self): sync(self.device); self.t = time.perf_counter()
    def after_batch(self):
        if self.learn.training: sync(self.device); self.times.append(time.perf_counter() - self.t)

class FirstBatchOnly(Callback):   # not `OneBatch`: fastai would set it as `learn.one_batch`
    "Stop a fit after its first training batch (no validation)"
    order = 100
    def after_batch(self):
        if self.learn.training: raise CancelFitException()

def time_case(case, device, precision, iters, home):
    "One row: images per second, seconds per iteration, peak memory, FLOP per iteration of `case` trained in `precision`"
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    import gan_callbacks.all   # registers the models
    from gan_callbacks.trainer.registry import get_model
    label, name, s, l, kw = case
    m = get_model(name)
    data = m.sample(Path(home)/name/'_'.join(f'{k}{v}' for k, v in s.items()), **s)
    dls = m.loaders(data, **l, device=device)
    learn = m.make_learner(dls, path=Path(home)/'runs', **kw)
    if precision == 'bf16': learn.to_bf16()
    elif precision == 'fp16': learn.to_fp16()
    timer = Timer(device)
    with learn.no_bar(), learn.no_logging():
        learn.fit(1, 2e-4)   # the first epoch builds D and warms the kernels up
        with FlopCounterMode(display=False) as fc:
            learn.fit(1, 2e-4, cbs=[FirstBatchOnly()])
        if device.type == 'cuda': torch.cuda.reset_peak_memory_stats(device)
        while len(timer.times) < iters: learn.fit(1, 2e-4, cbs=[timer])
    sec = sorted(timer.times)[len(timer.times) // 2]   # the median iteration
    mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == 'cuda' else None
    return dict(case=label, sec=sec, img_s=l['bs'] / sec, mem=mem, flop=fc.get_total_flops())

def run_tests(timeout):
    "The tests marked `cuda`: their exit code and last line"
    r = subprocess.run([sys.executable, '-m', 'pytest', 'tests/', '-q', '-m', 'cuda', '-p', 'no:cacheprovider'], cwd=root,
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, (r.stdout.strip().splitlines() or [''])[-1]

def table(rows, peak, precision, device_name, tests) -> str:
    lines = [f"GPU check on {device_name}, {precision}: matmul peak {peak / 1e12:.1f} TFLOP/s measured in this run; tests marked cuda: {tests}", '',
             '| case | s/iter | img/s | peak memory | TFLOP/iter | share of the peak |', '|---|---|---|---|---|---|']
    for r in rows:
        mem = '' if r['mem'] is None else f"{r['mem']:.2f} GiB"
        lines.append(f"| {r['case']} | {r['sec']:.4f} | {r['img_s']:.1f} | {mem} | {r['flop'] / 1e12:.4g} | {r['flop'] / r['sec'] / peak:.0%} |")
    return '\n'.join(lines) + '\n'

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--device', default='cuda', help="'cuda' (default), or 'cpu' with --tiny to check this script")
    ap.add_argument('--tiny', action='store_true', help='tiny networks at 32 px: a smoke test')
    ap.add_argument('--iters', type=int, default=5, help='timed iterations per case (the median is reported)')
    ap.add_argument('--no-tests', action='store_true', help='only the figures')
    ap.add_argument('--out', default=str(root/'gpu_check.md'), help='where the table is written')
    a = ap.parse_args(argv)
    import torch
    if a.device == 'cuda' and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA GPU found (torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}): nothing was "
              "run or measured, and no GPU figures exist yet")
        return 0
    device = torch.device(a.device)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else f"the CPU ({platform.processor() or platform.machine()})"
    precision = 'bf16' if device.type == 'cpu' or torch.cuda.is_bf16_supported() else 'fp16'
    code, tests = run_tests(timeout=240) if device.type == 'cuda' and not a.no_tests else (0, 'not run')
    peak = matmul_peak(device, torch.bfloat16 if precision == 'bf16' else torch.float16)
    with tempfile.TemporaryDirectory() as home:
        rows = [time_case(tiny(c) if a.tiny else c, device, precision, a.iters, home) for c in cases]
    text = table(rows, peak, precision, name, tests)
    Path(a.out).write_text(text)
    print(text + f"\nwrote {a.out}")
    return 1 if code else 0

if __name__ == '__main__': sys.exit(main())
