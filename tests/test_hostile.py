"Hostile but realistic use: nothing already written is lost, no small file exhausts memory, every refusal is one line. Each case is a row of the table in nbs/12b_atomic.ipynb."
import contextlib, io, json, os, resource, shutil, subprocess, sys, tempfile
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from gan_callbacks.cli.parser import main
from gan_callbacks.data.samples import sample_pairs
from gan_callbacks.nets.networks import ResnetGenerator
from gan_callbacks.deploy.model_folder import write_model_folder
from gan_callbacks.deploy.interop import load_generator
from gan_callbacks.atomic import CheckpointWriteError
from helpers import run_cli as run, one_line, TINY

pytestmark = pytest.mark.slow   # whole runs of the command under hostile input: `make test-all`


LIMITED = '''
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
{more}
from gan_callbacks.cli.parser import main
res = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try: main(argv); code = 0
        except SystemExit as e: code = e.code
        except BaseException as e: code = 'raised'; err.write(f"Traceback: {{type(e).__name__}}: {{str(e)[:300]}}")
    res.append((code, err.getvalue()))
print('RESULTS ' + json.dumps(res))
'''

def limited(*argvs, mem=4 * 2**30, more='', timeout=600):
    "Run each command line of `argvs` in a fresh process limited to `mem` bytes of address space: [(exit code, stderr)]"
    p = subprocess.run([sys.executable, '-c', LIMITED.format(mem=mem, more=more), json.dumps([[str(a) for a in v] for v in argvs])],
                       capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS='1', PYTHONDONTWRITEBYTECODE='1'))
    out = [l for l in p.stdout.splitlines() if l.startswith('RESULTS ')]
    assert p.returncode == 0 and out, p.stderr[-3000:]
    return json.loads(out[-1][8:])

def files(d):
    "Every file under `d` with its bytes"
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(Path(d).rglob('*')) if f.is_file()}


# --- 1. a model folder's other files are kept

def test_export_into_a_model_folder_keeps_its_other_files(trained, tiny, tmp_path):
    folder = tmp_path/'generator'
    shutil.copytree(trained/'generator', folder)
    (folder/'NOTES.txt').write_text('mine'); (folder/'results').mkdir(); (folder/'results'/'a.txt').write_text('kept')
    assert run(['export', '--model', trained/'generator', '--format', 'folder', '--out', folder, '--overwrite']) == 0
    assert (folder/'NOTES.txt').read_text() == 'mine' and (folder/'results'/'a.txt').read_text() == 'kept'
    load_generator(folder, device='cpu')
    assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]   # no temporary folder left
    # training again into the same --out replaces OUT/generator/ the same way
    out = tmp_path/'run'
    shutil.copytree(trained, out)
    (out/'generator'/'NOTES.txt').write_text('mine too')
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--overwrite']) == 0
    assert (out/'generator'/'NOTES.txt').read_text() == 'mine too'

def test_a_failed_replacement_puts_everything_back(tmp_path, monkeypatch):
    G = ResnetGenerator(ngf=4, n_blocks=1)
    folder = write_model_folder(G, tmp_path/'m', sample=False)
    (folder/'NOTES.txt').write_text('mine')
    before = files(folder)
    real, calls = os.replace, []
    def flaky(a, b):
        calls.append((a, b))
        if str(a).endswith('.tmp') and Path(b) == folder: raise OSError(5, 'Input/output error')   # the new folder cannot take its place
        return real(a, b)
    monkeypatch.setattr(os, 'replace', flaky)
    with pytest.raises(OSError): write_model_folder(ResnetGenerator(ngf=4, n_blocks=2), folder, sample=False)
    monkeypatch.undo()
    assert files(folder) == before and calls
    assert sorted(p.name for p in tmp_path.iterdir()) == ['m']


# --- 4. a full disk: one line, the old files kept

def half_write(fn, exc):
    Path(fn).write_bytes(b'half a file'); raise exc

