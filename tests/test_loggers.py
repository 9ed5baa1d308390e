"Watching a run: TensorBoard event files and W&B offline runs written by the loggers, keep-best, early stop and the CLI options."
import contextlib, csv, glob, io, json, os, struct, sys, time
import pytest, torch
from fastai.basics import Learner
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from gan_callbacks.callback.loggers import TensorBoardGAN, WandbGAN
from gan_callbacks.cli.parser import main
from helpers import wandb_rows, pix2pix_on, tiny_cyclegan, HostReads, batches, paired_dls as make_dls, pix2pix_nets as nets, run_cli
from gan_callbacks.gans.pix2pix import pix2pix_learner

quiet = lambda: contextlib.redirect_stdout(io.StringIO())

def events(d):
    ea = EventAccumulator(str(d), size_guidance={'scalars': 0, 'images': 0}); ea.Reload()
    return ea

def test_tensorboard_pix2pix_and_cyclegan(pairs, unpaired, tmp_path):
    learn = pix2pix_on(pairs)
    with quiet(): learn.fit(2, 1e-3, cbs=TensorBoardGAN(tmp_path/'p', n_images=2, every=3))
    ea, n = events(tmp_path/'p'), 2 * len(learn.dls.train)
    for c in learn.pix2pix_trainer.cols + ('lr', 'lr_d', 'loss'):
        tag = c if c.startswith('lr') else f'train/{c}'
        assert [e.step for e in ea.Scalars(tag)] == list(range(1, n + 1)), tag   # one point per iteration
    hist = torch.stack(learn.pix2pix_trainer.hist).tolist()
    assert [e.value for e in ea.Scalars('train/g_l1')] == pytest.approx([h[1] for h in hist], rel=1e-6)
    assert len(ea.Scalars('valid/valid_loss')) == 2 and len(ea.Images('samples')) == 2
    im = ea.Images('samples')[-1]
    assert (im.width, im.height) == (3 * 34 + 2, 2 * 34 + 2)   # input | output | target, two rows of 32 px
    learn = tiny_cyclegan(unpaired)
    with quiet(): learn.fit(2, 1e-3, cbs=TensorBoardGAN(tmp_path/'c', n_images=2))
    ea = events(tmp_path/'c')
    assert {f'train/{c}' for c in learn.cycle_gan_trainer.cols} <= set(ea.Tags()['scalars'])
    assert len(ea.Scalars('train/cycle_a')) == 2 * len(learn.dls.train)
    assert len(ea.Images('samples/AtoB')) == len(ea.Images('samples/BtoA')) == 2

def test_loggers_read_the_device_once_per_block(tmp_path):
    def reads(n):
        learn = pix2pix_learner(make_dls(batches(n=n)), *nets())
        with HostReads() as h, quiet(): learn.fit(1, 1e-3, cbs=TensorBoardGAN(tmp_path/str(n), n_images=1, every=50))
        return h.n
    r8, r4 = reads(8), reads(4)
    assert r8['library'] == r4['library'] and r8['other'] == r4['other']   # as without the logger: nothing per batch

def test_wandb_offline_run(unpaired, tmp_path, monkeypatch):
    import wandb
    from fastai.callback.wandb import WandbCallback
    monkeypatch.setenv('WANDB_MODE', 'offline'); monkeypatch.setenv('WANDB_SILENT', 'true')
    learn = tiny_cyclegan(unpaired)
    run = wandb.init(project='gan_callbacks_test', dir=str(tmp_path))
    try:
        with quiet(): learn.fit(2, 1e-3, cbs=WandbGAN(n_images=2))
    finally: wandb.finish()
    rows = wandb_rows(run.dir.rsplit('/files', 1)[0] if run.dir.endswith('files') else run.dir)
    n = 2 * len(learn.dls.train)
    assert [r['_step'] for r in rows if 'train/cycle_a' in r] == list(range(1, n + 1))
    assert all(f'train/{c}' in rows[0] for c in learn.cycle_gan_trainer.cols)
    assert sum('samples/AtoB/path' in r for r in rows) == 2 and sum('valid/valid_loss' in r for r in rows) == 2
    # fastai's own WandbCallback runs beside the trainer too
    run = wandb.init(project='gan_callbacks_test', dir=str(tmp_path))
    try:
        with quiet(): learn.fit(1, 1e-3, cbs=WandbCallback(log_preds=False))
    finally: wandb.finish()


# --- the command line

