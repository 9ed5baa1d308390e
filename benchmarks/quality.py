"""Image quality of the paper recipe, each stabilizer alone, a few combinations and the modern recipe, on the built-in
samples, measured by `sweep` (`gan_callbacks.cli.sweeps`).

For each model (pix2pix on `sample_pairs`, CycleGAN and CUT on `sample_unpaired`, pix2pixHD on `sample_labels`) it
builds the sample at `--size` once, then sweeps the chosen variants, a list of configurations of `train`'s options,
each trained on every seed: `--out/<model>/` holds the study (`sweep.db`), each trial's runs, `sweep.md` (mean and
standard deviation over the seeds per metric, the best marked, and whether it beats the runner-up beyond the seeds'
spread), `scores.png`, Optuna's plots and `best_run.yaml`. The scores are the validation columns of the last epoch,
of the weights a run keeps (the moving average where there is one): pix2pix L1, PSNR, SSIM of G(A) against B;
pix2pixHD L1; CycleGAN and CUT L1 of G(testA) against the sample's true B images; and for every model SWD between the
validation targets and the outputs. A stopped run goes on where it was when given the same command again.

`--speed ROUNDS` instead times one epoch per variant in interleaved rounds: the median seconds per iteration and the
ratio to the first variant. The defaults are the Makefile demos' sizes, far too long for a small CPU: see
benchmarks/README.md for what was run.
"""
from __future__ import annotations
import argparse, inspect, statistics, sys, time, warnings
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
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.data.label_maps import LabelDataLoaders, sample_labels
from gan_callbacks.nets.hd_networks import GlobalGenerator
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from gan_callbacks.cli.sweeps import sweep
from gan_callbacks.cli.runs import train_runs

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

def cut_run(a, data, recipe, opts):
    dls = UnpairedDataLoaders.from_folder(data, load_size=a.load_size, crop_size=a.size, bs=a.bs, num_downs=2, num_workers=0)
    return cut_learner(dls, recipe=recipe, ngf=a.ngf, n_blocks=a.n_blocks, trainer_kwargs=opts)

runs['cut'] = cut_run

_option = dict(r1_gamma='r1', r2_gamma='r2', num_D='num_d')   # the trainers' names of the options, as `train` names them

def configuration(variant):
    "`VARIANTS[variant]` as `train`'s options: one configuration of the sweep"
    recipe, opts = VARIANTS[variant]
    return {'recipe': recipe, **{_option.get(k, k): v for k, v in opts.items()}}

def train_options(a, model):
    "The options every configuration of `model` trains with: the sizes, schedule and precision of the command line"
    o = dict(model=model, epochs=a.epochs, epochs_decay=a.epochs_decay, crop_size=a.size, load_size=a.load_size, ngf=a.ngf, bs=a.bs,
             lr=a.lr, gan_mode=a.gan_mode, precision='bf16' if a.bf16 else 'fp32', swd=True, n_samples=4)
    more = dict(pix2pix=dict(test_mode='eval'), cyclegan=dict(n_blocks=a.n_blocks, lambda_idt=0.), cut=dict(n_blocks=a.n_blocks),
                pix2pixhd=dict(label_nc=LABEL_NC, n_blocks=a.n_blocks, n_downsampling=3, vgg='off', load_size=a.size))
    return {**o, **more[model]}

metrics = dict(pix2pix='psnr', cyclegan='l1', cut='l1', pix2pixhd='l1')   # each model's sweep metric, unless --metric

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', nargs='+', default=list(runs), choices=tuple(runs))
    p.add_argument('--variants', nargs='+', default=list(VARIANTS), choices=tuple(VARIANTS))
    p.add_argument('--seeds', type=int, default=3, help='seeds 0..N-1 for each variant')
    p.add_argument('--metric', choices=('l1', 'psnr', 'ssim', 'swd'), help='what the sweep ranks by (default: psnr for pix2pix, else l1)')
    p.add_argument('--epochs', type=int, default=8); p.add_argument('--epochs-decay', type=int, default=7)
    p.add_argument('--size', type=int, default=64, help='crop size'); p.add_argument('--load-size', type=int, default=None)
    p.add_argument('--n-train', type=int, default=400); p.add_argument('--n-valid', type=int, default=40)
    p.add_argument('--ngf', type=int, default=32); p.add_argument('--n-blocks', type=int, default=3)
    p.add_argument('--bs', type=int, default=4); p.add_argument('--lr', type=float, default=2e-4)
    p.add_argument('--gan-mode', default='lsgan'); p.add_argument('--bf16', action='store_true')
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--data-dir', default='quality_data', help='where the samples are built (once)')
    p.add_argument('--out', default='quality_out', help="each model's sweep: OUT/<model>/ (sweep.md, scores.png, ...)")
    p.add_argument('--speed', type=int, metavar='ROUNDS', help='only time one epoch per variant, ROUNDS interleaved rounds: '
                   'median seconds per iteration and the ratio to the first variant')
    a = p.parse_args()
    a.load_size = a.load_size or a.size * 9 // 8
    torch.set_num_threads(a.threads)
    d = Path(a.data_dir)
    unpaired = lambda: sample_unpaired(d/f'unpaired_{a.size}_{a.n_train}', n_train=a.n_train, n_test=a.n_valid, size=a.load_size)
    samples = {'pix2pix': lambda: sample_pairs(d/f'pairs_{a.size}_{a.n_train}', n_train=a.n_train, n_valid=a.n_valid, size=a.load_size),
               'cyclegan': unpaired, 'cut': unpaired,
               'pix2pixhd': lambda: sample_labels(d/f'labels_{a.size}_{a.n_train}', n_train=a.n_train, n_valid=a.n_valid, size=a.size,
                                                  label_nc=LABEL_NC)}
    data = {m: samples[m]() for m in a.models}   # built once, kept in --data-dir
    if a.speed:
        for model in a.models:
            res = speed(a, model, data[model], a.variants, a.speed)
            print(f"\n{model}, {a.size}px, bs {a.bs}, ngf {a.ngf}: seconds per training iteration (median), ratio to {a.variants[0]}")
            for v, (t, ratio) in res.items(): print(f"  {v:<14} {t*1e3:8.1f} ms  {ratio:.2f}x")
        return
    for model in a.models:
        print(f"\n{model}: {', '.join(a.variants)} on seeds 0..{a.seeds - 1}, {a.epochs}+{a.epochs_decay} epochs, {a.size}px, "
              f"{a.n_train} training images, ngf {a.ngf}, bs {a.bs}, lr {a.lr}, {a.gan_mode}{', bf16' if a.bf16 else ''}, {a.threads} thread(s)", flush=True)
        takes = set(inspect.signature(train_runs[model]).parameters) | {'recipe', 'ema', 'diffaugment', 'r1', 'r2', 'spectral_norm'}
        grid = [configuration(v) for v in a.variants if set(configuration(v)) <= takes]   # CUT takes no multi-scale D
        if skipped := [v for v in a.variants if not set(configuration(v)) <= takes]: print(f"{model} cannot take: {', '.join(skipped)}")
        sweep(data=data[model], out=Path(a.out)/model, grid=grid, seeds=a.seeds, metric=a.metric or metrics[model],
              pruner='none', command=' '.join(['python benchmarks/quality.py', *sys.argv[1:]]), **train_options(a, model))

if __name__ == '__main__': main()
