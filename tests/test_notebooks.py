"The notebooks store the outputs that make their point, and only those: no progress bars, warnings, tracebacks or big pictures."
import base64, json, re
from pathlib import Path
import pytest

root = Path(__file__).parent.parent
notebooks = sorted(p for p in (root/'nbs').glob('*.ipynb') if p.stem != 'index')
# the pages a reader looks at for pictures: the trainers, data, models, metrics, loggers and inference
with_pictures = ['00_your_data', '02a_pix2pix', '03a_networks', '02b_cyclegan', '02c_cut', '02d_pix2pixhd', '04a_folders',
                 '07c_grids', '07b_loggers', '08a_scores', '09a_inference']
max_picture = 100_000   # bytes, each stored picture
bar = re.compile(r'█|\|-{5,}|\d+\.\d+% \[|<progress')
local_path = re.compile(r'/(tmp|work|home|root)/\S')

def outputs(p):
    "Every stored output of notebook `p`"
    return [o for c in json.loads(p.read_text())['cells'] if c['cell_type'] == 'code' for o in c.get('outputs', [])]

def text_of(o):
    if o['output_type'] == 'stream': return ''.join(o['text'])
    return ''.join(o.get('data', {}).get('text/plain', '')) + ''.join(o.get('data', {}).get('text/markdown', ''))

def pictures(p): return [o['data'][k] for o in outputs(p) for k in ('image/png', 'image/jpeg') if k in o.get('data', {})]

@pytest.mark.parametrize('p', notebooks, ids=lambda p: p.stem)
def test_stores_an_output(p):
    assert outputs(p), f"{p.name} stores no output: run `python tools/run_nb.py nbs/{p.name} --all`"

@pytest.mark.parametrize('p', notebooks, ids=lambda p: p.stem)
def test_stores_no_noise(p):
    for o in outputs(p):
        assert o['output_type'] != 'error', f"{p.name} stores a traceback"
        assert not (o['output_type'] == 'stream' and o.get('name') == 'stderr'), f"{p.name} stores stderr: {text_of(o)[:200]}"
        t = text_of(o) + ''.join(o.get('data', {}).get('text/html', ''))
        assert not bar.search(t), f"{p.name} stores a progress bar"
        assert 'Warning' not in t, f"{p.name} stores a warning: {t[:200]}"
        assert not local_path.search(t), f"{p.name} stores a path of this machine: {local_path.search(t).group()}"

@pytest.mark.parametrize('p', notebooks, ids=lambda p: p.stem)
def test_pictures_are_small(p):
    assert all(len({'image/png', 'image/jpeg'} & set(o.get('data', {}))) <= 1 for o in outputs(p)), f"{p.name} stores a picture twice"
    for b64 in pictures(p):
        n = len(base64.b64decode(''.join(b64)))
        assert n <= max_picture, f"{p.name} stores a {n // 1000} KB picture (budget {max_picture // 1000} KB)"

@pytest.mark.parametrize('name', with_pictures)
def test_pages_readers_look_at_show_pictures(name):
    assert pictures(root/'nbs'/f'{name}.ipynb'), f"{name}.ipynb stores no picture"

def test_nbdev_clean_keeps_the_outputs():
    "nbdev_clean, as `make` and the repository's settings run it, leaves the stored outputs alone"
    import configparser
    clean = pytest.importorskip('nbdev.clean')
    cfg = configparser.ConfigParser(); cfg.read(root/'settings.ini')
    nb = json.loads((root/'nbs'/'02a_pix2pix.ipynb').read_text())
    before = [c.get('outputs') for c in nb['cells']]
    clean.clean_nb(nb, clear_all=cfg.getboolean('DEFAULT', 'clear_all'), clean_ids=cfg.getboolean('DEFAULT', 'clean_ids'))
    assert [c.get('outputs') for c in nb['cells']] == before and any(before)

def run_nb_module():
    "tools/run_nb.py as a module, without its one-thread default for this process"
    import importlib.util, os
    pytest.importorskip('execnb')
    old = os.environ.get('OMP_NUM_THREADS')
    spec = importlib.util.spec_from_file_location('run_nb', root/'tools'/'run_nb.py')
    m = importlib.util.module_from_spec(spec)
    try: spec.loader.exec_module(m)
    finally:
        if old is None: os.environ.pop('OMP_NUM_THREADS', None)
        else: os.environ['OMP_NUM_THREADS'] = old
    return m

def test_outputs_from_another_machine_compare_alike():
    "On another CPU `make nbcheck` takes the same text with floats within 50%; a changed word, count or far float still fails"
    close = run_nb_module().close
    stored = 'epoch  train_loss  d_real\n0      0.501666    0.720975\nbest PSNR 20.86 dB after epoch 5 of 5'
    assert close(stored, 'epoch  train_loss  d_real\n0      0.50170     0.993793\nbest PSNR 21.64 dB after epoch 5 of 5')
    for changed in ('epoch  train_loss  d_fake\n0      0.501666    0.720975\nbest PSNR 20.86 dB after epoch 5 of 5',
                    'epoch  train_loss  d_real\n0      0.501666    0.720975\nbest PSNR 20.86 dB after epoch 4 of 5',
                    'epoch  train_loss  d_real\n0      1.2         0.720975\nbest PSNR 20.86 dB after epoch 5 of 5',
                    'epoch  train_loss  d_real\n0      0.501666    0.720975  0.5\nbest PSNR 20.86 dB after epoch 5 of 5'):
        assert not close(stored, changed), changed

@pytest.mark.parametrize('p', notebooks, ids=lambda p: p.stem)
def test_stored_outputs_say_where_they_come_from(p):
    "Each notebook with outputs names the machine they came from, and nbdev_clean with settings.ini's keys keeps it"
    import configparser
    clean = pytest.importorskip('nbdev.clean')
    if not outputs(p): return
    nb = json.loads(p.read_text())
    assert nb['metadata'].get('outputs_from'), f"{p.name}: run `python tools/run_nb.py {p.relative_to(root)} --refresh`"
    cfg = configparser.ConfigParser(); cfg.read(root/'settings.ini')
    clean.clean_nb(nb, allowed_metadata_keys=cfg.get('DEFAULT', 'allowed_metadata_keys').split())
    assert nb['metadata'].get('outputs_from')
