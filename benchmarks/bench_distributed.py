"""Data-parallel pix2pix on the CPU: 2 processes x 1 thread (gloo) against 1 process x 2 threads (and x 1), same global batch.

Each configuration runs in fresh processes (`OMP_NUM_THREADS` set before torch starts) and times training iterations
after a warm-up; the 2-process run goes through `gan_callbacks.trainer.distributed.launch` and `distrib_fit`, as
`gan_callbacks train --nproc 2` does. It also prints what data parallelism communicates per step: the gradients of
G and D, in MB, for the paper's unet_256 + PatchGAN on 8 GPUs (a paper estimate, not a measurement).
`python benchmarks/bench_distributed.py [--size 64] [--bs 4] [--iters 20] [--repeats 3]`
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time, warnings, statistics
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this checkout
warnings.filterwarnings('ignore')


def worker(size, bs, iters, warmup, out):
    "One process of a run: `bs` images per process per iteration; rank 0 writes seconds per iteration to `out`"
    import torch
    from fastai.basics import DataLoaders, Callback, set_seed
    from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
    from gan_callbacks.gans.pix2pix import pix2pix_learner, unet_depth
    from fastai.torch_core import num_distrib
    from gan_callbacks.trainer.distributed import distrib_fit, setup_process
    rank, world = setup_process(), max(num_distrib(), 1)
    set_seed(0)
    n = (warmup + iters) * bs * world
    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(3, size, size, generator=g)*2-1, torch.rand(3, size, size, generator=g)*2-1) for _ in range(n)]
    dls = DataLoaders.from_dsets(data, data[:bs*world], bs=bs, shuffle=False, device='cpu')
    learn = pix2pix_learner(dls, UnetGenerator(num_downs=unet_depth(size), ngf=32), PatchDiscriminator(ndf=32))

    class Clock(Callback):
        order = 100
        def before_fit(self): self.times = []
        def after_batch(self):
            if self.training: self.times.append(time.perf_counter())
    learn.add_cb(Clock())
    with learn.no_bar(), learn.no_logging(), distrib_fit(learn): learn.fit(1, 2e-4)
    t = learn.clock.times
    if rank == 0: Path(out).write_text(json.dumps((t[-1] - t[warmup - 1]) / (len(t) - warmup)))


def run(nproc, threads, a, out):
    "Seconds per iteration of one fresh run"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    args = [__file__, '--worker', '--size', str(a.size), '--bs', str(a.bs // nproc), '--iters', str(a.iters), '--warmup', str(a.warmup), '--out', str(out)]
    if nproc == 1: subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True)
    else:
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from gan_callbacks.trainer.distributed import launch; "
                f"launch({[sys.executable, *args]!r}, nproc={nproc})")
        subprocess.run([sys.executable, '-c', code], env=env, check=True, capture_output=True)
    return json.loads(Path(out).read_text())


def comm_estimate():
    "MB of gradients all-reduced per step for the paper's nets, and what a ring all-reduce moves per GPU on 8 GPUs"
    from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
    g = sum(p.numel() for p in UnetGenerator(num_downs=8).parameters())
    d = sum(p.numel() for p in PatchDiscriminator().parameters())
    mb = lambda n: n * 4 / 1e6   # float32 gradients
    n = 8
    ring = 2 * (n - 1) / n   # a ring all-reduce sends (and receives) this fraction of the message per GPU
    print(f"\nPaper estimate, unet_256 G ({g:,} parameters) + PatchGAN D ({d:,}), fp32 gradients, 8 GPUs:")
    print(f"  all-reduced per iteration: G {mb(g):.1f} MB + D {mb(d):.1f} MB = {mb(g+d):.1f} MB "
          f"(one D all-reduce per D update: x n_critic)")
    print(f"  sent per GPU by a ring all-reduce: {ring:.2f} x {mb(g+d):.1f} = {ring*mb(g+d):.0f} MB per iteration")
    for name, gbs in (('NVLink (~150 GB/s bus bandwidth)', 150), ('PCIe 4.0 x16 (~20 GB/s)', 20), ('10 Gb/s Ethernet between machines', 1.25)):
        print(f"    {name}: ~{ring*mb(g+d)/gbs:.0f} ms")
    print("  against ~87 GFLOP of compute per image (G forward 12.1, D forward 6.4, x3 for backward): ~9 ms per image at "
          "an effective 10 TFLOP/s. With one image per GPU, PCIe or Ethernet communication exceeds the compute; DDP overlaps "
          "G's all-reduce with G's backward, D's is not overlapped (it runs after D's backward).")


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--worker', action='store_true')
    p.add_argument('--size', type=int, default=64)
    p.add_argument('--bs', type=int, default=4, help='global batch (split over the processes)')
    p.add_argument('--iters', type=int, default=20)
    p.add_argument('--warmup', type=int, default=3)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--out', default=None)
    a = p.parse_args()
    if a.worker: return worker(a.size, a.bs, a.iters, a.warmup, a.out)
    import tempfile
    print(f"pix2pix, U-Net ngf 32 + PatchGAN ndf 32 (BatchNorm), {a.size}x{a.size}, global batch {a.bs}, {a.iters} timed iterations "
          f"after {a.warmup}; load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.repeats):   # interleaved, so a change in the machine's load hits both
            for nproc, threads in ((1, 2), (2, 1), (1, 1)):
                res.setdefault((nproc, threads), []).append(run(nproc, threads, a, Path(d)/f'{nproc}_{r}.json'))
    for (nproc, threads), ts in res.items():
        m = statistics.median(ts)
        print(f"  {nproc} process(es) x {threads} thread(s): {m*1e3:.0f} ms per iteration (median of {len(ts)}: "
              f"{', '.join(f'{t*1e3:.0f}' for t in ts)}), {a.bs/m:.1f} images/s")
    r = statistics.median(res[(2, 1)]) / statistics.median(res[(1, 2)])
    print(f"  2 processes / 1 process: {r:.2f}x the time per iteration")
    comm_estimate()


if __name__ == '__main__': main()
