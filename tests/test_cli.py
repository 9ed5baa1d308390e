"The `gan_callbacks` command end to end on a tiny sample, and its errors."
import json, subprocess, sys, csv, shutil
from pathlib import Path
import pytest, torch
from PIL import Image
from fastai.learner import load_learner
from gan_callbacks.cli import main, image_grid, translate_image
from gan_callbacks.data import sample_pairs


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    home = tmp_path_factory.mktemp('home')
    return sample_pairs(home/'sample', n_train=8, n_valid=2, size=32)

def run(argv):
    try: main([str(a) for a in argv]); return 0
    except SystemExit as e: return e.code


@pytest.fixture(scope='module')
def trained(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp('run')
    code = run(['train', '--data', tiny, '--out', out, '--epochs', 1, '--epochs-decay', 1, '--bs', 4,
                '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--lr', 1e-3, '--n-samples', 2])
    assert code == 0
    return out


def test_train_writes_everything(trained):
    names = sorted(f.name for f in trained.iterdir())
    assert names == ['checkpoints', 'generator.pkl', 'history.csv', 'losses.png', 'samples_epoch000.png', 'samples_epoch001.png', 'summary.json']
    rows = list(csv.DictReader(open(trained/'history.csv')))
    assert len(rows) == 2 and {'train_loss', 'valid_loss', 'g_gan', 'g_l1', 'd_real', 'd_fake'} <= set(rows[0])
    s = json.loads((trained/'summary.json').read_text())
    assert s['final_valid_l1'] == pytest.approx(float(rows[-1]['valid_loss']), rel=1e-5)
    assert 0 < s['mean_image_l1'] < 2
    grid = Image.open(trained/'samples_epoch001.png')
    assert grid.size == (3*(32+4), 2*(32+4))   # 3 columns (A | output | B), 2 examples, 2px padding
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
    dec, raw, _ = learn.predict(fn)
    assert raw.shape == (3, 32, 32) and raw.min() >= -1 and raw.max() <= 1
    im = translate_image(learn, fn, aligned=True)
    assert im.size == (32, 32)


def test_translate_folder(trained, tiny, tmp_path):
    out = tmp_path/'t'
    assert run(['translate', '--model', trained/'generator.pkl', '--input', tiny/'val', '--output', out, '--aligned']) == 0
    assert sorted(f.name for f in out.iterdir()) == sorted(f.name for f in (tiny/'val').iterdir())
    # a single file, not aligned: same size as the input
    src = tmp_path/'in.png'; Image.new('RGB', (40, 24), (10, 200, 30)).save(src)
    assert run(['translate', '--model', trained/'generator.pkl', '--input', src, '--output', out]) == 0
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
    Image.new('RGB', (30, 16)).save(tmp_path/'train'/'odd.png')
    assert run(['train', '--data', tmp_path, '--out', tmp_path/'o', '--crop-size', 32, '--load-size', 36]) == 2
    assert 'odd.png' in capsys.readouterr().err


def test_console_script_exit_code(tmp_path):
    exe = Path(sys.executable).parent/'gan_callbacks'   # the console script installed with the package
    r = subprocess.run([str(exe), 'translate', '--model', str(tmp_path/'none.pkl'), '--input', '.', '--output', str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and 'no such file' in r.stderr


def test_image_grid_shapes():
    g = image_grid([[torch.zeros(1, 8, 8), torch.ones(3, 8, 8), -torch.ones(3, 8, 8)]], pad=1)
    assert g.size == (30, 10) and g.mode == 'RGB'


def test_speed_options_reach_the_trainer(tiny, tmp_path):
    from gan_callbacks.cli import _parser, train
    args = vars(_parser().parse_args(['train', '--sample', '--channels-last', '--compile']))
    assert args['channels_last'] is True and args['compile'] is True
    learn = train(data=tiny, out=tmp_path, epochs=1, epochs_decay=0, bs=4, load_size=36, crop_size=32, ngf=8, n_samples=1,
                  channels_last=True)
    t = learn.pix2pix_trainer
    assert t.channels_last and not t.compile
    conv = next(m for m in learn.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------- CycleGAN

import numpy as np
from gan_callbacks.data import sample_unpaired

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
    assert names == ['checkpoints', 'generator.pkl', 'history.csv', 'samples_epoch000.png', 'samples_epoch001.png', 'summary.json']
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
    grid = Image.open(trained_cyclegan/'samples_epoch001.png')
    assert grid.size == (3*(32+4), 2*(32+4))          # A | G_A(A) | true B, 2 examples
    true_b = np.asarray(grid)[2+36:2+36+32, 2+72:2+72+32]   # second row, third column: the true B of testA 0001
    assert np.abs(true_b.astype(int) - np.asarray(Image.open(tiny_unpaired/'testA_true'/'0001.png').resize((32, 32)))).max() <= 1

def test_cyclegan_translate_both_directions(trained_cyclegan, tiny_unpaired, tmp_path):
    for d, src in (('AtoB', 'testA'), ('BtoA', 'testB')):
        assert run(['translate', '--model', trained_cyclegan/'generator.pkl', '--input', tiny_unpaired/src,
                    '--output', tmp_path/d, '--direction', d]) == 0
        assert sorted(f.name for f in (tmp_path/d).iterdir()) == sorted(f.name for f in (tiny_unpaired/src).iterdir())
    src = tiny_unpaired/'testA'/'0000.png'
    assert run(['translate', '--model', trained_cyclegan/'generator.pkl', '--input', src, '--output', tmp_path/'ba', '--direction', 'BtoA']) == 0
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
    (['train', '--sample', '--model', 'cyclegan', '--n-blocks', '-1'], '--n-blocks must be at least 0'),
    (['train', '--model', 'cyclegan', '--data', '/no/such/dir'], '--data /no/such/dir: no such directory'),
])
def test_cyclegan_bad_arguments_exit_2(argv, msg, capsys):
    assert run(argv) == 2
    assert msg in capsys.readouterr().err

def test_pix2pix_generator_has_no_BtoA(trained, tiny, tmp_path, capsys):
    assert run(['translate', '--model', trained/'generator.pkl', '--input', tiny/'val', '--output', tmp_path, '--direction', 'BtoA']) == 2
    assert 'translates A -> B only' in capsys.readouterr().err
