"""Run notebooks and store the outputs a reader wants: the pictures (small PNGs, or JPEGs for photographs) and, with --all, every small text output,
without progress bars, warnings or HTML, so the notebooks show their figures on GitHub and on the docs site.

    python tools/run_nb.py nbs/00_your_data.ipynb --all
    python tools/run_nb.py nbs/02b_cyclegan.ipynb --cells 12 15   # only those code cells (0-based among code cells) keep outputs
    python tools/run_nb.py nbs/*.ipynb --refresh                  # store again the outputs of the cells that have them
    python tools/run_nb.py nbs/*.ipynb --check                    # rerun, and fail where a stored text output changed

One thread and seeds 0, so that a run on the same kind of CPU gives the same digits. Another CPU rounds differently
(its kernels block and sum in another order) and a few epochs of GAN training carry that far: each notebook records
the machine its outputs come from, and on any other `--check` compares its floats within a tolerance."""
import argparse, base64, io, os, platform, re, subprocess, sys
os.environ.setdefault('OMP_NUM_THREADS', '1')   # before torch is imported by the notebook
from pathlib import Path
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell
from PIL import Image

bar = re.compile(r'█|\|-{5,}|\d+\.\d+% \[')   # fastprogress bars written as text

def _png(im, fmt='png', **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, optimize=True, **kw)
    return base64.b64encode(buf.getvalue()).decode()

def small_image(data):
    "Output `data` with one picture: the smaller of `small_png` and, for photographs, a JPEG of quality 85"
    png = small_png(''.join(data['image/png']))
    jpg = _png(Image.open(io.BytesIO(base64.b64decode(png))).convert('RGB'), 'jpeg', quality=85)
    rest = {k: v for k, v in data.items() if k not in ('image/png', 'image/jpeg')}   # PIL images also offer a JPEG
    if len(jpg) * 2 > len(png): return rest | {'image/png': png}   # figures of lines and text stay PNG
    return rest | {'image/jpeg': jpg}

def small_png(b64, max_width=1400):
    "PNG `b64`, halved (box filter) while wider than `max_width`, re-encoded with a 256-colour palette when that is smaller"
    im = Image.open(io.BytesIO(base64.b64decode(b64))).convert('RGB')
    cands = [b64]
    if im.width > max_width:
        while im.width > max_width: im = im.reduce(2)
        cands = [_png(im)]
    cands.append(_png(im.quantize(256, dither=Image.Dither.NONE)))
    return min(cands, key=len)

def keep(o, text):
    "Output `o` without progress bars, stderr or HTML; `None` when nothing is left"
    if o['output_type'] == 'stream':
        if o.get('name') == 'stderr' or not text: return None
        lines = [l.split('\r')[-1] for l in ''.join(o['text']).split('\n')]   # what a terminal shows at the end
        t = '\n'.join(l for l in lines if not bar.search(l) and l.strip() != 'I')
        return {**o, 'text': t.strip('\n') + '\n'} if t.strip() else None
    if o['output_type'] in ('display_data', 'execute_result'):
        data = {k: v for k, v in o.get('data', {}).items() if k in ('image/png', 'image/jpeg', 'text/plain')}
        if not {'image/png', 'image/jpeg'} & set(data) and (not text or '<progress' in str(o.get('data', {}).get('text/html', ''))): return None
        if 'text/plain' in data and len(''.join(data['text/plain'])) > 2000 and len(data) == 1: return None
        if 'image/png' in data: data = small_image(data)
        return {**o, 'data': data, 'metadata': {}}
    return None   # errors are not stored

def execute(nb_path):
    "Notebook `nb_path` run as nbdev_test runs it (from its folder), seeded"
    nb_path = Path(nb_path).resolve()
    nb = read_nb(nb_path)
    cwd = os.getcwd()
    os.chdir(nb_path.parent)
    sh = CaptureShell()
    sh.run('import random, numpy, torch; random.seed(0); numpy.random.seed(0); torch.manual_seed(0)')   # the same pictures at every run
    skip = lambda c: c.cell_type == 'code' and re.search(r'^#\|\s*eval:\s*false', c.source, re.M) is not None   # as nbdev_test
    try: sh.run_all(nb, exc_stop=True, preproc=skip)
    finally: os.chdir(cwd)
    return nb

def machine():
    "The kind of machine outputs come from: the CPU's vendor, family and model, and torch's version"
    cpu = {}
    try:
        for l in open('/proc/cpuinfo'):
            k, _, v = l.partition(':')
            if k.strip() in ('vendor_id', 'cpu family', 'model'): cpu.setdefault(k.strip(), v.strip())
    except OSError: pass
    import torch
    return (f"{platform.machine()} {cpu.get('vendor_id', platform.processor() or '?')} family {cpu.get('cpu family', '?')} "
            f"model {cpu.get('model', '?')}, torch {torch.__version__}")

def has_text(c): return any(o['output_type'] == 'stream' or 'text/plain' in o.get('data', {}) for o in c.get('outputs', []))

