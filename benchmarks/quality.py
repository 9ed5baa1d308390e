"""Image quality of the paper recipe, each stabilizer alone, a few combinations, and the modern recipe, on the built-in samples.

For each model (pix2pix on `sample_pairs`, CycleGAN on `sample_unpaired`, pix2pixHD on `sample_labels`), each variant
and each seed: a fresh learner (`pix2pix_learner` / `cyclegan_learner` / `pix2pixhd_learner` with `recipe=` and the
option), `fit_gan(epochs, epochs_decay)` (pix2pixHD: `fit_pix2pixhd`), then the validation scores of the weights a run
keeps (the moving average when there is one):

- pix2pix and pix2pixHD: L1, PSNR, SSIM of G(A) against B on the validation pairs, and SWD between the B images and the
  G(A) images;
- CycleGAN: SWD between the testB images and G_A(testA), and L1, PSNR, SSIM of G_A(testA) against testA_true (the
  sample's true B images of testA).

With `--pictures DIR` it also writes, per model, `DIR/quality_<model>.png`: the first `--n-pictures` validation crops
of the first seed, rows input | paper | modern | target (CycleGAN: testA | paper | modern | true B; pix2pixHD: the
label maps in colour).

It prints mean +- sd over seeds, the wall time, the seconds per iteration as a ratio to the paper recipe (median over
seeds; a shared machine makes these noisy), and the runs that diverged (a non-finite stop, skipped iterations or
non-finite outputs). Everything is configurable (`--epochs`, `--seeds`, `--size`, `--n-train`, ...); the defaults are
the Makefile demos' sizes, far too long for a small CPU: see benchmarks/README.md for what was run.
"""
from __future__ import annotations
import argparse, json, math, statistics, sys, time, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout
warnings.filterwarnings('ignore')

import torch
from fastai.torch_core import set_seed
from fastai.callback.core import Callback
from gan_callbacks.data.samples import sample_pairs, sample_unpaired
from gan_callbacks.data.folders import Pix2pixDataLoaders, UnpairedDataLoaders
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator
from gan_callbacks.gans.pix2pix import pix2pix_learner, unet_depth
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.data.label_maps import LabelDataLoaders, sample_labels, colour_labels
from gan_callbacks.nets.hd_networks import GlobalGenerator
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from gan_callbacks.cli.runs import true_pairs
from gan_callbacks.deploy.inference import translate_batch
from gan_callbacks.metrics.scores import psnr, ssim
from gan_callbacks.metrics.swd import swd
from gan_callbacks.stabilizers.ema import averaged
from gan_callbacks.trainer.nonfinite import NonFiniteError
from PIL import Image
from torchvision.utils import make_grid
from torchvision.transforms.functional import to_pil_image

VARIANTS = {'paper': ('paper', {}),
            'ema': ('paper', dict(ema=True)),
            'diffaugment': ('paper', dict(diffaugment='color,translation,cutout')),
            'r1': ('paper', dict(r1_gamma=1.)),
            'r2': ('paper', dict(r2_gamma=1.)),
            'spectral_norm': ('paper', dict(spectral_norm=True)),
            'multiscale': ('paper', dict(num_D=2, lambda_feat=10.))}
_opts = lambda *vs, recipe='paper': (recipe, {k: v for n in vs for k, v in VARIANTS[n][1].items()})   # several variants' options together
VARIANTS.update({'ema+diffaugment': _opts('ema', 'diffaugment'), 'multiscale+r2': _opts('multiscale', 'r2'), 'multiscale+sn+r2': _opts('multiscale', 'spectral_norm', 'r2'),
                 'modern': ('modern', {}), 'modern+ms+sn': _opts('multiscale', 'spectral_norm', recipe='modern')})

def pix2pix_run(a, data, recipe, opts):
    dls = Pix2pixDataLoaders.from_folder(data, load_size=a.load_size, crop_size=a.size, bs=a.bs, num_workers=0)
    G = UnetGenerator(dls.in_ch, dls.out_ch, num_downs=unet_depth(a.size), ngf=a.ngf)
    return pix2pix_learner(dls, G, gan_mode=a.gan_mode, recipe=recipe, trainer_kwargs=dict(test_mode='eval', **opts))

def cyclegan_run(a, data, recipe, opts):
    dls = UnpairedDataLoaders.from_folder(data, load_size=a.load_size, crop_size=a.size, bs=a.bs, num_downs=2, num_workers=0)
    gs = [ResnetGenerator(3, 3, ngf=a.ngf, n_blocks=a.n_blocks) for _ in range(2)]
    return cyclegan_learner(dls, *gs, lambda_idt=0., recipe=recipe, trainer_kwargs=opts)

LABEL_NC = 8   # the label-map sample's classes

def pix2pixhd_run(a, data, recipe, opts):
    dls = LabelDataLoaders.from_folder(data, label_nc=LABEL_NC, load_size=a.size, bs=a.bs, num_workers=0)
    G = GlobalGenerator(dls.in_ch, dls.out_ch, ngf=a.ngf, n_downsampling=3, n_blocks=a.n_blocks)
    return pix2pixhd_learner(dls, G, recipe=recipe, trainer_kwargs=dict(gan_mode=a.gan_mode, vgg=False, **opts))   # no VGG file here

