"Hostile but realistic use of run configs and output folders: each refused in one line, before anything is read whole or written."
import json, os, shutil, time
from pathlib import Path
import pytest
from helpers import run_cli, one_line, TINY

def written(p, content):
    "File `p` with `content` (text or bytes)"
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p

def refused(argv, capsys):
    "The one line `argv` is refused with (exit code 2)"
    t = time.perf_counter()
    assert run_cli(argv) == 2
    assert time.perf_counter() - t < 30   # refused before any work
    return one_line(capsys.readouterr().err)

def test_abbreviations_are_not_options(tmp_path, capsys):
    cfg = tmp_path/'c.yaml'; cfg.write_text('lr: 0.1\n')
    assert run_cli(['train', '--sample', '--conf', cfg, '--out', tmp_path/'o']) == 2   # argparse's usage, then its error
    assert 'error: unrecognized arguments: --conf' in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path/'o').exists()

@pytest.mark.parametrize('make,said', [
    (lambda p: os.truncate(p, 3 * 2**30) or p, 'bytes: a run config holds at most 1,048,576'),   # sparse: nothing on disk
    (lambda p: Path('/dev/zero'), 'not a file'),
    (lambda p: written(p, 'lr: 0.1  # d\xe9j\xe0 vu\n'.encode('latin-1')), 'not UTF-8 text'),
    (lambda p: written(p, 'lr: ' + '[' * 100000 + ']' * 100000 + '\n'), 'nested too deeply: a run config nests at most 50 levels'),
    (lambda p: written(p, 'lr: ' + '[' * 60 + '1' + ']' * 60 + '\n'), 'nested too deeply'),
    (lambda p: written(p, 'nproc: 2\n'), 'nproc: --nproc says how a run is started, not what it trains: give it on the command line'),
    (lambda p: written(p, 'max_restarts: 1\n'), '--max-restarts says how a run is started'),
    (lambda p: written(p, 'overwrite: true\n'), '--overwrite says how a run is started'),
])
def test_configs_refused_in_one_line(make, said, tmp_path, capsys):
    fn = tmp_path/'c.yaml'; fn.touch()
    fn = make(fn)
    line = refused(['train', '--config', fn, '--out', tmp_path/'o'], capsys)
    assert line.startswith(f'gan_callbacks train: error: --config {fn}: ') and said in line, line
    assert not (tmp_path/'o').exists()

def test_a_billion_laughs_config_is_shown_in_a_hundred_characters(tmp_path, capsys):
    fn = tmp_path/'c.yaml'
    text = '\n'.join(['lr:', '  - &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]'] +
                     [f'  - &a{i} [' + ', '.join([f'*a{i-1}'] * 10) + ']' for i in range(1, 9)]) + '\n'
    fn.write_text(text)
    assert len(text) < 1000
    line = refused(['train', '--config', fn, '--out', tmp_path/'o'], capsys)
    assert 'lr must be a number, got [' in line and len(line) < 300, line

def test_train_never_replaces_files_it_did_not_write(tiny, tmp_path, capsys):
    out = tmp_path/'F'; out.mkdir()
    for n in ('losses.png', 'run.yaml', 'samples_epoch000.png'): (out/n).write_bytes(b'mine: ' + n.encode())
    line = refused(['train', '--data', tiny, '--out', out, *TINY], capsys)
    assert line.startswith(f'gan_callbacks train: error: --out {out} holds an earlier run (run.yaml, losses.png, samples_epoch000.png)')
    assert sorted((p.name, p.read_bytes()) for p in out.iterdir()) == sorted((n, b'mine: ' + n.encode()) for n in
                                                                            ('losses.png', 'run.yaml', 'samples_epoch000.png'))

def test_a_config_kept_in_its_run_folder_is_not_replaced(tiny, tmp_path, capsys):
    exp = tmp_path/'exp1'; exp.mkdir()
    text = f"# my experiment, by hand\ndata: {tiny}\nepochs: 1\nepochs_decay: 0\nbs: 4\nload_size: 36\ncrop_size: 32\nngf: 8\n"
    (exp/'run.yaml').write_text(text)
    line = refused(['train', '--config', exp/'run.yaml', '--out', exp], capsys)
    assert 'holds an earlier run (run.yaml)' in line and (exp/'run.yaml').read_text() == text

