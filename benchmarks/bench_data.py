"""Images per second of the data pipelines: the library's loaders against the pix2pix reference's, on the same files.

The reference pipeline is re-written here in torchvision/PIL from the facts of its `AlignedDataset` and
`UnalignedDataset` (open, convert, split halves, bicubic resize to `load`, random `crop`, flip, `ToTensor`,
`Normalize`) and read by a torch `DataLoader` with batch 1, as the reference trains. The library's loaders are
`Pix2pixDataLoaders.from_folder` and `UnpairedDataLoaders.from_folder` with the same sizes. Both run on the CPU with
one torch thread, with no workers and with `--workers` worker processes, on JPEG and on PNG copies of the same
images (512x256 A|B for pairs; 256x256 per domain for unpaired). All variants of one setting run in interleaved
rounds (order reversed every round), each run one shuffled epoch; reported: medians and quartiles of images per
second (wall clock) and of images per CPU second (this process and its workers: the cost per core, which other
processes on a shared machine disturb much less), and the per-round ratios library/reference.
"""
from __future__ import annotations
import argparse, os, random, resource, statistics, subprocess, sys, tempfile, time, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout
warnings.filterwarnings('ignore')

import numpy as np
import torch
from PIL import Image
import skimage.data
from torchvision import transforms

from gan_callbacks.data.folders import Pix2pixDataLoaders, UnpairedDataLoaders
from gan_callbacks.data.samples import make_pair

# ---------------------------------------------------------------------------------------------------------------------
# The reference's pipeline (DESIGN 5b), written here

def ref_transform(load, crop, pos=None, flip=None):
    "Resize to `load` x `load` (bicubic), crop `crop` at `pos` (random if `None`), flip if `flip` (random if `None`), to [-1, 1]"
    tf = [transforms.Resize([load, load], transforms.InterpolationMode.BICUBIC)]
    if pos is None: tf.append(transforms.RandomCrop(crop))
    else: tf.append(transforms.Lambda(lambda im: im.crop((pos[0], pos[1], pos[0] + crop, pos[1] + crop))))
    if flip is None: tf.append(transforms.RandomHorizontalFlip())
    elif flip: tf.append(transforms.Lambda(lambda im: im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)))
    return transforms.Compose(tf + [transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])

class RefAligned(torch.utils.data.Dataset):
    "The reference's aligned dataset: one A|B file per item, one crop position and flip shared by A and B"
    def __init__(self, files, load=286, crop=256): self.files, self.load, self.crop = files, load, crop
    def __len__(self): return len(self.files)
    def __getitem__(self, i):
        AB = Image.open(self.files[i]).convert('RGB')
        w, h = AB.size
        A, B = AB.crop((0, 0, w // 2, h)), AB.crop((w // 2, 0, w, h))
        n = max(0, self.load - self.crop)
        pos, flip = (random.randint(0, n), random.randint(0, n)), random.random() > 0.5
        tf = ref_transform(self.load, self.crop, pos, flip)
        return {'A': tf(A), 'B': tf(B)}

class RefUnaligned(torch.utils.data.Dataset):
    "The reference's unaligned dataset: A by index, B at random, each with its own crop and flip; max(|A|, |B|) items"
    def __init__(self, a, b, load=286, crop=256): self.a, self.b, self.tf = a, b, ref_transform(load, crop)
    def __len__(self): return max(len(self.a), len(self.b))
    def __getitem__(self, i):
        A = Image.open(self.a[i % len(self.a)]).convert('RGB')
        B = Image.open(self.b[random.randint(0, len(self.b) - 1)]).convert('RGB')
        return {'A': self.tf(A), 'B': self.tf(B)}

# ---------------------------------------------------------------------------------------------------------------------
# Files

_PHOTOS = ('astronaut', 'coffee', 'chelsea', 'rocket', 'immunohistochemistry')

def make_files(root:Path, n:int, seed=0):
    "`n` 512x256 gray|colour A|B pairs and `n` 256x256 images per domain, each as JPEG (quality 90) and PNG"
    rng = np.random.default_rng(seed)
    photos = [Image.fromarray(getattr(skimage.data, p)()).convert('RGB') for p in _PHOTOS]
    for ext in ('jpg', 'png'):
        for d in ('paired/train', 'paired/val', 'unpaired/trainA', 'unpaired/trainB', 'unpaired/testA', 'unpaired/testB'):
            (root/ext/d).mkdir(parents=True)
    for i in range(n):
        im = photos[int(rng.integers(len(photos)))]
        w, h = im.size
        s = int(min(w, h) * rng.uniform(0.4, 1))
        l, t = int(rng.integers(w - s + 1)), int(rng.integers(h - s + 1))
        ab = make_pair(im, (l, t, l + s, t + s), 256)
        for ext, kw in (('jpg', dict(quality=90)), ('png', {})):
            ab.save(root/ext/'paired'/('val' if i < 2 else 'train')/f'{i:04d}.{ext}', **kw)
            for d, half in (('A', ab.crop((0, 0, 256, 256))), ('B', ab.crop((256, 0, 512, 256)))):
                half.save(root/ext/'unpaired'/(f'test{d}' if i < 2 else f'train{d}')/f'{i:04d}.{ext}', **kw)

# ---------------------------------------------------------------------------------------------------------------------
# Loaders: each `run()` is one shuffled epoch, returning the number of images (items) read

class RefLoader:
    def __init__(self, ds, workers, persistent=False):
        self.dl = torch.utils.data.DataLoader(ds, batch_size=1, shuffle=True, num_workers=workers, persistent_workers=persistent)
    def run(self): return sum(b['A'].shape[0] for b in self.dl)

class LibLoader:
    def __init__(self, dls): self.dl = dls.train
    def run(self): return sum(b[0].shape[0] for b in self.dl)

def variants(root:Path, workers:int, load:int, crop:int):
    "The loaders of one (format, workers) setting"
    kw = dict(load_size=load, crop_size=crop, bs=1, num_workers=workers, device='cpu')
    paired = sorted((root/'paired'/'train').iterdir())
    a, b = (sorted((root/'unpaired'/f'train{d}').iterdir()) for d in 'AB')
    res = {'ref paired': RefLoader(RefAligned(paired, load, crop), workers),
           'lib paired': LibLoader(Pix2pixDataLoaders.from_folder(root/'paired', **kw)),
           'ref unpaired': RefLoader(RefUnaligned(a, b, load, crop), workers),
           'lib unpaired': LibLoader(UnpairedDataLoaders.from_folder(root/'unpaired', **kw))}
    if workers:   # not how the reference runs (its workers start again every epoch), for comparison: PyTorch's persistent workers
        res['ref paired, persistent'] = RefLoader(RefAligned(paired, load, crop), workers, persistent=True)
    return res

# ---------------------------------------------------------------------------------------------------------------------
# Timing

_TCK = os.sysconf('SC_CLK_TCK')
def _live_children_cpu():
    "CPU seconds of this process's live child processes: persistent workers are not reaped, so `RUSAGE_CHILDREN` misses them"
    total = 0.
    for task in os.listdir('/proc/self/task'):
        try: kids = open(f'/proc/self/task/{task}/children').read().split()
        except OSError: continue
        for pid in kids:
            try: fields = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
            except OSError: continue   # ended meanwhile: counted by `RUSAGE_CHILDREN` once reaped
            total += (int(fields[11]) + int(fields[12])) / _TCK   # utime, stime
    return total

def _snapshot():
    "(wall time, busy CPU seconds of the machine, CPU seconds of this process and its workers, live or reaped)"
    with open('/proc/stat') as f: v = [int(x) for x in f.readline().split()[1:]]
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)   # microseconds, not ticks
    return (time.perf_counter(), (sum(v) - v[3] - v[4]) / _TCK,
            me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _live_children_cpu())

def timed(loader):
    "Images per second, images per CPU second of this process and its workers, and the cores others used meanwhile"
    w0, b0, c0 = _snapshot(); n = loader.run(); w1, b1, c1 = _snapshot()
    wall, cpu = w1 - w0, max(c1 - c0, 1e-9)
    return n / wall, n / cpu, max(0., (b1 - b0) - cpu) / wall

def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method='inclusive') if len(xs) > 1 else xs * 3
    return statistics.median(xs), q[0], q[2]

