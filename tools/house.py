"""Draw the library's modules as a house: one row per floor (a module sits one floor above the highest module it
imports), an arrow for each import. `python tools/house.py OUT.png [--rev REV]` draws the code of the working tree,
or of git revision REV."""
import argparse, ast, subprocess
from pathlib import Path

root = Path(__file__).resolve().parent.parent
pkg = 'gan_callbacks'

def _name(path):
    "Module name of a file of the package, relative to it: `gans/pix2pix.py` -> `gans.pix2pix`, `v1/__init__.py` -> `v1`"
    parts = Path(path).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)

def _imports_any(src): return any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(src)))

def sources(rev=None):
    "Module name -> source text of the package's modules (generated helpers and `all` left out), now or at `rev`"
    if rev is None: files = {_name(p.relative_to(root/pkg)): p.read_text() for p in (root/pkg).rglob('*.py')}
    else:
        names = subprocess.run(['git', 'ls-tree', '-r', '--name-only', f'{rev}:{pkg}'], cwd=root, capture_output=True, text=True, check=True).stdout.split()
        files = {_name(n): subprocess.run(['git', 'show', f'{rev}:{pkg}/{n}'], cwd=root, capture_output=True, text=True, check=True).stdout
                 for n in names if n.endswith('.py')}
    wings = {k.split('.')[0] for k in files if '.' in k}
    # left out: generated helpers, `all`, and a wing's `__init__` that only names the wing
    return {k: v for k, v in files.items() if not k.split('.')[-1].startswith('_') and k != 'all' and not (k in wings and not _imports_any(v))}

def imports(srcs):
    "Module -> the package's modules it imports (relative or absolute, at any depth of the file)"
    res = {}
    for m, src in srcs.items():
        deps, is_pkg = set(), m in srcs and any(k.startswith(m + '.') for k in srcs)
        here = m.split('.') if is_pkg else m.split('.')[:-1]   # the package a relative import starts from
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, ast.ImportFrom): continue
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                if node.module: deps.add('.'.join(base + node.module.split('.')))
                else: deps.update('.'.join(base + [a.name]) for a in node.names)
            elif (node.module or '').startswith(pkg + '.'): deps.add(node.module[len(pkg) + 1:])
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
    wings = sorted({m.split('.')[0] for m in deps if '.' in m})
    colours = dict(zip(wings, plt.get_cmap('tab10').colors))   # one colour per wing, grey for the top level
    for m, (x, y) in pos.items():
        ec = colours.get(m.split('.')[0], (0.45, 0.45, 0.45))
        ax.text(x, y, m, ha='center', va='center', fontsize=8, bbox=dict(boxstyle='round', fc=(*ec, 0.15), ec=ec, lw=0.9))
    ax.set_xlim(0, width); ax.set_ylim(-0.6, max(rows) + 0.6); ax.axis('off')
    ax.set_title(f'{title}{len(deps)} modules, {sum(map(len, deps.values()))} imports, {len(rows)} floors', fontsize=10)
    fig.tight_layout(); fig.savefig(fn, dpi=56); plt.close(fig)
    from PIL import Image
    with Image.open(fn) as im: small = im.convert('RGB').quantize(32)   # a few colours: a light picture in the repository
    small.save(fn, optimize=True)

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument('out'); p.add_argument('--rev', default=None); p.add_argument('--title', default='')
    a = p.parse_args()
    draw(imports(sources(a.rev)), a.out, a.title)
