"""Draw the library's modules as a house: one row per floor (a module sits one floor above the highest module it
imports), an arrow for each import. `python tools/house.py OUT.png [--rev REV]` draws the code of the working tree,
or of git revision REV."""
import argparse, ast, subprocess
from pathlib import Path

root = Path(__file__).resolve().parent.parent
pkg = 'gan_callbacks'

def sources(rev=None):
    "Module name -> source text of the package's modules (generated helpers and `all` left out), now or at `rev`"
    if rev is None: files = {p.stem: p.read_text() for p in (root/pkg).glob('*.py')}
    else:
        names = subprocess.run(['git', 'ls-tree', '--name-only', f'{rev}:{pkg}'], cwd=root, capture_output=True, text=True, check=True).stdout.split()
        files = {Path(n).stem: subprocess.run(['git', 'show', f'{rev}:{pkg}/{n}'], cwd=root, capture_output=True, text=True, check=True).stdout
                 for n in names if n.endswith('.py')}
    return {k: v for k, v in files.items() if not k.startswith('_') and k != 'all'}

def imports(srcs):
    "Module -> the package's modules it imports (relative or absolute, at any depth of the file)"
    res = {}
    for m, src in srcs.items():
        deps = set()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ''
                if node.level == 1 and mod: deps.add(mod.split('.')[0])
                elif node.level == 1: deps.update(a.name for a in node.names)
                elif mod.startswith(pkg + '.'): deps.add(mod.split('.')[1])
        res[m] = sorted(d for d in deps if d in srcs and d != m)
    return res

def floors(deps):
    "Module -> its floor: 0 for a module importing none of the others, else one above its highest import"
    fl = {}
    def f(m, seen=()):
        if m in seen: raise ValueError(f"import cycle through {' -> '.join((*seen, m))}")
        if m not in fl: fl[m] = 1 + max((f(d, (*seen, m)) for d in deps[m]), default=-1)
        return fl[m]
    for m in deps: f(m)
    return fl

def draw(deps, fn, title=''):
    "The house of `deps` as a picture in `fn`"
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fl = floors(deps)
    rows = {}
    for m in sorted(deps): rows.setdefault(fl[m], []).append(m)
    width = max(len(r) for r in rows.values())
    pos = {m: ((i + 0.5) * width / len(r), f) for f, r in rows.items() for i, m in enumerate(r)}
    fig, ax = plt.subplots(figsize=(1.45 * width + 1, 0.62 * len(rows) + 1))
    for m, ds in deps.items():
        for d in ds:
            (x0, y0), (x1, y1) = pos[m], pos[d]
            ax.annotate('', (x1, y1 + 0.18), (x0, y0 - 0.18), arrowprops=dict(arrowstyle='->', color='0.75', lw=0.6))
    for m, (x, y) in pos.items():
        ax.text(x, y, m, ha='center', va='center', fontsize=8, bbox=dict(boxstyle='round', fc='#e8f0fe', ec='#4a6fa5', lw=0.8))
    ax.set_xlim(0, width); ax.set_ylim(-0.6, max(rows) + 0.6); ax.axis('off')
    ax.set_title(f'{title}{len(deps)} modules, {sum(map(len, deps.values()))} imports, {len(rows)} floors', fontsize=10)
    fig.tight_layout(); fig.savefig(fn, dpi=56); plt.close(fig)
    from PIL import Image
    with Image.open(fn) as im: small = im.convert('RGB').quantize(16)   # a few colours: a light picture in the repository
    small.save(fn, optimize=True)

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument('out'); p.add_argument('--rev', default=None); p.add_argument('--title', default='')
    a = p.parse_args()
    draw(imports(sources(a.rev)), a.out, a.title)