runs = {'pix2pix': pix2pix_run, 'cyclegan': cyclegan_run, 'pix2pixhd': pix2pixhd_run}
fits = {'pix2pixhd': 'fit_pix2pixhd'}   # the others: `fit_gan`

@torch.no_grad()
def scores(learn, model, data, a):
    "Validation scores of the weights the run keeps"
    with averaged(learn):
        if model in ('pix2pix', 'pix2pixhd'):
            xs, ys = zip(*[(x, y) for x, y in learn.dls.valid])
            x, y = torch.cat(xs), torch.cat(ys)
            learn.model.eval()
            out = torch.cat([learn.model(b) for b in x.split(a.bs)]).float().as_subclass(torch.Tensor)   # (on label maps: typed as its input)
            learn.model.train()
            inp, real, fake, truth = (colour_labels(x, LABEL_NC) if model == 'pix2pixhd' else x), y, out, y
        else:
            A, true_B = true_pairs(data, a.size)
            fake = translate_batch(learn, A).float().cpu()
            real = torch.cat([b for _, b in learn.dls.valid]).cpu()   # testB
            inp, truth = A, true_B
    finite = bool(fake.isfinite().all())
    res = dict(swd=swd(real.cpu(), fake.cpu()) if finite else math.nan)
    if truth is not None and finite:
        f, t = fake.cpu(), truth.cpu()
        res.update(l1=float((f - t).abs().mean()), psnr=float(psnr(f, t)), ssim=float(ssim(f, t)))
    return res, finite, (inp.cpu(), fake.cpu(), truth.cpu())

def one(a, model, data, variant, seed):
    recipe, opts = VARIANTS[variant]
    set_seed(seed)
    learn = runs[model](a, data, recipe, opts)
    if a.bf16: learn.to_bf16()
    t0, stopped = time.perf_counter(), None
    with learn.no_bar(), learn.no_logging():
        try: getattr(learn, fits.get(model, 'fit_gan'))(a.epochs, a.epochs_decay, lr=a.lr)
        except NonFiniteError as e: stopped = str(e).split('.')[0]
    secs = time.perf_counter() - t0
    res, finite, images = scores(learn, model, data, a)
    t = next(cb for cb in learn.cbs if hasattr(cb, 'n_skipped'))
    n_iter = len(learn.dls.train) * (a.epochs + a.epochs_decay)
    diverged = bool(stopped or t.n_skipped or not finite)
    return dict(model=model, variant=variant, seed=seed, seconds=secs, sec_per_iter=secs / n_iter, skipped=t.n_skipped,
                diverged=diverged, why=stopped, **res), images

def rgb(x): return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x

def picture(images, fn, n):
    "`images[variant]` = (input, output, target): rows input | paper | modern | target of the first `n`, written to `fn`"
    (inp, paper, truth), modern = images['paper'], images['modern'][1]
    rows = [rgb(t[:n]).float().clamp(-1, 1) for t in (inp, paper, modern, truth)]
    grid = make_grid(torch.cat(rows), nrow=n, padding=2, normalize=True, value_range=(-1, 1), pad_value=1)
    # an adaptive 256-colour palette keeps a 64 px picture a third of its full-colour PNG's size
    to_pil_image(grid).quantize(256, dither=Image.Dither.NONE).save(fn, optimize=True)

class BatchTimes(Callback):
    "Wall seconds of each training batch, from its start to the end of the trainer's updates and the average's"
    order = 90
    def before_fit(self): self.times = []
    def before_batch(self): self.t0 = time.perf_counter()
    def after_batch(self):
        if self.training: self.times.append(time.perf_counter() - self.t0)

def speed(a, model, data, variants, rounds):
    "Median seconds per training iteration of each variant (first 2 batches of a fit left out), variants interleaved, order reversed every round"
    times = {v: [] for v in variants}
    for r in range(rounds):
        for v in (variants if r % 2 == 0 else variants[::-1]):
            recipe, opts = VARIANTS[v]
            set_seed(r)
            learn = runs[model](a, data, recipe, opts)
            if a.bf16: learn.to_bf16()
            bt = BatchTimes()
            with learn.no_bar(), learn.no_logging(): learn.fit(1, a.lr, cbs=bt)
            times[v] += bt.times[2:]
    base = statistics.median(times[variants[0]])
    return {v: (statistics.median(t), statistics.median(t) / base) for v, t in times.items()}