def test_cli_help_version_and_description(capsys):
    assert run_cli(['--version']) == 0
    from gan_callbacks import __version__
    assert __version__ in capsys.readouterr().out
    assert run_cli(['train', '--help']) == 0
    out = capsys.readouterr().out
    assert 'pix2pix' in out.split('options')[0].lower() and 'cyclegan' in out.split('options')[0].lower()
    opts = [l for l in out.splitlines() if l.strip().startswith('--')]
    import re
    blocks = re.split(r'\n  (?=-)', out.split('options:', 1)[1])
    missing = [b.split()[0] for b in blocks if b.strip().startswith('--') and 'default' not in b and '--help' not in b and 'required' not in b]
    assert not missing, missing

def test_cli_tensorboard_keep_best_and_early_stop(pairs, tmp_path):
    out = tmp_path/'run'
    args = ['train', '--data', pairs, '--out', out, '--epochs', 3, '--epochs-decay', 0, '--bs', 2, '--load-size', 32, '--crop-size', 32,
            '--ngf', 4, '--lr', 1e-3, '--n-samples', 1, '--seed', 0, '--tensorboard', tmp_path/'tb', '--keep-best', 'psnr',
            '--val-every', 1, '--early-stop', 5]
    with quiet(): assert run_cli(args) == 0
    rows = list(csv.DictReader(open(out/'history.csv')))
    psnrs = [float(r['psnr']) for r in rows]
    s = json.loads((out/'summary.json').read_text())
    assert s['best']['metric'] == 'psnr' and s['best']['epoch'] == psnrs.index(max(psnrs)) and s['best']['score'] == pytest.approx(max(psnrs), rel=1e-5)
    assert (out/'best_generator.pkl').is_file() and (out/'generator.pkl').is_file()
    ea = events(tmp_path/'tb')
    assert len(ea.Scalars('train/g_l1')) == 3 * 2 and len(ea.Images('samples')) == 3

def test_validate_every_early_stop_and_keep_best(pairs, tmp_path):
    from gan_callbacks.callback.loggers import ValidateEvery, EarlyStop, KeepBest
    learn = pix2pix_on(pairs); learn.path = tmp_path
    keep = KeepBest('valid_loss')
    with quiet(): learn.fit(8, 1e-3, cbs=[ValidateEvery(2), EarlyStop('valid_loss', min_delta=10, patience=2), keep])
    vals = learn.recorder.values
    # validated after epochs 2, 4 and 6 (counting from 1); the first sets the best, two more without improvement stop the fit
    assert len(vals) == 6 and [v[1] is not None for v in vals] == [False, True] * 3
    names = list(learn.recorder.metric_names[1:])
    assert all(v[names.index('g_l1')] is not None for v in vals)   # the trainer's columns in every row
    valid = {i: v[1] for i, v in enumerate(vals) if v[1] is not None}
    assert keep.best == min(valid.values()) and valid[keep.best_epoch] == keep.best
    assert keep.export_best('best.pkl') == 'best.pkl' and (tmp_path/'best.pkl').is_file()

def test_cli_val_every_and_early_stop(pairs, tmp_path):
    out = tmp_path/'run'
    args = ['train', '--data', pairs, '--out', out, '--epochs', 4, '--epochs-decay', 0, '--bs', 2, '--load-size', 32, '--crop-size', 32,
            '--ngf', 4, '--lr', 1e-3, '--n-samples', 1, '--seed', 0, '--val-every', 2, '--keep-best', 'l1', '--early-stop', 1]
    with quiet(): assert run_cli(args) == 0
    rows = list(csv.DictReader(open(out/'history.csv')))
    assert [r['valid_loss'] != 'None' for r in rows] == [False, True, False, True][:len(rows)] and len(rows) in (2, 4)
    best = json.loads((out/'summary.json').read_text())['best']
    l1s = [float(r['valid_loss']) for r in rows if r['valid_loss'] != 'None']
    assert best['metric'] == 'l1' and best['score'] == pytest.approx(min(l1s), rel=1e-5)


@pytest.mark.parametrize('stopper', ['EarlyStop', 'EarlyStoppingCallback'])
def test_the_stopping_epoch_has_its_sample_grid(pairs, tmp_path, stopper):
    "An early stop ends the fit in `after_epoch`: the grid of the epoch it stops in is written first"
    from fastai.callback.tracker import EarlyStoppingCallback
    from gan_callbacks.callback.loggers import EarlyStop
    from gan_callbacks.callback.grids import SampleGrid
    learn = pix2pix_on(pairs); learn.path = tmp_path
    stop = dict(EarlyStop=EarlyStop, EarlyStoppingCallback=EarlyStoppingCallback)[stopper]('valid_loss', min_delta=10, patience=1)
    with quiet(): learn.fit(5, 1e-3, cbs=[SampleGrid(tmp_path, n=1), stop])
    assert len(learn.recorder.values) == 2   # the first sets the best, the second does not improve by 10: stopped
    assert sorted(f.name for f in tmp_path.glob('samples_epoch*.png')) == ['samples_epoch000.png', 'samples_epoch001.png']

