"`gan_callbacks data combine|split|check` on a folder as users have them: a 16-bit, a grey, a broken and an unmatched file."
import json
from pathlib import Path
import numpy as np
from PIL import Image
from helpers import run_cli as run

def _files(d): return {p.relative_to(d): p.read_bytes() for p in sorted(Path(d).rglob('*')) if p.is_file()}

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
    assert run(['data', 'check', tmp_path/'data', '--json']) == 0
    r = json.loads(capsys.readouterr().out)
    assert r['layout'] == 'aligned' and sum(s['count'] for s in r['splits'].values()) == 10
    assert len(r['unreadable']) == 1 and 'broken.png' in r['unreadable'][0]
    assert r['train'].startswith(f"gan_callbacks train --data {tmp_path/'data'}: pix2pix on 6 pairs, validating on 2")
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