def summarize(rows, model, variants):
    def ms(vals):
        vals = [v for v in vals if v is not None and not math.isnan(v)]
        if not vals: return 'n/a'
        return f"{statistics.mean(vals):.4g} +- {statistics.stdev(vals) if len(vals) > 1 else 0:.2g}"
    keys = ['l1', 'psnr', 'ssim', 'swd']
    base = statistics.median(r['sec_per_iter'] for r in rows if r['model'] == model and r['variant'] == 'paper') \
           if any(r['model'] == model and r['variant'] == 'paper' for r in rows) else None
    lines = [f"| {model} variant | " + ' | '.join(k.upper() for k in keys) + " | wall s (total) | s/iter vs paper | diverged |",
             '|---' * (len(keys) + 4) + '|']
    for v in variants:
        rs = [r for r in rows if r['model'] == model and r['variant'] == v]
        if not rs: continue
        ratio = f"{statistics.median(r['sec_per_iter'] for r in rs) / base:.2f}x" if base else 'n/a'
        lines.append(f"| {v} | " + ' | '.join(ms([r.get(k) for r in rs]) for k in keys) +
                     f" | {sum(r['seconds'] for r in rs):.0f} | {ratio} | {sum(r['diverged'] for r in rs)}/{len(rs)} |")
    return '\n'.join(lines)

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', nargs='+', default=list(runs), choices=tuple(runs))
    p.add_argument('--variants', nargs='+', default=list(VARIANTS), choices=tuple(VARIANTS))
    p.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    p.add_argument('--epochs', type=int, default=8); p.add_argument('--epochs-decay', type=int, default=7)
    p.add_argument('--size', type=int, default=64, help='crop size'); p.add_argument('--load-size', type=int, default=None)
    p.add_argument('--n-train', type=int, default=400); p.add_argument('--n-valid', type=int, default=40)
    p.add_argument('--ngf', type=int, default=32); p.add_argument('--n-blocks', type=int, default=3)
    p.add_argument('--bs', type=int, default=4); p.add_argument('--lr', type=float, default=2e-4)
    p.add_argument('--gan-mode', default='lsgan'); p.add_argument('--bf16', action='store_true')
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--data-dir', default='quality_data', help='where the samples are built (once)')
    p.add_argument('--out', default='quality.json', help='every run, as JSON')
    p.add_argument('--pictures', metavar='DIR', help="write DIR/quality_<model>.png: the first seed's validation crops, paper against modern")
    p.add_argument('--n-pictures', type=int, default=6, help='crops per row of the pictures')
    p.add_argument('--speed', type=int, metavar='ROUNDS', help='only time one epoch per variant, ROUNDS interleaved rounds: '
                   'median seconds per iteration and the ratio to the first variant')
    p.add_argument('--summarize', metavar='LOG', help="only print the tables of the runs printed in LOG (one JSON line per run)")
    a = p.parse_args()
    if a.summarize:
        rows = [json.loads(l) for l in Path(a.summarize).read_text().splitlines() if l.startswith('{')]
        for model in dict.fromkeys(r['model'] for r in rows): print('\n' + summarize(rows, model, list(VARIANTS)))
        return
    a.load_size = a.load_size or a.size * 9 // 8
    torch.set_num_threads(a.threads)
    d = Path(a.data_dir)
    samples = {'pix2pix': lambda: sample_pairs(d/f'pairs_{a.size}_{a.n_train}', n_train=a.n_train, n_valid=a.n_valid, size=a.load_size),
               'cyclegan': lambda: sample_unpaired(d/f'unpaired_{a.size}_{a.n_train}', n_train=a.n_train, n_test=a.n_valid, size=a.load_size),
               'pix2pixhd': lambda: sample_labels(d/f'labels_{a.size}_{a.n_train}', n_train=a.n_train, n_valid=a.n_valid, size=a.size,
                                                  label_nc=LABEL_NC)}
    data = {m: samples[m]() for m in a.models}   # built once, kept in --data-dir
    if a.speed:
        for model in a.models:
            res = speed(a, model, data[model], a.variants, a.speed)
            print(f"\n{model}, {a.size}px, bs {a.bs}, ngf {a.ngf}: seconds per training iteration (median), ratio to {a.variants[0]}")
            for v, (t, ratio) in res.items(): print(f"  {v:<14} {t*1e3:8.1f} ms  {ratio:.2f}x")
        return
    if a.pictures and not {'paper', 'modern'} <= set(a.variants): p.error('--pictures needs the paper and modern variants')
    rows = []
    for model in a.models:
        pics = {}
        for seed in a.seeds:
            for v in a.variants:   # the variants of a seed one after the other: a load change hits them alike
                r, images = one(a, model, data[model], v, seed); rows.append(r)
                print(json.dumps({k: (round(x, 5) if isinstance(x, float) else x) for k, x in r.items()}), flush=True)
                if a.pictures and seed == a.seeds[0]: pics[v] = images
            if a.pictures and seed == a.seeds[0]:
                Path(a.pictures).mkdir(parents=True, exist_ok=True)
                picture(pics, Path(a.pictures)/f'quality_{model}.png', a.n_pictures)
    Path(a.out).write_text(json.dumps(dict(args=vars(a), machine=dict(threads=torch.get_num_threads(), torch=torch.__version__),
                                           rows=rows), indent=1))
    print(f"\n{len(a.seeds)} seed(s), {a.epochs}+{a.epochs_decay} epochs, {a.size}px, {a.n_train} training images, ngf {a.ngf}, "
          f"bs {a.bs}, lr {a.lr}, {a.gan_mode}{', bf16' if a.bf16 else ''}, {a.threads} thread(s)")
    for model in a.models: print('\n' + summarize(rows, model, a.variants))

if __name__ == '__main__': main()
