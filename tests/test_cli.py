"The `gan_callbacks` command end to end on a tiny sample, and its errors."
import json, subprocess, sys, csv
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