def test_full_disk_while_a_model_folder_is_written(tmp_path, monkeypatch):
    import safetensors, safetensors.torch
    folder = write_model_folder(ResnetGenerator(ngf=4, n_blocks=1), tmp_path/'m', sample=False)
    before = files(folder)
    monkeypatch.setattr(safetensors.torch, 'save_file', lambda sd, fn, metadata=None: half_write(
        fn, safetensors.SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')))
    with pytest.raises(CheckpointWriteError, match=f'^Cannot write {folder}: No space left on device'):
        write_model_folder(ResnetGenerator(ngf=4, n_blocks=2), folder, sample=False)
    assert files(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == ['m']

def test_full_disk_while_the_generator_is_exported(trained, tiny, tmp_path, monkeypatch, capsys):
    from fastai.learner import Learner
    out = tmp_path/'run'
    shutil.copytree(trained, out)
    before = (out/'generator.pkl').read_bytes()
    monkeypatch.setattr(Learner, 'export', lambda self, fname='export.pkl', **kw: half_write(self.path/fname, OSError(28, 'No space left on device')))
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--overwrite']) == 2   # a new run over it, asked for
    line = one_line(capsys.readouterr().err)
    assert f"Cannot write {out/'generator.pkl'}: No space left on device" in line, line
    assert (out/'generator.pkl').read_bytes() == before and not list(out.glob('.generator.pkl.*'))

def test_full_disk_while_a_translation_is_written(trained, tiny, tmp_path, monkeypatch, capsys):
    one = sorted((tiny/'val').iterdir())[0]
    out = tmp_path/'t'; out.mkdir(); (out/one.name).write_bytes(b'an earlier translation')
    monkeypatch.setattr(Image.Image, 'save', lambda self, fp, format=None, **kw: half_write(fp, OSError(28, 'No space left on device')))
    assert run(['translate', '--model', trained/'generator', '--input', one, '--output', out, '--aligned', '--overwrite']) == 2
    assert one_line(capsys.readouterr().err).startswith(f"gan_callbacks translate: error: Cannot write {out/one.name}: No space left on device")
    assert [f.name for f in out.iterdir()] == [one.name] and (out/one.name).read_bytes() == b'an earlier translation'

def test_full_disk_while_onnx_is_exported(trained, tmp_path, monkeypatch, capsys):
    pytest.importorskip('onnx')
    (tmp_path/'g.onnx').write_bytes(b'an earlier export')
    monkeypatch.setattr(torch.onnx, 'export', lambda G, args, f, **kw: half_write(f, OSError(28, 'No space left on device')))
    assert run(['export', '--model', trained/'generator', '--format', 'onnx', '--out', tmp_path/'g.onnx', '--overwrite']) == 2
    assert one_line(capsys.readouterr().err).startswith(f"gan_callbacks export: error: Cannot write {tmp_path/'g.onnx'}: No space left on device")
    assert (tmp_path/'g.onnx').read_bytes() == b'an earlier export' and [f.name for f in tmp_path.iterdir()] == ['g.onnx']

def test_full_disk_while_the_loss_plot_is_written(tmp_path, monkeypatch):
    "The loss plot (as the sample grids and the evaluation's files) is written whole or not at all: an earlier file stays, no temporary file is left"
    import matplotlib.figure
    from helpers import batches, paired_dls, pix2pix_nets, fit
    from gan_callbacks.gans.pix2pix import pix2pix_learner
    from gan_callbacks.callback.grids import plot_training
    learn = pix2pix_learner(paired_dls(batches(n=2)), *pix2pix_nets())
    fit(learn)
    (tmp_path/'losses.png').write_bytes(b'an earlier plot')
    monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', lambda self, fn, **kw: half_write(fn, OSError(28, 'No space left on device')))
    with pytest.raises(CheckpointWriteError, match=f"^Cannot write {tmp_path/'losses.png'}: No space left on device"):
        plot_training(learn, tmp_path/'losses.png')
    assert (tmp_path/'losses.png').read_bytes() == b'an earlier plot' and [p.name for p in tmp_path.iterdir()] == ['losses.png']

def test_a_file_size_limit_while_exporting_is_one_line(trained, tmp_path):
    "A real write error from the safetensors writer (a file-size limit stands in for a full disk): one line, exit 2, the folder as it was"
    folder = tmp_path/'generator'
    shutil.copytree(trained/'generator', folder)
    before = files(folder)
    (code, err), = limited(['export', '--model', trained/'generator', '--format', 'folder', '--out', folder, '--overwrite'],
                          more="resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))")
    assert code == 2 and one_line(err).startswith(f'gan_callbacks export: error: Cannot write {folder}: '), err
    assert files(folder) == before


# --- 5. a stranger's model folder: checked against the weights' header before anything is built

def edited(src, dst, **cfg_changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst/'config.json').read_text())
    for k, v in cfg_changes.items():
        if k.startswith('args_'): cfg['args'][k[5:]] = v
        else: cfg[k] = v
    (dst/'config.json').write_text(json.dumps(cfg))
    return dst

def test_a_strangers_model_folder_is_checked_before_it_is_built(tmp_path):
    src = write_model_folder(ResnetGenerator(ngf=4, n_blocks=1), tmp_path/'m', sample=False)
    Image.new('RGB', (32, 32)).save(tmp_path/'in.png')
    cases = {'ngf': (edited(src, tmp_path/'ngf', args_ngf=10**4), 'ngf=10000 (the weights have 4)'),
             'huge_ngf': (edited(src, tmp_path/'huge', args_ngf=10**6), 'ngf=1000000 (the weights have 4)'),
             'blocks': (edited(src, tmp_path/'blocks', args_n_blocks=10**5), 'n_blocks=100000 (the weights have 1)'),
             'negative': (edited(src, tmp_path/'neg', args_ngf=-4), 'ngf=-4'),
             'test_mode': (edited(src, tmp_path/'tm', test_mode='rm -rf'), "test_mode is 'rm -rf', expected one of paper, eval"),
             'multiple': (edited(src, tmp_path/'mul', multiple=0), 'multiple is 0')}
    deep = shutil.copytree(src, tmp_path/'deep')
    (deep/'config.json').write_text('[' * 100_000 + ']' * 100_000)
    cases['deep'] = (deep, 'config.json: not a JSON file')
    header = shutil.copytree(src, tmp_path/'header')
    data = (header/'model.safetensors').read_bytes()
    (header/'model.safetensors').write_bytes((10**12).to_bytes(8, 'little') + data[8:])   # a header of a terabyte
    cases['header'] = (header, 'cannot read it as safetensors')
    shape = shutil.copytree(src, tmp_path/'shape')   # a tensor's shape that its bytes cannot hold
    n = int.from_bytes(data[:8], 'little')
    h = json.loads(data[8:8+n]); k = next(k for k in h if k != '__metadata__'); h[k]['shape'] = [10**6, 10**6]
    hb = json.dumps(h).encode().ljust(n)
    (shape/'model.safetensors').write_bytes(len(hb).to_bytes(8, 'little') + hb + data[8+n:])
    cases['shape'] = (shape, 'cannot read it as safetensors')
    res = limited(*[['translate', '--model', f, '--input', tmp_path/'in.png', '--output', tmp_path/f'o_{k}'] for k, (f, _) in cases.items()])
    for (k, (f, msg)), (code, err) in zip(cases.items(), res):
        assert code == 2, (k, code, err)
        line = one_line(err)
        assert line.startswith(f'gan_callbacks translate: error: {f}') and msg in line, (k, line)


# --- 3. a diverged run stops, says so, and writes no generator

def test_a_diverged_run_stops_and_keeps_what_was_good(tiny, tmp_path):
    out = tmp_path/'o'
    assert run(['train', '--data', tiny, '--out', out, *TINY]) == 0   # a good run first: its generator and checkpoint
    keep = {f: (out/f).read_bytes() for f in ('generator.pkl', 'generator/model.safetensors', 'checkpoints/gan_epoch0.pth')}
    p = subprocess.run([sys.executable, '-m', 'gan_callbacks', 'train', '--data', str(tiny), '--out', str(out), *map(str, TINY), '--lr', '1e6',
                        '--epochs', '2', '--overwrite'], capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert p.returncode == 1, p.stderr[-3000:]
    line = one_line(p.stderr)
    assert 'the weights are not finite' in line and 'after epoch 1 of 2' in line and 'no generator written' in line, line
    assert 'last good checkpoint is' in line
    for f, b in keep.items(): assert (out/f).read_bytes() == b, f
    assert not (out/'checkpoints'/'gan_epoch1.pth').exists()
    p = subprocess.run([sys.executable, '-m', 'gan_callbacks', 'train', '--data', str(tiny), '--out', str(tmp_path/'o300'), *map(str, TINY), '--lr', '1e300',
                        '--epochs', '2'], capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert p.returncode == 1 and 'not finite' in one_line(p.stderr) and not (tmp_path/'o300'/'generator').exists(), p.stderr[-3000:]

def test_non_finite_weights_are_refused_by_translate_and_resume(trained, tiny, tmp_path):
    folder = shutil.copytree(trained/'generator', tmp_path/'nan')
    from safetensors.torch import load_file, save_file
    sd = load_file(folder/'model.safetensors'); k = next(iter(sd)); sd[k] = sd[k] * float('nan')
    save_file(sd, folder/'model.safetensors', metadata={'format': 'pt'})
    assert run(['translate', '--model', folder, '--input', tiny/'val', '--output', tmp_path/'t']) == 2
    assert not (tmp_path/'t').exists() or not list((tmp_path/'t').iterdir())
    ck = torch.load(next((trained/'checkpoints').glob('gan_epoch*.pth')), weights_only=True)
    ck['model'] = {k: v * float('nan') if v.is_floating_point() else v for k, v in ck['model'].items()}
    torch.save(ck, tmp_path/'nan.pth')
    assert run(['train', '--data', tiny, '--out', tmp_path/'r', *TINY, '--resume', tmp_path/'nan.pth']) == 2

def test_non_finite_weights_one_line(trained, tiny, tmp_path, capsys):
    folder = shutil.copytree(trained/'generator', tmp_path/'nan')
    from safetensors.torch import load_file, save_file
    sd = load_file(folder/'model.safetensors'); k = next(iter(sd)); sd[k] = sd[k] * float('inf')
    save_file(sd, folder/'model.safetensors', metadata={'format': 'pt'})
    capsys.readouterr()
    assert run(['translate', '--model', folder, '--input', tiny/'val', '--output', tmp_path/'t']) == 2
    assert 'weights are not finite' in one_line(capsys.readouterr().err)


# --- 7. edited or damaged checkpoints: one line

def _drop_disc(ck): ck['trainer'].pop('discriminators')

@pytest.mark.parametrize('edit, what', [
    (lambda ck: ck.pop('opt'), 'opt is missing'),
    (_drop_disc, 'trainer.discriminators is missing'),
    (lambda ck: ck.update(rng=None), 'rng is missing'),
    (lambda ck: ck.update(epoch='x'), 'epoch is a str, expected an integer'),
    (lambda ck: ck['rng'].update(python=(3, 'x')), 'random states cannot be restored'),
])
def test_a_damaged_checkpoint_is_one_line(trained, tiny, tmp_path, capsys, edit, what):
    ck = torch.load(next((trained/'checkpoints').glob('gan_epoch*.pth')), weights_only=True)
    edit(ck)
    torch.save(ck, tmp_path/'edited.pth')
    capsys.readouterr()
    assert run(['train', '--data', tiny, '--out', tmp_path/'r', *TINY, '--epochs', 2, '--resume', tmp_path/'edited.pth']) == 2
    line = one_line(capsys.readouterr().err)
    assert 'edited.pth is damaged or was edited' in line and what in line, line


# --- 2. outputs kept out of the data, and out of model folders

def test_an_output_inside_the_data_is_refused(tiny, trained, tmp_path, capsys):
    data = shutil.copytree(tiny, tmp_path/'d')
    before = files(data)
    cases = [(['train', '--data', data, '--out', data/'train', *TINY], f"--out {data/'train'} is inside --data {data}"),
             (['train', '--data', data, '--out', data, *TINY], f"--out {data} is inside --data {data}"),
             (['train', '--data', data, '--out', tmp_path, *TINY], f"--data {data} is inside --out {tmp_path}"),
             (['evaluate', '--model', trained/'generator', '--data', data, '--out', data/'val'/'scores'], f"--out {data/'val'/'scores'} is inside --data {data}"),
             (['translate', '--model', trained/'generator', '--input', data/'val', '--output', trained/'generator', '--aligned'],
              f"--output {trained/'generator'} is the model folder"),
             (['translate', '--model', trained/'generator', '--input', data/'val', '--output', trained/'generator'/'out', '--aligned'],
              f"--output {trained/'generator'/'out'} is inside the model folder")]
    model_before = files(trained/'generator')
    for argv, msg in cases:
        capsys.readouterr()
        assert run(argv) == 2, argv
        line = one_line(capsys.readouterr().err)
        assert msg in line, (argv, line)
    assert files(data) == before and files(trained/'generator') == model_before


# --- 9. a .pth holding more than tensors: torch's advice is not passed on

def test_an_untrusted_pth_points_at_trust_pickle(trained, tiny, tmp_path, capsys):
    import argparse
    from safetensors.torch import load_file
    fn = tmp_path/'latest_net_G.pth'
    torch.save(dict(model=load_file(trained/'generator'/'model.safetensors'), opt=argparse.Namespace(lr=1)), fn)   # a pickled object beside the tensors
    tails = dict(translate=['--input', tiny/'val', '--output', tmp_path/'t', '--aligned'], evaluate=['--data', tiny, '--out', tmp_path/'e'],
                 export=['--format', 'reference', '--out', tmp_path/'x'/'latest_net_G.pth'])
    for cmd, tail in tails.items():
        capsys.readouterr()
        assert run([cmd, '--model', fn, *tail]) == 2
        line = one_line(capsys.readouterr().err)
        assert f'{fn} holds Python objects besides tensors' in line and '--trust-pickle' in line, line
        assert 'weights_only' not in line and 'Re-running' not in line
        assert run([cmd, '--model', fn, '--trust-pickle', *tail]) == 0, cmd


# --- 14. the notebooks' signal examples hold in a process started with SIGINT ignored

def test_the_safety_notebook_passes_with_sigint_ignored():
    import signal
    root = Path(__file__).parents[1]
    assert (root/'nbs'/'12b_atomic.ipynb').is_file()
    exe = Path(sys.executable).parent/'nbdev_test'
    if not exe.is_file(): pytest.skip("nbdev is not installed here: the notebooks run with the pinned stack (make test)")
    p = subprocess.run([str(exe), '--path', str(root/'nbs'/'12b_atomic.ipynb')], cwd=root,
                       capture_output=True, text=True, timeout=600, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]


# --- 8. a missing val/ folder, an unreadable image in evaluate

def test_no_val_folder_is_said(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)   # relative paths, as typed in a shell
    few, many = sample_pairs(Path('few'), n_train=3, n_valid=1, size=32), sample_pairs(Path('many'), n_train=8, n_valid=1, size=32)
    shutil.rmtree(few/'val'); shutil.rmtree(many/'val')
    assert run(['train', '--data', 'few', '--out', 'o1', *TINY[:4], '--bs', 1, *TINY[6:]]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith('gan_callbacks train: error: --data few: nothing to validate on') and 'val/' in line, line
    assert run(['train', '--data', 'many', '--out', 'o2', *TINY]) == 0
    assert 'no val/ folder: validating on a random 20% of train/' in capsys.readouterr().out
    assert Path('o2/generator.pkl').is_file() and Path('o2/generator/model.safetensors').is_file()

def test_evaluate_on_an_unreadable_image_is_one_line(trained, tiny, tmp_path, capsys):
    data = shutil.copytree(tiny, tmp_path/'d')
    (data/'val'/'zz.png').write_bytes(b'not a picture')
    assert run(['evaluate', '--model', trained/'generator', '--data', data, '--out', tmp_path/'e']) == 2
    line = one_line(capsys.readouterr().err)
    assert line == f"gan_callbacks evaluate: error: Cannot read image {data/'val'/'zz.png'}: not an image file Pillow can read", line


# --- 6. image bombs: one pixel limit, checked from the header

def png_bomb(fn, w, h, rows=None):
    "A PNG of `w` x `h` black pixels, a few hundred KB; with `rows`, only that many rows of data (a header that lies)"
    import struct, zlib
    z, row = zlib.compressobj(9), b'\x00' * (3 * w + 1)
    data = b''.join(z.compress(row) for _ in range(h if rows is None else rows)) + z.flush()
    def chunk(k, d): return struct.pack('>I', len(d)) + k + d + struct.pack('>I', zlib.crc32(k + d) & 0xffffffff)
    Path(fn).write_bytes(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', data) + chunk(b'IEND', b''))
    return Path(fn)

@pytest.fixture(scope='module')
def bomb(tmp_path_factory):
    return png_bomb(tmp_path_factory.mktemp('bomb')/'bomb.png', 12000, 12000)   # 144 Mpx in 420 KB: 432 MB decoded, GBs translated

def test_image_bombs_are_refused_from_their_header(trained, tiny, bomb, tmp_path):
    huge = png_bomb(tmp_path/'huge.png', 30000, 30000, rows=10)   # beyond Pillow's own limit
    ev = shutil.copytree(tiny, tmp_path/'ev'); shutil.copy(bomb, ev/'val'/'bomb.png')
    tr = shutil.copytree(tiny, tmp_path/'tr'); shutil.copy(bomb, tr/'train'/'bomb.png')
    cases = [(['translate', '--model', trained/'generator', '--input', bomb, '--output', tmp_path/'t1'], bomb, 12000),
             (['translate', '--model', trained/'generator', '--input', huge, '--output', tmp_path/'t2'], huge, 30000),
             (['evaluate', '--model', trained/'generator', '--data', ev, '--out', tmp_path/'e'], ev/'val'/'bomb.png', 12000),
             (['train', '--data', tr, '--out', tmp_path/'o', *TINY], tr/'train'/'bomb.png', 12000)]
    for (argv, fn, n), (code, err) in zip(cases, limited(*[c[0] for c in cases])):
        assert code == 2, (argv[0], code, err[-2000:])
        line = one_line(err)
        assert f"Cannot read image {fn}: {n}x{n} is {n*n:,} pixels, more than the limit of {8192*8192:,} (--max-pixels" in line, line

def test_max_pixels_is_one_limit_for_every_reader(trained, tiny, tmp_path, capsys):
    val = sorted((tiny/'val').iterdir())[0]   # 64 x 32: an A|B pair
    for argv in (['translate', '--model', trained/'generator', '--input', val, '--output', tmp_path/'t', '--aligned'],
                 ['evaluate', '--model', trained/'generator', '--data', tiny, '--out', tmp_path/'e'],
                 ['train', '--data', tiny, '--out', tmp_path/'o', *TINY]):
        capsys.readouterr()
        assert run([*argv, '--max-pixels', 1500]) == 2, argv   # the 32 x 32 crops fit, the 64 x 32 files do not
        line = one_line(capsys.readouterr().err)
        assert 'is 2,048 pixels, more than the limit of 1,500 (--max-pixels 2048 raises it' in line, (argv[0], line)
        os.environ.pop('GAN_CALLBACKS_MAX_PIXELS', None)
    assert run(['translate', '--model', trained/'generator', '--input', val, '--output', tmp_path/'t', '--aligned', '--max-pixels', 2048]) == 0
    os.environ.pop('GAN_CALLBACKS_MAX_PIXELS', None)


def test_label_maps_and_photos_of_pix2pixhd_keep_the_pixel_limit(tmp_path):
    "pix2pixHD's label maps and photos are read through the same header check as every other image"
    from gan_callbacks.data.label_maps import LabelMapFile, PhotoFile
    from gan_callbacks.data.images import ImageTooLarge, set_max_pixels
    Image.fromarray(np.zeros((40, 50), np.uint8)).save(tmp_path/'l.png'); Image.new('RGB', (50, 40)).save(tmp_path/'p.png')
    item = (tmp_path/'l.png', None, tmp_path/'p.png')
    try:
        set_max_pixels(1000)
        for read in (LabelMapFile(3), PhotoFile(2)):
            with pytest.raises(OSError, match='is 2,000 pixels, more than the limit of 1,000'): read(item)
        set_max_pixels(2000)
        assert LabelMapFile(3)(item).shape == (1, 40, 50) and PhotoFile(2)(item).shape == (3, 40, 50)
    finally: os.environ.pop('GAN_CALLBACKS_MAX_PIXELS', None)

# --- 6, 11. the app: a limit sized for memory, large uploads tiled, nothing left behind, no server paths in messages

def test_the_app_limits_and_cleans_up(tmp_path, monkeypatch):
    from gan_callbacks.deploy import webapp as A
    from gan_callbacks.deploy.interop import read_generator
    big = png_bomb(tmp_path/'big.png', 3000, 3000, rows=10)   # 9 Mpx: refused by default, from its header
    with pytest.raises(A.AppError, match=r'big\.png is 3000x3000 pixels: more than this app'): A.check_upload(big)
    folder = write_model_folder(ResnetGenerator(ngf=4, n_blocks=1), tmp_path/'m', dict(size=32, test_mode='eval'), sample=False)
    G, s = read_generator(folder, device='cpu')
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path/'server'))
    (tmp_path/'server').mkdir()
    up = tmp_path/'server'/'gradio'/'0123abcd'; up.mkdir(parents=True)
    Image.new('RGB', (40, 24)).save(up/'photo.png')
    outs = [A.translate_upload(G, s, up/'photo.png') for _ in range(12)]
    assert all(Path(o).is_file() for o in outs[-8:])
    assert len([p for p in (tmp_path/'server').iterdir() if p.name.startswith('gan_callbacks_app_')]) == 1   # one folder, not one per request
    assert len(list(Path(outs[-1]).parents[1].iterdir())) <= 8
    (up/'bad.png').write_bytes(b'\x89PNG\r\n\x1a\n' + b'\x00' * 30)
    with pytest.raises(A.AppError) as e: A.translate_upload(G, s, up/'bad.png')
    assert str(up) not in str(e.value) and 'bad.png' in str(e.value)
    # more than a million pixels: tiles, whatever the page chose
    calls = []
    monkeypatch.setattr(A, 'translate_file', lambda *a, tile=None, **k: calls.append(tile))
    Image.new('RGB', (1500, 1000)).save(up/'large.png')
    A.translate_upload(G, s, up/'large.png'); A.translate_upload(G, s, up/'photo.png')
    assert calls == [512, None]


# --- 10. EXIF orientation: read upright, A and B alike, and written upright

def test_exif_orientation_is_applied(trained, tmp_path):
    from gan_callbacks.data.images import open_image, decode_file
    im = Image.new('RGB', (40, 24), (255, 0, 0)); im.paste((0, 0, 255), (0, 0, 20, 24))   # left half blue
    exif = Image.Exif(); exif[0x0112] = 6   # as a phone held upright writes it: shown turned 90 degrees clockwise
    im.save(tmp_path/'phone.jpg', exif=exif, quality=95); im.save(tmp_path/'phone.png', exif=exif)
    for fn in (tmp_path/'phone.jpg', tmp_path/'phone.png'):
        a = np.asarray(open_image(fn))
        t = decode_file(fn)
        t = t.permute(1, 2, 0).numpy() if torch.is_tensor(t) else np.asarray(t)
        assert a.shape == t.shape == (40, 24, 3), fn
        assert a[2, 12, 2] > 200 and a[37, 12, 0] > 200 and np.abs(a.astype(int) - t).max() == 0   # blue on top, as shown
    assert run(['translate', '--model', trained/'generator', '--input', tmp_path/'phone.jpg', '--output', tmp_path/'o']) == 0
    assert Image.open(tmp_path/'o'/'phone.jpg').size == (24, 40)


# --- 12. a model folder follows the umask, as every other output

def test_a_model_folder_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try: folder = write_model_folder(ResnetGenerator(ngf=4, n_blocks=1), tmp_path/'m', sample=False)
    finally: os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o755
    assert {f.name: f.stat().st_mode & 0o777 for f in folder.iterdir()} == {f: 0o644 for f in ('README.md', 'config.json', 'model.safetensors')}


# --- 13. locks taken in one step, with a hint for a live unrelated process; no 16-bit colour PNG written

def test_locks_are_whole_and_say_what_to_do(tiny, tmp_path, capsys):
    import socket
    out = tmp_path/'o'; out.mkdir()
    lock = out/'.gan_callbacks.lock'
    lock.write_text('')   # another run creating its lock this instant
    assert run(['train', '--data', tiny, '--out', out, *TINY]) == 2
    assert 'is being taken by another run' in one_line(capsys.readouterr().err)
    assert lock.read_text() == ''
    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])   # a live process that is no run
    try:
        lock.write_text(json.dumps(dict(pid=p.pid, host=socket.gethostname(), started='2026-01-01 00:00:00', command='gan_callbacks train')))
        assert run(['train', '--data', tiny, '--out', out, *TINY]) == 2
        line = one_line(capsys.readouterr().err)
        assert f'if PID {p.pid} is not that run (process numbers are reused), delete {lock}' in line, line
    finally: p.kill(); p.wait()

def test_the_lock_appears_whole(tmp_path, monkeypatch):
    from gan_callbacks.cli import preflight as checks
    seen, real = [], os.link
    def link(a, b): seen.append(Path(a).read_text()); return real(a, b)
    monkeypatch.setattr(os, 'link', link)
    with checks.run_lock(tmp_path) as fn: assert json.loads(fn.read_text())['pid'] == os.getpid()
    assert len(seen) == 1 and json.loads(seen[0])['pid'] == os.getpid()   # linked into place already written
    assert not list(tmp_path.iterdir())

def test_no_16_bit_colour_png_is_written(tmp_path):
    from gan_callbacks.data.images import write_image
    with pytest.raises(OSError, match='16-bit colour PNG would be read back as 8 bits'): write_image(tmp_path/'c.png', torch.zeros(3, 4, 4), np.uint16)
    assert not (tmp_path/'c.png').exists()
    write_image(tmp_path/'c.tif', torch.zeros(3, 4, 4), np.uint16); write_image(tmp_path/'g.png', torch.zeros(1, 4, 4), np.uint16)


# --- the table of hostile cases in nbs/12b_atomic.ipynb names these tests, and they exist

def test_the_safety_table_is_current():
    import re
    root = Path(__file__).parents[1]
    cells = json.loads((root/'nbs'/'12b_atomic.ipynb').read_text())['cells']
    table = next(''.join(c['source']) for c in cells if c['cell_type'] == 'markdown' and '## Hostile use' in ''.join(c['source']))
    named = set(re.findall(r'`(test_\w+)::(test_\w+)`', table))
    assert named
    for mod, fn in named: assert re.search(rf'^def {fn}\(', (root/'tests'/f'{mod}.py').read_text(), re.M), (mod, fn)
    for mod in ('test_hostile', 'test_nothing_lost'):   # every test of these modules is a row's
        here = set(re.findall(r'^def (test_\w+)\(', (root/'tests'/f'{mod}.py').read_text(), re.M)) - {'test_the_safety_table_is_current'}
        assert here <= {fn for m, fn in named if m == mod}, here - {fn for _, fn in named}

def test_separate_pairs_of_different_sizes_are_one_line(tmp_path, capsys):
    for s in ('train', 'val'):
        for d in 'AB': (tmp_path/'d'/s/d).mkdir(parents=True)
        for i in range(4):
            Image.new('RGB', (32, 32)).save(tmp_path/'d'/s/'A'/f'{i}.png')
            Image.new('RGB', (32, 32) if i < 3 or s == 'val' else (64, 32)).save(tmp_path/'d'/s/'B'/f'{i}.png')
    assert run(['train', '--data', tmp_path/'d', '--out', tmp_path/'o', '--layout', 'separate', *TINY]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{tmp_path/'d'/'train'/'B'/'3.png'} is 64x32, but its A image {tmp_path/'d'/'train'/'A'/'3.png'} is 32x32" in line, line

def test_large_images_go_through_tiles_by_default(trained, tmp_path, monkeypatch):
    from gan_callbacks.deploy import inference
    calls = []
    monkeypatch.setattr(inference, 'run_tiled', lambda G, x, tile, *a: (calls.append(tile), torch.zeros(3, *x.shape[-2:]))[1])
    png_bomb(tmp_path/'uhd.png', 4000, 2200)   # 8.8 Mpx: more than a 4K frame
    Image.new('RGB', (64, 32)).save(tmp_path/'small.png')
    for f in ('uhd.png', 'small.png'):
        assert run(['translate', '--model', trained/'generator', '--input', tmp_path/f, '--output', tmp_path/'o']) == 0
    assert calls == [1024] and Image.open(tmp_path/'o'/'uhd.png').size == (4000, 2200)
    assert run(['translate', '--model', trained/'generator', '--input', tmp_path/'uhd.png', '--output', tmp_path/'o', '--tile', 256, '--overwrite']) == 0
    assert calls == [1024, 256]

def test_nonfinite_patience_counts_epochs_in_a_row(tmp_path):
    from fastai.callback.core import Callback
    from helpers import tiny_learner, fit
    from gan_callbacks.callback.checkpoint import GANCheckpoint, WeightsNotFinite
    class Blip(Callback):
        "Weights not finite at the end of epoch 1 only"
        order = 50
        def after_epoch(self):
            p = next(self.learn.model.parameters())
            if self.epoch == 1: self.kept = p.detach().clone(); p.data.fill_(float('nan'))
        def before_epoch(self):
            if self.epoch == 2: next(self.learn.model.parameters()).data.copy_(self.kept)
    learn = tiny_learner(tmp_path/'a', cbs=[GANCheckpoint(patience=2), Blip()])
    fit(learn, 3)   # one epoch not finite, then finite again: the fit goes on, that epoch unsaved
    assert sorted(p.name for p in (tmp_path/'a'/'models').iterdir()) == ['gan_epoch0.pth', 'gan_epoch2.pth']
    learn = tiny_learner(tmp_path/'b', cbs=[GANCheckpoint(patience=1), Blip()])
    with pytest.raises(WeightsNotFinite, match=f"after epoch 2 of 3: .*the last good checkpoint is {tmp_path/'b'/'models'/'gan_epoch0.pth'}"): fit(learn, 3)


# --- 15. pixels outside the documented range, pages and volumes, headers claiming more than the limit: refused before they are read

def _npy_header(fn, shape):
    with open(fn, 'wb') as f: np.lib.format.write_array_header_1_0(f, {'descr': '<f4', 'fortran_order': False, 'shape': shape})

@pytest.mark.parametrize('make,msg', [
    (lambda fn: np.save(fn.with_suffix('.npy'), np.full((8, 8, 3), np.nan, np.float32)), '192 values are NaN or infinite'),
    (lambda fn: np.save(fn.with_suffix('.npy'), np.full((8, 8, 3), 200, np.float32)), 'float pixels from 200 to 200, expected values in [0, 1]'),
    (lambda fn: __import__('tifffile').imwrite(fn.with_suffix('.tif'), np.zeros((8, 8, 3), np.uint8), photometric='cielab'),
     'its colours are CIELAB: grey or RGB expected'),
    (lambda fn: __import__('tifffile').imwrite(fn.with_suffix('.tif'), np.zeros((400, 96, 96), np.uint8)), 'shape (400, 96, 96): one image'),
    (lambda fn: __import__('tifffile').imwrite(fn.with_suffix('.tif'), np.zeros((10, 64, 64, 3), np.uint8)), 'shape (10, 64, 64, 3): one image'),
    (lambda fn: _npy_header(fn.with_suffix('.npy'), (80000, 80000, 3)), '80000x80000 is 6,400,000,000 pixels, more than the limit'),
])
def test_images_outside_the_documented_range_are_refused(trained, tmp_path, capsys, make, msg):
    src = tmp_path/'in'
    src.mkdir()
    make(src/'x')
    code = run(['translate', '--model', trained/'generator', '--input', next(src.iterdir()), '--output', tmp_path/'out'])
    assert code == 2 and msg in one_line(capsys.readouterr().err)
    assert not (tmp_path/'out').exists() or not any((tmp_path/'out').iterdir())


# --- 16, 17, 18. sizes beyond the pixel limit, options beyond any machine, negative counts: one line before anything is built

@pytest.mark.parametrize('argv,msg', [
    (['train', '--model', 'cyclegan', '--pool-size', '-1'], '--pool-size must be from 0 to 10000, got -1'),
    (['train', '--model', 'cyclegan', '--n-blocks', '1000'], '--n-blocks must be from 0 to 64, got 1000'),
    (['train', '--num-d', '6'], '--num-d 6: at 32 px its coarsest discriminator would judge images of 1 px; at most --num-d 3 here'),
    (['train', '--ngf', '2000'], '--ngf must be at most 1024, got 2000'),
    (['train', '--load-size', '100000'], '--load-size 100000: images of 100000x100000 are 10,000,000,000 pixels, more than the limit'),
    (['translate', '--load-size', '12000'], '--load-size 12000: images of 12000x12000'),
    (['export', '--size', '-32'], '--size must be at least 1 pixel, got -32'),
    (['export', '--batch', '0'], '--batch must be at least 1, got 0'),
    (['export', '--batch', '-1'], '--batch must be at least 1, got -1'),
    (['export', '--size', '30000'], '30000x30000 is more than the limit of 67,108,864 pixels'),
])
def test_sizes_and_counts_out_of_bounds_are_one_line(trained, tiny, tmp_path, capsys, argv, msg):
    cmd, *opts = argv
    tail = dict(train=['--data', tiny, '--out', tmp_path/'o', *TINY], translate=['--model', trained/'generator', '--input', tiny/'val', '--output', tmp_path/'o'],
                export=['--model', trained/'generator', '--format', 'onnx', '--out', tmp_path/'o'/'g.onnx'])[cmd]
    assert run([cmd, *tail, *opts]) == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err and msg in one_line(err), err
    assert not (tmp_path/'o').exists() or not any((tmp_path/'o').rglob('*.*'))   # nothing written

def test_a_fifo_among_the_images_is_skipped(trained, tiny, tmp_path):
    src = tmp_path/'in'
    src.mkdir()
    for f in sorted((tiny/'val').iterdir()): (src/f.name).write_bytes(f.read_bytes())
    os.mkfifo(src/'a.png')   # a reader would wait on it forever
    assert run(['translate', '--model', trained/'generator', '--input', src, '--output', tmp_path/'o', '--aligned']) == 0
    assert sorted(f.name for f in (tmp_path/'o').iterdir()) == sorted(f.name for f in (tiny/'val').iterdir())
    assert run(['translate', '--model', trained/'generator', '--input', src/'a.png', '--output', tmp_path/'o2']) == 2
