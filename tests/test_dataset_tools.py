"`gan_callbacks data combine|split|check` on a folder as users have them: a 16-bit, a grey, a broken and an unmatched file."
import json, os, shlex, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from PIL import Image
from helpers import run_cli as run

def _files(d): return {p.relative_to(d): p.read_bytes() for p in sorted(Path(d).rglob('*')) if p.is_file()}

def _img(fn, w, h, seed=0, mode='RGB'):
    "An image of noise (`w` x `h`) at `fn` (PNG, JPEG: by its suffix), its folder made"
    Path(fn).parent.mkdir(parents=True, exist_ok=True)
    a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)
    Image.fromarray(a).convert(mode).save(fn)
    return Path(fn)

def _truncate(fn):
    "Keep the first half of file `fn`: its header reads, its pixels do not"
    data = Path(fn).read_bytes()
    Path(fn).write_bytes(data[:len(data) // 2])

def _check(path, capsys):
    "The JSON report of `data check path`"
    assert run(['data', 'check', path, '--json']) == 0
    return json.loads(capsys.readouterr().out)

def test_combine_split_check_a_users_folders(tmp_path, capsys):
    a, b = tmp_path/'A', tmp_path/'B'
    a.mkdir(); b.mkdir()
    for i in range(8):
        Image.fromarray(np.full((32, 32, 3), i * 20, np.uint8)).save(a/f'{i}.png')
        Image.fromarray(np.full((32, 32), i * 20, np.uint8)).save(b/f'{i}.png')   # grey
    Image.fromarray(np.full((32, 32), 40000, np.uint16)).save(a/'deep.png'); Image.fromarray(np.zeros((32, 32), np.uint16)).save(b/'deep.png')
    Image.new('RGB', (32, 32)).save(a/'only_a.png')   # unmatched
    before = {d: _files(d) for d in (a, b)}
    assert run(['data', 'combine', a, b, tmp_path/'pairs']) == 0
    out = capsys.readouterr().out
    assert 'Paired 9 images into' in out and 'without a partner, left out: only_a.png' in out
    assert Image.open(tmp_path/'pairs'/'3.png').size == (64, 32) and Image.open(tmp_path/'pairs'/'3.png').mode == 'RGB'
    (tmp_path/'pairs'/'broken.png').write_bytes(b'not a png')
    assert run(['data', 'split', tmp_path/'pairs', tmp_path/'data', '--fractions', '0.6', '0.2', '0.2', '--seed', '1']) == 0
    capsys.readouterr()
    r = _check(tmp_path/'data', capsys)
    assert r['layout'] == 'aligned' and sum(s['count'] for s in r['splits'].values()) == 10
    assert len(r['unreadable']) == 1 and 'broken.png' in r['unreadable'][0]
    broken = next((tmp_path/'data').rglob('broken.png'))
    if broken.parent.name != 'test': assert r['command'] is None and 'no train command' in r['train']   # train reads train/ and val/
    broken.unlink()
    r = _check(tmp_path/'data', capsys)
    n = {s: r['splits'][s]['count'] for s in ('train', 'val')}
    assert r['train'].startswith(f"gan_callbacks train --data {tmp_path/'data'} --load-size 32 --crop-size 32: "
                                 f"pix2pix on {n['train']} pairs, validating on {n['val']}")
    assert run(['data', 'check', tmp_path/'A']) == 0   # a folder of images with no splits
    assert 'data split' in capsys.readouterr().out
    assert run(['data', 'combine', a, b, tmp_path/'sep', '--layout', 'separate']) == 0
    capsys.readouterr()
    assert run(['data', 'check', tmp_path/'sep']) == 0   # the 16-bit image, read at its depth
    text = capsys.readouterr().out
    assert 'bits 8 (16), 16 (2)' in text and 'data split' in text
    # refused in one line, nothing written over or into the data
    for argv, msg in ((['combine', a, b, tmp_path/'pairs'], 'exists and is not empty'), (['combine', a, b, a/'x'], 'overlap'),
                      (['split', tmp_path/'pairs', tmp_path/'x', '--fractions', '0.5', '0.6'], 'summing to 1'),
                      (['check', tmp_path/'nowhere'], 'no such folder')):
        assert run(['data', *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith('gan_callbacks data: error:') and msg in err and '\n' not in err, err
    assert {d: _files(d) for d in (a, b)} == before

def test_check_decodes_every_image(tmp_path, capsys):
    "A truncated PNG and JPEG read at their headers but not to their last pixel: listed, and no train command while train would stop"
    d = tmp_path/'data'
    for s, n in (('train', 6), ('val', 2)):
        for i in range(n): _img(d/s/f'{i}.png', 64, 32, seed=i)
    _truncate(d/'train'/'1.png')
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 64, 3), np.uint8)).save(d/'train'/'7.jpg', quality=95)
    _truncate(d/'train'/'7.jpg')
    with Image.open(d/'train'/'1.png') as im: assert im.size == (64, 32)   # the header alone looks fine
    r = _check(d, capsys)
    assert sorted(Path(u.split(':')[0]).name for u in r['unreadable']) == ['1.png', '7.jpg']
    assert r['command'] is None and '2 unreadable image(s) in train/' in r['train']
    assert run(['data', 'check', d]) == 0
    text = capsys.readouterr().out
    assert str(d/'train'/'1.png') in text and str(d/'train'/'7.jpg') in text and 'gan_callbacks train --data' not in text
    for f in (d/'train').iterdir(): _truncate(f)   # nothing usable at all
    r = _check(d, capsys)
    assert len(r['unreadable']) == 7 and r['command'] is None and 'gan_callbacks train' not in format(r['train'])

def test_check_flags_every_pair_of_two_sizes(tmp_path, capsys):
    "Separate A/ and B/ whose images differ in size: all of them listed (train refuses them), no train command"
    d = tmp_path/'data'
    for s, n in (('train', 10), ('val', 2)):
        for i in range(n):
            _img(d/s/'A'/f'{i}.png', 40, 40, seed=i)
            _img(d/s/'B'/f'{i}.png', *((40, 40) if i >= 8 or s == 'val' else (48, 40)), seed=i)
    r = _check(d, capsys)
    assert len(r['mismatched']) == 8 and all('is 48x40, but its A image' in m for m in r['mismatched'])
    assert r['command'] is None and '8 pair(s) of train/ whose A and B differ in size' in r['train']
    assert run(['data', 'check', d]) == 0
    text = capsys.readouterr().out
    assert all(str(d/'train'/'B'/f'{i}.png') in text for i in range(8)), text

def _trains(cmd, out):
    "Whether the `train` command line `cmd` runs, for one tiny epoch, writing to `out`"
    argv = shlex.split(cmd)
    assert argv[:2] == ['gan_callbacks', 'train'], cmd
    return run([*argv[1:], '--epochs', 1, '--epochs-decay', 0, '--ngf', 8, '--n-samples', 1, '--out', out]) == 0 and (out/'generator').is_dir()

def test_the_train_command_printed_runs(tmp_path, capsys):
    "Images of 30 px (smaller than any crop train takes) and separate pairs of .png and .jpg: the command printed trains as it is"
    d = tmp_path/'small'
    for s, n in (('train', 6), ('val', 2)):
        for i in range(n): _img(d/s/f'{i}.png', 60, 30, seed=i)   # A|B of 30 px each
    r = _check(d, capsys)
    assert r['command'] == f"gan_callbacks train --data {d} --load-size 32 --crop-size 32", r
    assert _trains(r['command'], tmp_path/'run1')
    capsys.readouterr()
    e = tmp_path/'sep'
    for s, n in (('train', 5), ('val', 1)):
        for i in range(n):
            _img(e/s/'A'/f'{i}.png', 70, 40, seed=i)
            _img(e/s/'B'/f'{i}.jpg', 70, 40, seed=i)
    r = _check(e, capsys)
    assert r['unmatched'] == [] and r['splits']['train']['pairs'] == 5
    assert r['command'] == f"gan_callbacks train --data {e} --layout separate --load-size 40 --crop-size 32", r
    assert _trains(r['command'], tmp_path/'run2')
    capsys.readouterr()

def test_too_few_to_validate_gets_no_command(tmp_path, capsys):
    "Four pairs and no val/: train has nothing to set apart for validation, so no command is printed"
    for i in range(4): _img(tmp_path/'d'/'train'/f'{i}.png', 64, 32, seed=i)
    r = _check(tmp_path/'d', capsys)
    assert r['command'] is None and 'no val/' in r['train']

def test_check_and_combine_pair_by_stem(tmp_path, capsys):
    "`x.png` in A/ and `x.jpg` in B/ are partners for both, as for train; two files of one stem in a folder are refused by both"
    a, b = tmp_path/'pics'/'A', tmp_path/'pics'/'B'
    _img(a/'x.png', 16, 16); _img(b/'x.jpg', 16, 16)
    r = _check(tmp_path/'pics', capsys)
    assert r['unmatched'] == [] and r['splits']['all']['pairs'] == 1
    assert run(['data', 'combine', a, b, tmp_path/'ab']) == 0
    assert 'Paired 1 images' in capsys.readouterr().out and Image.open(tmp_path/'ab'/'x.png').size == (32, 16)
    _img(a/'x.jpg', 16, 16)   # now two files of stem x in A
    r = _check(tmp_path/'pics', capsys)
    assert len(r['alike']) == 1 and 'x.png' in r['alike'][0] and 'x.jpg' in r['alike'][0]
    assert run(['data', 'combine', a, b, tmp_path/'ab2']) == 2
    assert 'have one name' in capsys.readouterr().err and not (tmp_path/'ab2').exists()

def test_combine_says_every_problem_before_writing(tmp_path, capsys):
    "Two truncated files, two pairs of two sizes, an output folder in use: one run names them all, and writes nothing"
    a, b, out = tmp_path/'a', tmp_path/'b', tmp_path/'out'
    for i in range(6): _img(a/f'{i}.png', 32, 32, seed=i); _img(b/f'{i}.png', *((40, 32) if i in (2, 3) else (32, 32)), seed=i)
    _truncate(a/'0.png'); _truncate(b/'1.png')
    out.mkdir(); (out/'kept.txt').write_text('mine')
    before = {d: _files(d) for d in (a, b, out)}
    assert run(['data', 'combine', a, b, out]) == 2
    err = capsys.readouterr().err
    assert err.startswith('gan_callbacks data: error:') and '5 problems, nothing written' in err, err
    for s in ('exists and is not empty', f"{a/'0.png'} cannot be read", f"{b/'1.png'} cannot be read",
              f"{b/'2.png'} is 40x32, but its A image {a/'2.png'} is 32x32", f"{b/'3.png'} is 40x32"): assert s in err, err
    assert {d: _files(d) for d in (a, b, out)} == before

def test_two_folders_get_the_combine_line(tmp_path, capsys):
    "A folder holding inputs/ and targets/: check says how to combine them (inputs as A), and combine then takes that line as it is"
    p = tmp_path/'mine'
    for i in range(3): _img(p/'targets'/f'{i}.png', 16, 16, seed=i); _img(p/'inputs'/f'{i}.png', 16, 16, seed=i + 9)
    r = _check(p, capsys)
    want = f"gan_callbacks data combine {p/'inputs'} {p/'targets'} NEW_FOLDER"
    assert r['layout'] == 'folders' and want in r['train'] and r['command'] is None
    argv = shlex.split(want.replace('NEW_FOLDER', str(tmp_path/'pairs')))
    assert run(argv[1:]) == 0 and len(list((tmp_path/'pairs').iterdir())) == 3
    capsys.readouterr()

def test_unpaired_domains_are_not_paired_by_name(unpaired, capsys):
    r = _check(unpaired, capsys)
    assert r['layout'] == 'unpaired' and r['unmatched'] == [] and r['command'] == f"gan_callbacks train --model cyclegan --data {unpaired}"

def test_the_tools_agree_with_the_library(monkeypatch):
    "The torch-free copies the tools keep: the pixel limit and the image suffixes train reads"
    from gan_callbacks.data import tools
    from gan_callbacks.data.images import max_pixels
    from fastai.data.transforms import image_extensions
    assert tools._image_exts == image_extensions
    assert tools._max_pixels() == max_pixels()
    monkeypatch.setenv('GAN_CALLBACKS_MAX_PIXELS', '1000')
    assert tools._max_pixels() == max_pixels() == 1000

def test_the_data_commands_import_no_torch(tmp_path):
    "check, combine and split on 100 small files: neither torch nor fastai imported, well under 200 MB"
    for i in range(50): _img(tmp_path/'a'/f'{i}.png', 32, 32, seed=i); _img(tmp_path/'b'/f'{i}.png', 32, 32, seed=i + 50)
    code = ("import re, sys; from pathlib import Path; from gan_callbacks.cli.parser import main\n"
            "for argv in sys.argv[1:]: main(argv.split('|'))\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'fastai', 'torchvision')], "
            "int(re.search(r'VmHWM:\\s*(\\d+)', Path('/proc/self/status').read_text())[1]) // 1024)")   # peak memory, MB
    t = tmp_path
    cmds = [f'data|combine|{t/"a"}|{t/"b"}|{t/"ab"}', f'data|split|{t/"ab"}|{t/"data"}', f'data|check|{t/"data"}']
    res = subprocess.run([sys.executable, '-c', code, *cmds], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    mods, mb = res.stdout.strip().splitlines()[-1].rsplit(' ', 1)
    assert mods == '[]' and int(mb) < 200, res.stdout

def test_the_data_tools_take_max_pixels_and_refuse_nan_fractions(tmp_path, capsys, monkeypatch):
    "`--max-pixels` applies to combine, split and check as to train; `--fractions nan 1` is one line"
    from PIL import Image
    from helpers import run_cli
    monkeypatch.setenv('GAN_CALLBACKS_MAX_PIXELS', str(8192 * 8192))   # put back after the test
    for d in 'AB':
        (tmp_path/d).mkdir()
        for i in range(3): Image.new('RGB', (64, 64), (i, 0, 0)).save(tmp_path/d/f'{i}.png')
    assert run_cli(['data', 'combine', tmp_path/'A', tmp_path/'B', tmp_path/'pairs', '--max-pixels', 1000]) == 2
    err = capsys.readouterr().err
    assert err.startswith('gan_callbacks data: error:') and '4,096 pixels' in err and 'limit of 1,000' in err, err
    assert not (tmp_path/'pairs').exists()
    monkeypatch.delenv('GAN_CALLBACKS_MAX_PIXELS')   # the command set it for its process, which here is the tests'
    assert run_cli(['data', 'combine', tmp_path/'A', tmp_path/'B', tmp_path/'pairs']) == 0
    assert run_cli(['data', 'split', tmp_path/'pairs', tmp_path/'s', '--fractions', 'nan', '1']) == 2
    assert 'fractions must be 2 or 3 numbers >= 0 summing to 1' in capsys.readouterr().err and not (tmp_path/'s').exists()
