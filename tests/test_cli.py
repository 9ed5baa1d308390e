"The `gan_callbacks` command end to end on a tiny sample, and its errors."
import json, subprocess, sys, csv, shutil
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from fastai.learner import load_learner
from gan_callbacks.cli.parser import main
from gan_callbacks.callback.grids import image_grid
from gan_callbacks.deploy.inference import translate_image
from gan_callbacks.data.samples import sample_pairs, sample_unpaired
from helpers import run_cli as run, train_options, TINY



@pytest.fixture(scope='module')
def trained(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp('run')
    code = run(['train', '--data', tiny, '--out', out, '--epochs', 1, '--epochs-decay', 1, '--bs', 4,
                '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--lr', 1e-3, '--n-samples', 2])
    assert code == 0
    return out


def test_train_writes_everything(trained):
    names = sorted(f.name for f in trained.iterdir())
    assert names == ['checkpoints', 'generator', 'generator.pkl', 'history.csv', 'losses.png', 'run.yaml', 'samples_epoch000.png', 'samples_epoch001.png', 'summary.json']
    rows = list(csv.DictReader(open(trained/'history.csv')))
    assert len(rows) == 2 and {'train_loss', 'valid_loss', 'g_gan', 'g_l1', 'd_real', 'd_fake'} <= set(rows[0])
    s = json.loads((trained/'summary.json').read_text())
    assert s['final_valid_l1'] == pytest.approx(float(rows[-1]['valid_loss']), rel=1e-5)
    assert 0 < s['mean_image_l1'] < 2
    grid = Image.open(trained/'samples_epoch001.png')
    assert grid.size == (3*(128+4), 2*16 + 2*(128+4))   # 3 columns (input | output | target), 2 examples of 32px shown 4x, 2 lines of text
    assert Image.open(trained/'losses.png').size[0] > 300


def test_resume_continues_from_the_last_epoch(tiny, tmp_path, capsys):
    args = ['train', '--data', tiny, '--out', tmp_path, '--bs', 4, '--load-size', 36, '--crop-size', 32, '--ngf', 8,
            '--lr', 1e-3, '--n-samples', 1, '--epochs-decay', 0, '--seed', 0]
    assert run(args + ['--epochs', 2]) == 0
    g1 = (tmp_path/'samples_epoch001.png').read_bytes()
    assert run(args + ['--epochs', 3, '--resume']) == 0
    rows = list(csv.DictReader(open(tmp_path/'history.csv')))
    assert [r['epoch'] for r in rows] == ['0', '1', '2']
    assert (tmp_path/'samples_epoch001.png').read_bytes() == g1    # the finished epochs are not redone
    assert (tmp_path/'samples_epoch002.png').exists()
    assert json.loads((tmp_path/'summary.json').read_text())['epochs'] == 3


def test_exported_generator_predicts_without_D(trained, tiny):
    learn = load_learner(trained/'generator.pkl')
    assert learn.pix2pix_trainer.discriminator is None
    fn = sorted((tiny/'val').iterdir())[0]
    dec, raw, _ = learn.predict(fn)   # a file is translated whole, at its own size
    assert raw.shape == (3, 32, 64) and raw.min() >= -1 and raw.max() <= 1
    preds = learn.get_preds(dl=learn.dls.test_dl([fn], aligned=True))[0]   # its A half, asked for explicitly
    assert preds.shape == (1, 3, 32, 32) and preds.min() >= -1 and preds.max() <= 1
    im = translate_image(learn, fn, aligned=True)
    assert im.size == (32, 32)


def test_translate_folder(trained, tiny, tmp_path):
    out = tmp_path/'t'
    assert run(['translate', '--model', trained/'generator.pkl', '--trust-pickle', '--input', tiny/'val', '--output', out, '--aligned']) == 0
    assert sorted(f.name for f in out.iterdir()) == sorted(f.name for f in (tiny/'val').iterdir())
    # a single file, not aligned: same size as the input
    src = tmp_path/'in.png'; Image.new('RGB', (40, 24), (10, 200, 30)).save(src)
    assert run(['translate', '--model', trained/'generator.pkl', '--trust-pickle', '--input', src, '--output', out]) == 0
    assert Image.open(out/'in.png').size == (40, 24)


@pytest.mark.parametrize('argv,msg', [
    (['train', '--data', '/no/such/dir'], '--data /no/such/dir: no such directory'),
    (['train', '--sample', '--bs', '0'], '--bs must be at least 1'),
    (['train', '--sample', '--epochs', '0', '--epochs-decay', '0'], 'not both 0'),
    (['translate', '--model', '/no/such.pkl', '--input', '.', '--output', 'x'], '--model /no/such.pkl: no such file'),
])
def test_bad_arguments_exit_2(argv, msg, capsys):
    assert run(argv) == 2
    assert msg in capsys.readouterr().err


def test_out_is_a_file(tiny, tmp_path, capsys):
    f = tmp_path/'file'; f.write_text('x')
    assert run(['train', '--data', tiny, '--out', f, '--crop-size', 32, '--load-size', 36]) == 2
    assert 'is a file, expected a directory' in capsys.readouterr().err
    assert f.read_text() == 'x'


def test_bad_data_exit_2(tmp_path, capsys):
    (tmp_path/'train').mkdir()
    (tmp_path/'train'/'broken.png').write_bytes(b'not a png')
    assert run(['train', '--data', tmp_path, '--out', tmp_path/'o', '--crop-size', 32, '--load-size', 36]) == 2
    assert 'broken.png' in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_exit_code(tmp_path):
    exe = Path(sys.executable).parent/'gan_callbacks'   # the console script installed with the package
    r = subprocess.run([str(exe), 'translate', '--model', str(tmp_path/'none.pkl'), '--input', '.', '--output', str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and 'no such file' in r.stderr


def test_image_grid_shapes():
    g = image_grid([[torch.zeros(1, 8, 8), torch.ones(3, 8, 8), -torch.ones(3, 8, 8)]], pad=1)
    assert g.size == (30, 10) and g.mode == 'RGB'


def test_image_grid_labels_title_and_scale():
    import numpy as np
    from gan_callbacks.callback.grids import display_scale
    assert [display_scale(h) for h in (32, 64, 100, 128, 256)] == [4, 2, 1, 1, 1]
    t = torch.rand(3, 8, 8)*2-1
    g = np.asarray(image_grid([[t, -t, t]]*2, pad=1, labels=('input', 'output', 'target'), title='epoch 1', scale=4))
    assert g.shape == (2*16 + 2*34, 3*34, 3)
    text = g[:32] < 128                      # dark pixels: the title on the first line, a label over each column
    assert text[:16, :34].any() and not text[:16, 90:].any()
    assert all(text[16:32, j*34:(j+1)*34].any() for j in range(3))
    img = g[32+1:32+33, 1:33]                  # the first image, enlarged pixel for pixel
    small = np.asarray(image_grid([[t]], pad=0))
    assert (img == small.repeat(4, 0).repeat(4, 1)).all()


def test_sample_grid_title_has_the_epoch_and_its_valid_loss(trained):
    import numpy as np
    rows = list(csv.DictReader(open(trained/'history.csv')))
    from gan_callbacks.callback.grids import SampleGrid
    from types import SimpleNamespace
    g = SampleGrid()
    rec = SimpleNamespace(metric_names=['epoch', 'train_loss', 'valid_loss', 'time'], log=[1, 0.5, float(rows[1]['valid_loss']), '00:01'])
    g.learn = SimpleNamespace(recorder=rec, epoch=1, n_epoch=2)
    assert g.title() == f"after epoch 2 of 2 (valid loss {float(rows[1]['valid_loss']):.4f})"


def test_speed_options_reach_the_trainer(tiny, tmp_path):
    from gan_callbacks.cli.runs import train
    args = train_options(['train', '--sample', '--channels-last', '--compile'])
    assert args['channels_last'] is True and args['compile'] is True
    learn = train(data=tiny, out=tmp_path, epochs=1, epochs_decay=0, bs=4, load_size=36, crop_size=32, ngf=8, n_samples=1,
                  channels_last=True)
    t = learn.pix2pix_trainer
    assert t.channels_last and not t.compile
    conv = next(m for m in learn.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize('argv,msg', [
    (['--lr', 'nan'], '--lr must be a finite number, got nan'),
    (['--lr', 'inf'], '--lr must be a finite number, got inf'),
    (['--lr', '0'], '--lr must be positive, got 0.0'),
    (['--lr=-1e-3'], '--lr must be positive'),
    (['--lambda-l1', 'nan'], '--lambda-l1 must be a finite number'),
    (['--epochs', '-1'], '--epochs and --epochs-decay must be >= 0'),
    (['--ngf', '0'], '--ngf must be at least 1, got 0'),
    (['--n-samples', '0'], '--n-samples must be at least 1'),
    (['--crop-size', '48', '--load-size', '56'], '--crop-size must be a multiple of 32'),
    (['--crop-size', '64', '--load-size', '32'], '--load-size (32) must be at least --crop-size (64)'),
    (['--seed', '-1'], '--seed must be in'),
])
def test_bad_numbers_exit_2_before_anything_starts(argv, msg, tmp_path, capsys):
    out = tmp_path/'out'
    assert run(['train', '--sample', '--out', out] + argv) == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()


def test_translate_reads_a_checkpoint_and_names_a_file_it_cannot_use(trained, tmp_path, capsys):
    ck = next((trained/'checkpoints').glob('gan_epoch*.pth'))
    assert run(['translate', '--model', ck, '--input', trained/'samples_epoch000.png', '--output', tmp_path/'t']) == 0
    assert (tmp_path/'t'/'samples_epoch000.png').is_file()
    sd = tmp_path/'latest_net_G.pth'
    torch.save(torch.nn.Conv2d(3, 3, 1).state_dict(), sd)
    assert run(['translate', '--model', sd, '--input', trained/'samples_epoch000.png', '--output', tmp_path/'u']) == 2
    assert str(sd) in capsys.readouterr().err and not (tmp_path/'u').exists()


def test_ctrl_c_in_translate_exits_130(trained, tiny, tmp_path, capsys, monkeypatch):
    import gan_callbacks.deploy.inference as inference   # translate's path to each image: translate_file -> translate_image
    calls = []
    def translate_image(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2: raise KeyboardInterrupt
        return Image.new('RGB', (8, 8))
    monkeypatch.setattr(inference, 'translate_image', translate_image)
    assert run(['translate', '--model', trained/'generator.pkl', '--trust-pickle', '--input', tiny/'val', '--output', tmp_path/'t', '--aligned']) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"gan_callbacks translate: interrupted after 1 of 2 image(s), written to {tmp_path/'t'}/"]


def test_resume_command():
    from gan_callbacks.cli.commands import resume_command
    argv = ['train', '--data', 'my data', '--resume', 'old.pth', '--epochs', '3', '--resume', '--bs=2', '--resume=x']
    assert resume_command(argv, 'o/c/gan_interrupted.pth') == \
        "gan_callbacks train --data 'my data' --epochs 3 --bs=2 --resume o/c/gan_interrupted.pth"
    assert resume_command(['train', '--sample'], True) == 'gan_callbacks train --sample --resume'


@pytest.mark.slow
def test_ctrl_c_in_a_logged_run_saves_and_says_how_to_resume(tmp_path):
    "A run with stdout sent to a file: a line per epoch, no bars; SIGINT after the first epoch: one line, exit 130, a loadable checkpoint"
    import shlex, signal, time
    from gan_callbacks.callback.checkpoint import load_checkpoint
    from gan_callbacks.data.folders import Pix2pixDataLoaders
    from gan_callbacks.nets.networks import UnetGenerator
    from gan_callbacks.gans.pix2pix import pix2pix_learner
    tiny = sample_pairs(tmp_path/'sample', n_train=16, n_valid=2, size=32)   # epochs of 16 batches: time to land in one
    out, log = tmp_path/'run', tmp_path/'run.log'
    argv = ['train', '--data', str(tiny), '--out', str(out), '--epochs', '50', '--epochs-decay', '0', '--bs', '1',
            '--load-size', '36', '--crop-size', '32', '--ngf', '8', '--n-samples', '1']
    exe = Path(sys.executable).parent/'gan_callbacks'
    with open(log, 'w') as f:
        from helpers import default_signals
        p = subprocess.Popen([str(exe), *argv], stdout=f, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
        try:
            t0 = time.time()   # the first epoch done (its grid is written last)
            while not (out/'samples_epoch000.png').exists() and p.poll() is None and time.time() - t0 < 1500: time.sleep(0.1)
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None: p.kill()
    assert p.returncode == 130, err
    assert 'Traceback' not in err
    last = err.strip().splitlines()[-1]
    saved = Path(last.split('state saved to ')[1].split(';')[0])
    mid = last.startswith('gan_callbacks train: training interrupted in epoch ')   # else between two epochs: the finished one is kept
    if mid: assert saved == out/'checkpoints'/'gan_interrupted.pth'
    else: assert last.startswith('gan_callbacks train: training interrupted after epoch ') and saved.name.startswith('gan_epoch'), last
    cmd = shlex.split(last.split('resume with: ')[1])
    assert cmd == ['gan_callbacks', *argv, '--resume', str(saved)]
    assert train_options(cmd[1:])['resume'] == str(saved)
    text = log.read_text()
    assert '\r' not in text
    lines = text.splitlines()
    assert lines[0].startswith('Training on') and lines[1].startswith('precision auto: ')   # what --precision auto chose, and why
    assert lines[2].split()[:3] == ['epoch', 'train_loss', 'valid_loss']
    rows = lines[3:]
    assert len(rows) >= 1 and [r.split()[0] for r in rows] == [str(i) for i in range(len(rows))], text
    dls = Pix2pixDataLoaders.from_folder(tiny, load_size=36, crop_size=32, bs=1)
    learn = pix2pix_learner(dls, generator=UnetGenerator(num_downs=5, ngf=8), path=out, model_dir='checkpoints')
    ck = load_checkpoint(learn, saved)
    assert (ck['interrupted'] is not None) == mid and ck['epoch'] == len(rows) - 1

# ---------------------------------------------------------------- CycleGAN


@pytest.fixture(scope='module')
def tiny_unpaired(tmp_path_factory):
    return sample_unpaired(tmp_path_factory.mktemp('home')/'unpaired', n_train=8, n_test=2, size=32)

CYCLEGAN_TINY = ['--epochs', 1, '--epochs-decay', 1, '--bs', 2, '--load-size', 36, '--crop-size', 32, '--ngf', 4,
                 '--n-blocks', 1, '--n-samples', 2, '--pool-size', 4, '--lr', 1e-3]

@pytest.fixture(scope='module')
def trained_cyclegan(tiny_unpaired, tmp_path_factory):
    out = tmp_path_factory.mktemp('cyclegan')
    assert run(['train', '--model', 'cyclegan', '--data', tiny_unpaired, '--out', out, *CYCLEGAN_TINY]) == 0
    return out

def test_cyclegan_train_writes_everything(trained_cyclegan, tiny_unpaired):
    names = sorted(f.name for f in trained_cyclegan.iterdir())
    assert names == ['checkpoints', 'generator', 'generator.pkl', 'history.csv', 'run.yaml', 'samples_epoch000.png', 'samples_epoch001.png', 'summary.json']
    rows = list(csv.DictReader(open(trained_cyclegan/'history.csv')))
    assert len(rows) == 2 and {'true_l1', 'g_a', 'g_b', 'cycle_a', 'cycle_b', 'idt_a', 'idt_b', 'd_a', 'd_b'} <= set(rows[0])
    s = json.loads((trained_cyclegan/'summary.json').read_text())
    assert s['true_l1'] == pytest.approx([float(r['true_l1']) for r in rows], rel=1e-5)
    assert (s['first_true_l1'], s['final_true_l1']) == (s['true_l1'][0], s['true_l1'][-1]) and s['epochs'] == 2
    # the baselines, computed here from the files: A unchanged, and the mean training B against the true B
    load = lambda f: np.asarray(Image.open(f).convert('RGB').resize((32, 32), Image.Resampling.BICUBIC), dtype=np.float64) / 127.5 - 1
    a = np.stack([load(f) for f in sorted((tiny_unpaired/'testA').iterdir())])
    t = np.stack([load(tiny_unpaired/'testA_true'/f.name) for f in sorted((tiny_unpaired/'testA').iterdir())])
    assert s['identity_l1'] == pytest.approx(np.abs(a - t).mean(), rel=1e-4)
    assert 0.1 < s['mean_b_l1'] < 1 and 0 < s['final_true_l1'] < 2
    mse = ((a - t)**2).reshape(len(a), -1).mean(1)   # PSNR per image (data range 2), then averaged
    assert s['identity_psnr'] == pytest.approx(np.mean(10*np.log10(4/mse)), rel=1e-4)
    assert all(-1 <= s[f'{k}_ssim'] <= 1 and s[f'{k}_psnr'] > 0 for k in ('final_true', 'mean_b', 'identity'))
    grid = Image.open(trained_cyclegan/'samples_epoch001.png')
    k, top, cell = 4, 32, 32*4 + 4   # 32 px shown 4x (pixel for pixel), under a title line and a line of labels
    assert grid.size == (3*cell, top + 2*cell)   # A | G_A(A) | true B, 2 examples
    true_b = np.asarray(grid)[top+cell+2:top+cell+2+128:k, 2*cell+2:2*cell+2+128:k]   # second row, third column: the true B of testA 0001
    assert np.abs(true_b.astype(int) - np.asarray(Image.open(tiny_unpaired/'testA_true'/'0001.png').resize((32, 32)))).max() <= 1

def test_cyclegan_translate_both_directions(trained_cyclegan, tiny_unpaired, tmp_path):
    for d, src in (('AtoB', 'testA'), ('BtoA', 'testB')):
        assert run(['translate', '--model', trained_cyclegan/'generator.pkl', '--trust-pickle', '--input', tiny_unpaired/src,
                    '--output', tmp_path/d, '--direction', d]) == 0
        assert sorted(f.name for f in (tmp_path/d).iterdir()) == sorted(f.name for f in (tiny_unpaired/src).iterdir())
    src = tiny_unpaired/'testA'/'0000.png'
    assert run(['translate', '--model', trained_cyclegan/'generator.pkl', '--trust-pickle', '--input', src, '--output', tmp_path/'ba', '--direction', 'BtoA']) == 0
    assert not np.array_equal(np.asarray(Image.open(tmp_path/'ba'/'0000.png')), np.asarray(Image.open(tmp_path/'AtoB'/'0000.png')))
    learn = load_learner(trained_cyclegan/'generator.pkl')
    assert translate_image(learn, src, direction='BtoA').size == (32, 32)

def test_cyclegan_without_truth_and_resume(tiny_unpaired, tmp_path):
    data = tmp_path/'data'
    for f in ('trainA', 'trainB', 'testA', 'testB'): shutil.copytree(tiny_unpaired/f, data/f)
    args = ['train', '--model', 'cyclegan', '--data', data, '--out', tmp_path/'o', *CYCLEGAN_TINY[2:], '--epochs-decay', 0, '--seed', 0]
    assert run(args + ['--epochs', 1]) == 0
    s = json.loads((tmp_path/'o'/'summary.json').read_text())
    assert 'true_l1' not in s and s['epochs'] == 1
    assert run(args + ['--epochs', 2, '--resume']) == 0
    rows = list(csv.DictReader(open(tmp_path/'o'/'history.csv')))
    assert [r['epoch'] for r in rows] == ['0', '1'] and 'true_l1' not in rows[0]

def test_cyclegan_bad_input(tiny_unpaired, tmp_path, capsys):
    data = tmp_path/'data'
    for f in ('trainA', 'testA', 'testB'): shutil.copytree(tiny_unpaired/f, data/f)
    base = ['train', '--model', 'cyclegan', '--data', data, '--out', tmp_path/'o', *CYCLEGAN_TINY]
    assert run(base) == 2
    assert f"Folder not found: {data/'trainB'}" in capsys.readouterr().err
    (data/'trainB').mkdir()
    assert run(base) == 2
    assert f"No image files in {data/'trainB'}" in capsys.readouterr().err
    shutil.copytree(tiny_unpaired/'trainB', data/'trainB', dirs_exist_ok=True)
    shutil.copytree(tiny_unpaired/'testA_true', data/'testA_true')
    (data/'testA_true'/'0001.png').unlink()
    assert run(base) == 2
    assert 'has no true B image for 0001.png' in capsys.readouterr().err
    assert not (tmp_path/'o'/'checkpoints').exists()      # nothing trained

@pytest.mark.parametrize('argv,msg', [
    (['train', '--sample', '--lambda-a', '5'], '--lambda-a is an option of --model cyclegan'),
    (['train', '--sample', '--model', 'cyclegan', '--lambda-l1', '5'], '--lambda-l1 is an option of --model pix2pix'),
    (['train', '--sample', '--model', 'cyclegan', '--direction', 'BtoA'], '--direction is an option of --model pix2pix'),
    (['train', '--sample', '--model', 'cyclegan', '--n-blocks', '-1'], '--n-blocks must be from 0 to 64, got -1'),
    (['train', '--model', 'cyclegan', '--data', '/no/such/dir'], '--data /no/such/dir: no such directory'),
])
def test_cyclegan_bad_arguments_exit_2(argv, msg, capsys):
    assert run(argv) == 2
    assert msg in capsys.readouterr().err

def test_pix2pix_generator_has_no_BtoA(trained, tiny, tmp_path, capsys):
    assert run(['translate', '--model', trained/'generator.pkl', '--trust-pickle', '--input', tiny/'val', '--output', tmp_path, '--direction', 'BtoA']) == 2
    assert 'translates A -> B only' in capsys.readouterr().err


def test_each_models_defaults_are_read_from_its_trainer(capsys):
    "Each model's defaults are stated once, in its trainer's signature: the runs, the options' help and the GAN modes read them"
    from gan_callbacks.cli.runs import Pix2pixRun, CycleGANRun, CUTRun, Pix2pixHDRun, train_runs, defaults_of
    from gan_callbacks.gans.pix2pixhd import Pix2pixHDTrainer
    from gan_callbacks.gans.pix2pix import Pix2pixTrainer
    from gan_callbacks.gans.cyclegan import CycleGANTrainer
    from gan_callbacks.gans.cut import CUTTrainer, cut_modes
    from gan_callbacks.nets.losses import gan_modes
    from gan_callbacks.deploy.inference import reference_test_mode
    for r, t in ((Pix2pixRun, Pix2pixTrainer), (CycleGANRun, CycleGANTrainer), (CUTRun, CUTTrainer), (Pix2pixHDRun, Pix2pixHDTrainer)):
        rd, td = defaults_of(r), defaults_of(t)
        assert {k: rd[k] for k in rd if k in td and k != 'test_mode'} == {k: td[k] for k in rd if k in td and k != 'test_mode'}
    assert defaults_of(Pix2pixRun).test_mode == reference_test_mode   # pix2pix runs test as the paper
    with pytest.raises(SystemExit): main(['train', '--help'])
    h = ' '.join(capsys.readouterr().out.split())
    assert f"{{{','.join(gan_modes)}}}" in h
    assert f"default {defaults_of(Pix2pixTrainer).gan_mode} (pix2pix), {defaults_of(CycleGANTrainer).gan_mode} (cyclegan, cut, fastcut, pix2pixhd)" in h
    assert f"weight of the L1 term (default {defaults_of(Pix2pixTrainer).lambda_l1:g})" in h
    assert f"(default {cut_modes['cut']['lambda_nce']:g} for cut, {cut_modes['fastcut']['lambda_nce']:g} for fastcut)" in h
    assert "epochs at the initial lr (default: the reference's, {} (pix2pix, cyclegan, pix2pixhd), {} (cut), {} (fastcut))".format(
        *(train_runs[m].schedule[0] for m in ('pix2pix', 'cut', 'fastcut'))) in h

def test_cut_summary_names_its_one_generator():
    "CycleGAN's and CUT's runs share one summary, each naming its own generator and directions"
    from types import SimpleNamespace
    from gan_callbacks.cli.runs import CycleGANRun, CUTRun
    grid = SimpleNamespace(files=[Path('samples_epoch000.png')])
    learn = SimpleNamespace(recorder=SimpleNamespace(values=[[1.]]))
    for r, g, d in ((CycleGANRun(), 'G_A', True), (CUTRun(), 'G', False)):
        r.truth = None
        s, lines = r.summary(learn, 'data', Path('out'), grid)
        assert f'A | {g}(A) |' in lines[-1] and ('--direction AtoB|BtoA' in lines[-1]) == d

def test_one_direction_generators_name_themselves_for_BtoA(tmp_path, capsys):
    "`--direction BtoA` with a CUT generator: refused, naming what the file holds, not calling it pix2pix"
    from gan_callbacks.nets.networks import ResnetGenerator
    from gan_callbacks.deploy.model_folder import write_model_folder
    G = ResnetGenerator(3, 3, ngf=4, n_blocks=1, antialias=True, antialias_up=True)
    write_model_folder(G, tmp_path/'cut', dict(size=32, test_mode='eval'))
    Image.new('RGB', (16, 16)).save(tmp_path/'x.png')
    assert run(['translate', '--model', tmp_path/'cut', '--input', tmp_path/'x.png', '--output', tmp_path/'o', '--direction', 'BtoA']) == 2
    err = capsys.readouterr().err
    assert 'translates A -> B only' in err and 'ResnetGenerator' in err and 'pix2pix' not in err and len(err.splitlines()) == 1

def test_train_help_names_every_model(capsys):
    from gan_callbacks.cli.runs import train_runs
    with pytest.raises(SystemExit): main(['train', '--help'])
    out = capsys.readouterr().out
    description = out.split('\n\n')[1]   # after the usage, before the options
    assert all(m in description for m in train_runs), description

@pytest.mark.slow
def test_commands_print_no_third_party_notices(trained, tiny, tmp_path):
    "Every warning shown (`python -W default`): `translate` of a pickle it was told to trust prints its own line only, no fastai, pandas or torch notice"
    r = subprocess.run([sys.executable, '-W', 'default', '-m', 'gan_callbacks', 'translate', '--model', str(trained/'generator.pkl'),
                        '--trust-pickle', '--input', str(tiny/'val'), '--aligned', '--output', str(tmp_path/'t')], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == '' and r.stdout.startswith('Translated 2 image(s)'), r.stderr


# --- a command line that answers at once; the precision it trains in

def _fresh(code):
    "Python `code` run in a fresh process: its exit code, stdout and stderr"
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)

@pytest.mark.parametrize('argv', [['--version'], ['--help'], ['train', '--help'], ['translate', '--help'], ['export', '--help'],
                                  ['app', '--help'], ['evaluate', '--help'], ['env', '--help'], ['train', '--bs', 'x']])
def test_help_version_and_parse_errors_import_neither_torch_nor_fastai(argv):
    "Parsed first: what needs no work answers without importing torch or fastai (seconds each), from the library's stated defaults"
    r = _fresh(f"import sys\nfrom gan_callbacks.cli.parser import main\ntry: main({argv!r})\nexcept SystemExit as e: print('exit', e.code)\n"
               "print(sorted(m for m in ('torch', 'fastai', 'numpy') if m in sys.modules))")
    assert r.stdout.rstrip().endswith('[]'), r.stdout + r.stderr
    assert ('exit 2' if 'x' in argv else 'exit 0') in r.stdout

def test_version_starts_at_once():
    "Generous bound (the figure is in the README): `gan_callbacks --version` as a user runs it, median of 3"
    import time
    times = []
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run([Path(sys.executable).parent/'gan_callbacks', '--version'], capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        assert r.returncode == 0 and r.stdout.startswith('gan_callbacks ')
    assert sorted(times)[1] < 10, times

def test_cli_facts_are_what_the_library_states():
    "The parser's copy of the defaults (cli_facts.json) is current; a stale one fails here and in `make check-export`"
    from gan_callbacks.cli.parser import read_cli_facts, cli_facts_file
    from gan_callbacks.cli.commands import cli_facts, write_cli_facts
    assert read_cli_facts() == cli_facts() and write_cli_facts(cli_facts_file, check=True)

def test_cli_states_the_librarys_defaults(capsys, monkeypatch):
    "A default changed in the library reaches the help through the facts: here the precision and a model's lambda"
    from gan_callbacks.cli import parser as cli
    f = json.loads(cli.cli_facts_file.read_text())
    f['defaults']['train']['precision'], f['models']['pix2pix']['lambda_l1'] = 'fp32', 42.
    monkeypatch.setattr(cli, 'read_cli_facts', lambda: f)
    with pytest.raises(SystemExit): main(['train', '--help'])
    out = ' '.join(capsys.readouterr().out.split())
    assert 'needs CUDA (default: fp32)' in out and 'L1 term (default 42)' in out

def test_env_says_what_auto_picks(capsys):
    from gan_callbacks.trainer.precision import auto_precision
    assert run(['env']) == 0
    out = capsys.readouterr().out
    assert out.startswith(f'gan_callbacks ') and f'torch {torch.__version__}' in out and 'CPU: ' in out
    assert f"precision auto: {auto_precision('cpu')[0]} (" in out
    assert run(['env', '--json']) == 0
    e = json.loads(capsys.readouterr().out)
    assert e['auto']['precision'] == auto_precision('cpu')[0] and isinstance(e['cpu']['native_bf16'], bool) and e['cuda'] == []

@pytest.mark.parametrize('native', [True, False], ids=['native-bf16', 'emulated-bf16'])
@pytest.mark.parametrize('asked', ['auto', 'bf16'])
def test_train_precision_is_said_and_recorded(tiny, tmp_path, capsys, monkeypatch, native, asked):
    "auto picks by the CPU (faked) and says why; an explicit bf16 where it is emulated warns in one line; summary.json and the model folder record both"
    from gan_callbacks.trainer import precision
    monkeypatch.setattr(precision, '_cpu_bf16', lambda: native)
    code = run(['train', '--data', tiny, '--out', tmp_path, '--epochs', 1, '--epochs-decay', 0, '--bs', 4, '--load-size', 36,
                '--crop-size', 32, '--ngf', 8, '--n-samples', 1, '--precision', asked])
    out, err = capsys.readouterr()
    want = 'bf16' if asked == 'bf16' or native else 'fp32'
    assert code == 0, err
    assert f', {want}) for 1+0 epochs' in out.splitlines()[0]
    said = [l for l in out.splitlines() if l.startswith('precision auto: ')]
    assert said == ([f"precision auto: {want} ({precision.auto_precision('cpu')[1]})"] if asked == 'auto' else [])
    warned = [l for l in err.splitlines() if 'emulated' in l]
    assert len(warned) == (asked == 'bf16' and not native) and all(l.startswith('gan_callbacks train: warning: bfloat16 is emulated') for l in warned)
    s = json.loads((tmp_path/'summary.json').read_text())
    assert s['precision']['trained_in'] == want and s['precision']['asked'] == asked and ('why' in s['precision']) == (asked == 'auto')
    training = json.loads((tmp_path/'generator'/'config.json').read_text())['training']
    assert (training['precision'], training['precision_asked']) == (want, asked)


def test_translate_goes_on_past_an_unreadable_image(trained, tiny, tmp_path, capsys):
    "One broken file among the inputs: the others translated, the failure reported in one line, exit 2"
    src = tmp_path/'in'
    src.mkdir()
    for f in sorted((tiny/'val').iterdir()): shutil.copy(f, src/f.name)
    (src/'0_broken.png').write_bytes(b'not a png')   # sorted first: the old loop stopped here
    assert run(['translate', '--model', trained/'generator', '--input', src, '--output', tmp_path/'o', '--aligned']) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gan_callbacks translate: error: translated 2 of 3 images into {tmp_path/'o'}/; 1 could not be: ") and '0_broken.png' in err
    assert sorted(f.name for f in (tmp_path/'o').iterdir()) == sorted(f.name for f in (tiny/'val').iterdir())


# --- run configs: every run writes run.yaml; train --config reads it back (YAML or JSON), the command line winning

def test_a_run_config_trains_the_run_again(tiny, tmp_path, capsys):
    import yaml
    from gan_callbacks.cli.runs import train
    a = tmp_path/'a'
    assert run(['train', '--data', tiny, '--out', a, *TINY, '--seed', 0, '--lambda-l1', 50]) == 0
    cfg = yaml.safe_load((a/'run.yaml').read_text())
    assert (cfg['lambda_l1'], cfg['seed'], cfg['data'], cfg['epochs']) == (50., 0, str(tiny), 1) and 'out' not in cfg and 'resume' not in cfg
    weights = lambda d: (d/'generator'/'model.safetensors').read_bytes()
    assert run(['train', '--config', a/'run.yaml', '--out', tmp_path/'b']) == 0
    assert weights(tmp_path/'b') == weights(a)   # the same run, bitwise
    (tmp_path/'run.json').write_text(json.dumps(cfg))
    assert run(['train', '--config', tmp_path/'run.json', '--out', tmp_path/'c', '--lambda-l1', 10]) == 0   # the command line wins
    assert yaml.safe_load((tmp_path/'c'/'run.yaml').read_text())['lambda_l1'] == 10. and weights(tmp_path/'c') != weights(a)
    train(**cfg, out=tmp_path/'d')   # the same options in Python
    assert weights(tmp_path/'d') == weights(a)
    capsys.readouterr()
    for bad, msg in (({'bsz': 4}, "unknown option 'bsz' (train has no --bsz)"), ({'bs': 'four'}, "bs must be an integer, got 'four'"),
                     ({'gan_mode': 'best'}, "gan_mode must be one of vanilla, lsgan, hinge, wgangp, got 'best'"), ({'swd': 1}, 'swd must be true or false, got 1')):
        (tmp_path/'bad.yaml').write_text(yaml.safe_dump(bad))
        assert run(['train', '--config', tmp_path/'bad.yaml', '--data', tiny, '--out', tmp_path/'e']) == 2
        assert capsys.readouterr().err.strip().endswith(f"--config {tmp_path/'bad.yaml'}: {msg}")
    assert not (tmp_path/'e').exists()


def test_max_restarts_is_for_one_machine(capsys):
    "--max-restarts with --nnodes: refused before any process starts (the nodes' new groups would never meet)"
    with pytest.raises(SystemExit) as e: main(['train', '--sample', '--nnodes', '2', '--max-restarts', '1'])
    assert "--max-restarts starts the processes of one machine again; with --nnodes, let the scheduler restart the job" in str(e.value)
    with pytest.raises(SystemExit) as e: main(['train', '--sample', '--nproc', '2', '--max-restarts', '-1'])
    assert '--max-restarts must be at least 0, got -1' in str(e.value)