def run(nb_path, all_text=False, cells=None, refresh=False):
    nb_path = Path(nb_path).resolve()
    if refresh:   # the cells that store outputs now, text where they store text
        was = [c for c in read_nb(nb_path).cells if c.cell_type == 'code']
        cells, texts_in = [i for i, c in enumerate(was) if c.get('outputs')], {i for i, c in enumerate(was) if has_text(c)}
    nb = execute(nb_path)
    code = [c for c in nb.cells if c.cell_type == 'code']
    for i, c in enumerate(code):
        outs = [o for o in (keep(o, i in texts_in if refresh else all_text) for o in c.get('outputs', [])) if o is not None]
        pics = any({'image/png', 'image/jpeg'} & set(o.get('data', {})) for o in outs)
        wanted = (i in cells) if cells is not None else (all_text or pics)
        c['outputs'] = outs if wanted and not c.source.lstrip().startswith('#| hide') else []
        c['execution_count'] = None
        for o in c['outputs']:
            if 'execution_count' in o: o['execution_count'] = None
    nb.metadata['outputs_from'] = machine()   # kept by nbdev_clean (settings.ini's allowed_metadata_keys)
    write_nb(nb, nb_path)
    n = sum(bool(c['outputs']) for c in code)
    print(f"{nb_path.name}: outputs stored in {n} of {len(code)} code cells")

clock = re.compile(r'\b\d+:\d\d\b|\(\d+ s\)')   # the time columns of fastai's tables, a sweep's seconds per run

def texts(outs):
    "The text of `outs` (streams and plain results), times masked, and how many pictures they hold"
    t = [clock.sub('mm:ss', ''.join(o['text']) if o['output_type'] == 'stream' else ''.join(o.get('data', {}).get('text/plain', '')))
         for o in outs if o['output_type'] == 'stream' or 'text/plain' in o.get('data', {})]
    return [x for x in t if x.strip()], sum(bool({'image/png', 'image/jpeg'} & set(o.get('data', {}))) for o in outs)

number = re.compile(r'[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?')
RTOL, ATOL = 0.5, 1e-3   # another CPU: GAN losses and scores of a few tiny epochs seen to drift by up to 40% (d_real)

def close(a, b):
    "Texts `a` and `b` alike but for floats within `RTOL` (relative) or `ATOL` of each other; words and whole numbers equal"
    if number.sub('#', a).split() != number.sub('#', b).split(): return False   # column widths may differ
    for x, y in zip(number.findall(a), number.findall(b)):
        if x == y: continue
        if not re.search(r'[.eE]', x + y): return False
        if abs(float(x) - float(y)) > RTOL * max(abs(float(x)), abs(float(y))) + ATOL: return False
    return True

def check(nb_path):
    "The code cells of `nb_path` whose stored text outputs differ from a fresh run's: [(cell, stored, fresh)]; alike will do on another machine"
    nb = read_nb(nb_path)
    same = lambda x, y: x == y
    if nb.metadata.get('outputs_from') != machine(): same = close
    stored = [c for c in nb.cells if c.cell_type == 'code']
    fresh = [c for c in execute(nb_path).cells if c.cell_type == 'code']
    res = []
    for i, (a, b) in enumerate(zip(stored, fresh)):
        if not a.get('outputs'): continue
        (ta, pa), (tb, pb) = texts(a['outputs']), texts([o for o in (keep(o, True) for o in b.get('outputs', [])) if o is not None])
        rest = iter(tb)   # every stored text is in the fresh run, in order (a cell may have stored only some)
        if not all(any(same(x, y) for y in rest) for x in ta) or pb < pa: res.append((i, ta, tb))
    return res

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('notebooks', nargs='+')
    p.add_argument('--all', action='store_true', help='keep small text outputs too, not only pictures')
    p.add_argument('--cells', type=int, nargs='*', help='only these code cells (0-based) keep their outputs')
    p.add_argument('--refresh', action='store_true', help='store again the outputs of the code cells that store some now')
    p.add_argument('--check', action='store_true', help='store nothing: rerun and report stored text outputs that changed')
    a = p.parse_args()
    if len(a.notebooks) > 1:   # each in a process of its own: a notebook leaves state behind (modules' caches) that changes the next one's run
        opts = ['--all'] * a.all + (['--cells', *map(str, a.cells)] if a.cells is not None else []) + ['--refresh'] * a.refresh + ['--check'] * a.check
        failed = [nb for nb in a.notebooks if subprocess.run([sys.executable, __file__, nb, *opts]).returncode]
        sys.exit(f"{len(failed)} notebook(s) failed: {' '.join(failed)}" if failed else 0)
    nb, = a.notebooks
    if not a.check: sys.exit(run(nb, a.all, a.cells, a.refresh))
    diffs = check(nb)
    for i, was, now in diffs: print(f"{nb}: code cell {i} stored {was!r}\n  a fresh run gives {now!r}")
    sys.exit(f"{len(diffs)} stored outputs differ from a fresh run: rerun `python tools/run_nb.py` on their notebooks" if diffs else 0)