def fmt(xs, f='{:7.1f}'): m, lo, hi = quartiles(xs); return f"{f.format(m)} ({f.format(lo).strip()}-{f.format(hi).strip()})"

def bench(root, workers, rounds, load, crop):
    vs = variants(root, workers, load, crop)
    for v in vs.values(): v.run()   # warm-up: page cache, lazily built pieces
    res, names = {k: [] for k in vs}, list(vs)
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]): res[k].append(timed(vs[k]))
    return res

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--n', type=int, default=100, help='A|B files per format (2 of them validate); default 100')
    ap.add_argument('--rounds', type=int, default=5, help='interleaved rounds per setting; default 5')
    ap.add_argument('--workers', type=int, default=2, help='worker processes of the second setting; default 2')
    ap.add_argument('--load', type=int, default=286); ap.add_argument('--crop', type=int, default=256)
    ap.add_argument('--formats', default='jpg,png')
    args = ap.parse_args()
    torch.set_num_threads(1)
    up = lambda: subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    print(f"bench_data {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {args.n - 2} training items per epoch, batch 1, "
          f"{args.load} -> {args.crop}, 1 torch thread, {args.rounds} interleaved rounds after a warm-up epoch\nuptime: {up()}")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        make_files(Path(tmp), args.n)
        for ext in args.formats.split(','):
            for w in (0, args.workers):
                res = bench(Path(tmp)/ext, w, args.rounds, args.load, args.crop)
                print(f"\n== {ext}, {w} workers   (median (quartiles) over rounds)")
                print(f"{'variant':<24}{'img/s':>22}{'img per CPU s':>24}{'others used, cores':>24}")
                for k, rs in res.items():
                    print(f"{k:<24}{fmt([r[0] for r in rs]):>22}{fmt([r[1] for r in rs]):>24}{fmt([r[2] for r in rs], '{:5.2f}'):>24}")
                for kind in ('paired', 'unpaired'):
                    lib, ref = res[f'lib {kind}'], res[f'ref {kind}']
                    wall, cpu = [a[0] / b[0] for a, b in zip(lib, ref)], [a[1] / b[1] for a, b in zip(lib, ref)]
                    print(f"lib/ref {kind:<9} img/s {fmt(wall, '{:.2f}')}, img per CPU s {fmt(cpu, '{:.2f}')}")
                    summary.append(f"{ext} w{w} {kind} {quartiles(wall)[0]:.2f}/{quartiles(cpu)[0]:.2f}")
                if w:
                    lib, ref = res['lib paired'], res['ref paired, persistent']
                    cpu = [a[1] / b[1] for a, b in zip(lib, ref)]
                    print(f"lib/ref paired, the reference with persistent workers: img per CPU s {fmt(cpu, '{:.2f}')}")
                    summary.append(f"{ext} w{w} paired vs persistent ref -/{quartiles(cpu)[0]:.2f}")
    print(f"\nuptime: {up()}")
    print("SUMMARY lib/ref (img/s / img per CPU s): " + ', '.join(summary))

if __name__ == '__main__': main()