def test_cli_best_epoch_one_numbering(pairs, tmp_path, capsys):
    "`--keep-best`: the printed epoch is summary.json's and history.csv's, counted from 0, with its grid's name"
    out = tmp_path/'run'
    args = ['train', '--data', pairs, '--out', out, '--epochs', 2, '--epochs-decay', 0, '--bs', 2, '--load-size', 32, '--crop-size', 32,
            '--ngf', 4, '--lr', 1e-3, '--n-samples', 1, '--seed', 0, '--keep-best', 'l1']
    assert run_cli(args) == 0
    best = json.loads((out/'summary.json').read_text())['best']
    rows = list(csv.DictReader(open(out/'history.csv')))
    e = best['epoch']
    assert float(rows[e]['valid_loss']) == pytest.approx(best['score'], rel=1e-5) and int(rows[e]['epoch']) == e
    line = next(l for l in capsys.readouterr().out.splitlines() if 'best_generator.pkl' in l)
    assert f"the generator of epoch {e} " in line and f"samples_epoch{e:03d}.png" in line and (out/f"samples_epoch{e:03d}.png").is_file()

def test_all_brings_the_loggers_and_the_readme_snippet_runs(pairs, tmp_path):
    "`from gan_callbacks.all import *` has the loggers, their optional packages imported only when used; the README's snippet runs"
    import subprocess
    code = ("import sys; ns = {}; exec('from gan_callbacks.all import *', ns)\n"
            "names = ('TensorBoardGAN', 'WandbGAN', 'ValidateEvery', 'KeepBest', 'EarlyStop', 'to_multiple', 'make_app')\n"
            "assert all(n in ns for n in names), [n for n in names if n not in ns]\n"
            "assert callable(ns['generator_of']) and callable(ns['app'])   # the functions, not modules\n"
            "assert not {'wandb', 'gradio', 'torch.utils.tensorboard'} & set(sys.modules), sorted(sys.modules)")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    ns = {}
    exec('from gan_callbacks.all import *', ns)
    learn = pix2pix_on(pairs); learn.path = tmp_path
    best = ns['KeepBest']('valid_loss')
    with contextlib.redirect_stdout(io.StringIO()):
        learn.fit_gan(2, 1, cbs=[ns['TensorBoardGAN'](tmp_path/'runs'), ns['ValidateEvery'](2), best, ns['EarlyStop']('valid_loss', patience=4)])
    assert best.best_epoch in (1, 2) and best.export_best('best.pkl') == 'best.pkl' and (tmp_path/'best.pkl').is_file()
    assert any(f.name.startswith('events') for f in (tmp_path/'runs').rglob('*'))

def test_keep_best_writes_the_best_epoch_as_a_model_folder(pairs, tmp_path):
    "`--keep-best`: `best/` is a model folder of the best epoch's generator beside `generator/`, the last; summary.json says which epoch each holds"
    from gan_callbacks.deploy.interop import load_generator
    out = tmp_path/'run'
    args = ['train', '--data', pairs, '--out', out, '--epochs', 3, '--epochs-decay', 0, '--bs', 2, '--load-size', 32, '--crop-size', 32,
            '--ngf', 4, '--lr', 1e-3, '--n-samples', 1, '--seed', 0, '--keep-best', 'l1']
    assert run_cli(args) == 0
    s = json.loads((out/'summary.json').read_text())
    assert s['last_epoch'] == 2 and s['best']['folder'] == 'best' and 0 <= s['best']['epoch'] <= 2
    cfg = json.loads((out/'best'/'config.json').read_text())
    assert cfg['scores']['epoch'] == s['best']['epoch'] and cfg['training']['model'] == 'pix2pix'
    best, pkl = load_generator(out/'best'), load_generator(out/'best_generator.pkl', trust_pickle=True)
    assert all(torch.equal(a, b) for a, b in zip(best.state_dict().values(), pkl.state_dict().values()))
    last = load_generator(out/'generator')
    same = all(torch.equal(a, b) for a, b in zip(best.state_dict().values(), last.state_dict().values()))
    assert same == (s['best']['epoch'] == 2)   # the best folder is the last only when the last epoch was the best
    assert run_cli(['translate', '--model', out/'best', '--input', pairs/'val', '--output', tmp_path/'t', '--aligned']) == 0