def test_export_folder_over_a_model_folder_asks_for_overwrite(trained, tmp_path, capsys):
    folder = tmp_path/'model'
    shutil.copytree(trained/'generator', folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    line = refused(['export', '--model', trained/'generator', '--format', 'folder', '--out', folder], capsys)
    assert line == f'gan_callbacks export: error: --out {folder} exists and holds files: give another --out, or --overwrite to replace a model folder there'
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert run_cli(['export', '--model', trained/'generator', '--format', 'folder', '--out', folder, '--overwrite']) == 0

@pytest.mark.slow
def test_a_refused_attempt_is_not_restarted(trained, tiny, tmp_path, capfd):
    "`--max-restarts`: a run refused (exit code 2, here a finished run without --resume) is final, never restarted with overwrite"
    out = tmp_path/'finished'
    shutil.copytree(trained, out)
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob('*')) if p.is_file()}
    assert run_cli(['train', '--data', tiny, '--out', out, *TINY, '--max-restarts', 1]) == 2
    err = capfd.readouterr().err   # the launched process's own stderr
    assert 'holds an earlier run' in err and 'starting the processes again' not in err
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob('*')) if p.is_file()} == before

def test_weights_that_are_a_pickle_are_one_line(tmp_path):
    "A perceptual network's weights file that is a pickle of an object: refused in one line, its code never run"
    import pickle, subprocess, sys
    marker = tmp_path/'ran'
    class Evil:
        def __reduce__(self): return (open, (str(marker), 'w'))
    fn = tmp_path/'vgg19.pth'
    fn.write_bytes(pickle.dumps({'features.0.weight': Evil()}))
    from gan_callbacks.nets.hd_losses import VGG19Features
    from gan_callbacks.nets.lpips import LPIPS
    with pytest.raises(ValueError) as e: VGG19Features.from_file(fn)
    assert str(e.value).startswith(f"{fn} does not hold VGG19 weights that torch reads without running code (UnpicklingError") and len(str(e.value)) < 400
    with pytest.raises(ValueError, match="does not hold torchvision's alex weights that torch reads without running code"):
        LPIPS.from_files('alex', backbone=fn, lin=fn)
    assert not marker.exists()

def test_evaluate_keeps_an_earlier_evaluation_unless_asked(trained, tiny, tmp_path, capsys):
    out = tmp_path/'evaluation'
    assert run_cli(['evaluate', '--model', trained/'generator', '--data', tiny, '--out', out]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = refused(['evaluate', '--model', trained/'generator', '--data', tiny, '--out', out], capsys)
    assert line == (f"gan_callbacks evaluate: error: --out {out} holds an earlier evaluation (summary.json, metrics.csv, best_worst.png): "
                    "give another --out, or --overwrite to replace it")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert run_cli(['evaluate', '--model', trained/'generator', '--data', tiny, '--out', out, '--overwrite']) == 0

def _npy_header_only(fn, shape, descr):
    "A `.npy` file of a header stating `shape` and `descr`, and no values (a few bytes on disk)"
    import numpy as np
    with open(fn, 'wb') as f: np.lib.format.write_array_header_1_0(f, {'descr': descr, 'fortran_order': False, 'shape': shape})
    return fn

def test_an_arrays_channels_and_bytes_count_before_it_is_read(tmp_path):
    "A (8192, 8192, 64) uint8 `.npy` is refused from its header; a 16-channel float file where 3 channels are expected, before it is read"
    from gan_callbacks.data.images import read_array, read_image, ImageTooLarge
    big = _npy_header_only(tmp_path/'big.npy', (8192, 8192, 64), '|u1')
    with pytest.raises(ImageTooLarge, match=r"8192x8192x64 values of 1 bytes are 4,294,967,296 bytes, more than the limit of 1,073,741,824"):
        read_array(big)
    wide = _npy_header_only(tmp_path/'wide.npy', (64, 64, 16), '<f4')   # no values: reading it would fail otherwise
    with pytest.raises(OSError, match=f"^{wide} has 16 channels, expected 3$"): read_image(wide, 3)
