"""`make demo`'s command cut to one epoch, with `--precision auto` against `--precision fp32`: what auto's choice costs or
gains on this CPU. Runs alternate (auto, fp32, fp32, auto, ...) on one thread, as `make demo` runs; the ratio is of medians.

    python benchmarks/bench_auto.py            # 3 runs each
    python benchmarks/bench_auto.py --runs 5

Where the CPU has native bfloat16, auto trains in it and should be faster than fp32; where it has none, auto picks fp32
and should cost at most 1.15x fp32 (the same command, plus the check)."""
import argparse, os, re, shlex, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # benchmark this checkout

def demo_args():
    "DEMO_ARGS of the Makefile, with one epoch and no decay"
    args = shlex.split(re.search(r'^DEMO_ARGS \?= (.*)$', (ROOT/'Makefile').read_text(), re.M).group(1))
    for opt, v in (('--epochs', '1'), ('--epochs-decay', '0')): args[args.index(opt) + 1] = v
    return args

def run(precision, home):
    "Seconds of wall time of the demo's command, one epoch, in `precision`"
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, '-m', 'gan_callbacks', 'train', '--sample', '--out', out, *demo_args(), '--precision', precision]
        env = dict(os.environ, OMP_NUM_THREADS='1', GAN_CALLBACKS_HOME=home, PYTHONPATH=str(ROOT))
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        return time.perf_counter() - t

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--runs', type=int, default=3, help='runs of each precision (default 3)')
    a = ap.parse_args()
    from gan_callbacks.trainer.precision import cpu_info, auto_precision
    cpu, (pick, why) = cpu_info(), auto_precision('cpu')
    feats = ', '.join(k for k, v in (cpu['features'] or {}).items() if v) or 'unknown'
    print(f"CPU: {cpu['model']} (family {cpu['family']}); features: {feats}; native bfloat16: {cpu['native_bf16']}")
    print(f"auto picks {pick}: {why}")
    print(f"command: gan_callbacks train --sample {shlex.join(demo_args())} --precision auto|fp32 (one thread)")
    with tempfile.TemporaryDirectory() as home:
        run('fp32', home)   # builds the sample once, and warms the file cache
        times = {'auto': [], 'fp32': []}
        for i in range(a.runs):
            for p in (('auto', 'fp32') if i % 2 == 0 else ('fp32', 'auto')):
                times[p].append(run(p, home))
                print(f"  {p:4}: {times[p][-1]:6.1f} s", flush=True)
    m = {p: statistics.median(t) for p, t in times.items()}
    ratio = m['auto'] / m['fp32']
    target = (ratio < 1.0) if cpu['native_bf16'] else (ratio <= 1.15)
    print(f"median: auto {m['auto']:.1f} s, fp32 {m['fp32']:.1f} s; auto/fp32 = {ratio:.3f} "
          f"({'target: < 1' if cpu['native_bf16'] else 'target: <= 1.15'}, {'holds' if target else 'MISSED'}) on {cpu['model']} "
          f"family {cpu['family']}, auto = {pick}")

if __name__ == '__main__': main()
