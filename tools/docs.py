"""Build the documentation site into _docs/: README.md as the home page, every notebook of nbs/ as a page
(prose, code, stored outputs), an API page per module (signatures and docstrings), in the order a reader needs."""
import ast, os, re, shutil, subprocess, sys
from pathlib import Path
import yaml
from execnb.nbio import read_nb, write_nb

root = Path(__file__).resolve().parent.parent

# Sections in reading order, by notebook number: the numbers are the reading order, so the navigation follows them.
# A notebook whose number no section names is kept too, under "More", so every notebook is a page.
sections = [
    ('Get started', ['00', '01']),
    ('The four GANs', ['02']),
    ('Networks and losses', ['03']),
    ('Data', ['04']),
    ('Stabilizers', ['05']),
    ('Writing a trainer', ['06']),
    ('Callbacks', ['07']),
    ('Metrics', ['08']),
    ('Deployment', ['09']),
    ('The command line', ['10']),
    ('Porting v1 code', ['11']),
    ('Developing', ['12']),
]

def title(nb):
    "The notebook's `# heading`, else its name"
    for c in nb.cells:
        if c.cell_type == 'markdown' and (m := re.match(r'#\s+(.+)', c.source.strip())): return m.group(1).strip()
    return None

def page_names(nbs):
    "Map every link target a notebook may use (`02b_cyclegan.ipynb`, nbdev's `cyclegan.html`) to its page"
    res = {'index.ipynb': 'index.html'}   # nbs/index.ipynb is the README, the home page
    for p in nbs:
        res[p.name] = res[p.stem + '.html'] = res[re.sub(r'^\d+[a-z]?_', '', p.stem) + '.html'] = p.stem + '.html'
    return res

def clean_nb(src, dest, pages):
    "Copy notebook `src` to `dest` without hidden cells and `#|` directives, its links to other notebooks made page links"
    nb = read_nb(src)
    cells = []
    for c in nb.cells:
        s = c.source
        if c.cell_type == 'code':
            if re.match(r'\s*#\|\s*hide', s): continue
            s = '\n'.join(l for l in s.splitlines() if not l.lstrip().startswith('#|')).strip('\n')
            if not s and not c.get('outputs'): continue
        else:
            # headings without code spans: the page's table of contents and the headings' ids then agree
            s = re.sub(r'^(#+ .*)$', lambda m: m.group(1).replace('`', ''), s, flags=re.M)
            s = re.sub(r'\]\(([\w.-]+\.(?:html|ipynb))(#[\w-]*)?\)', lambda m: f"]({pages.get(m.group(1), m.group(1))}{m.group(2) or ''})", s)
        c['source'] = s
        cells.append(c)
    nb['cells'] = cells
    write_nb(nb, dest)
    return title(nb) or src.stem

def modules():
    "Module name -> the notebook it is exported from (`#| default_exp`)"
    res = {}
    for p in sorted((root/'nbs').glob('*.ipynb')):
        for c in read_nb(p).cells:
            if c.cell_type == 'code' and (m := re.match(r'#\|\s*default_exp\s+(\S+)', c.source.strip())): res[m.group(1)] = p.name
    return res

def own_names(mod):
    "The names of `gan_callbacks.<mod>.__all__` defined there (re-exports are documented where defined), and its `@patch`es"
    tree = ast.parse((root/'gan_callbacks'/(mod.replace('.', '/') + '.py')).read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    exported = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == '__all__' for t in n.targets)), [])
    patched = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith('_') and n.args.args
               and any(getattr(d, 'id', None) == 'patch' for d in n.decorator_list)   # methods added to fastai's classes
               and getattr(n.args.args[0].annotation, 'id', None) not in defined]
    return [n for n in exported if n in defined] + [n for n in patched if n not in exported]

def make_nav(titles):
    "The site's navigation: the home page and the notebooks (name -> title) in number order under their `sections`, the rest under 'More'"
    nav, left = [], sorted(titles)
    for name, nums in sections:
        got = [s for s in left if re.match(r'\d+', s) and re.match(r'\d+', s).group() in nums]
        if name == 'Get started': got = ['index.md'] + got
        left = [s for s in left if s not in got]
        if got: nav.append({name: [{'Home': o} if o.endswith('.md') else {titles[o]: f'{o}.ipynb'} for o in got]})
    if left: nav.append({'More': [{titles[o]: f'{o}.ipynb'} for o in left]})
    return nav

def build(strict=True):
    work = root/'_proc'/'docs'
    shutil.rmtree(work, ignore_errors=True)
    src = work/'src'
    (src/'api').mkdir(parents=True)
    shutil.copytree(root/'nbs'/'images', src/'images')
    (src/'index.md').write_text((root/'README.md').read_text().replace('](nbs/', ']('))   # the notebooks' pages and pictures
    nbs = [p for p in sorted((root/'nbs').glob('*.ipynb')) if p.stem != 'index']
    pages = page_names(nbs)
    titles = {p.stem: clean_nb(p, src/p.name, pages) for p in nbs}
    nav = make_nav(titles)
    api = []
    for mod, nb in sorted(modules().items(), key=lambda o: o[1]):
        if mod in ('all', '__main__') or mod.endswith('__init__') or not (names := own_names(mod)): continue
        (src/'api'/f'{mod}.md').write_text(f"# gan_callbacks.{mod}\n\nThe public names of `gan_callbacks.{mod}`, "
                                           f"made from the notebook [{titles.get(Path(nb).stem, nb)}](../{nb}).\n\n"
                                           f"::: gan_callbacks.{mod}\n    options:\n      show_root_heading: false\n      members: {names}\n")
        api.append({f'gan_callbacks.{mod}': f'api/{mod}.md'})
    nav.append({'API': api})
    cfg = yaml.safe_load((root/'mkdocs.yml').read_text())
    cfg.update(docs_dir=str(src), site_dir=str(root/'_docs'), nav=nav)
    for p in cfg['plugins']:
        if isinstance(p, dict) and 'mkdocstrings' in p: p['mkdocstrings']['handlers']['python']['paths'] = [str(root)]
        if isinstance(p, dict) and 'mkdocs-jupyter' in p: p['mkdocs-jupyter']['cache_dir'] = str(work/'cache')
    (work/'mkdocs.yml').write_text(yaml.safe_dump(cfg, sort_keys=False))
    os.environ.setdefault('NO_MKDOCS_2_WARNING', '1')
    cmd = [sys.executable, '-m', 'mkdocs', 'build', '--clean', '-f', str(work/'mkdocs.yml')] + (['--strict'] if strict else [])
    sys.exit(subprocess.run(cmd).returncode)

if __name__ == '__main__': build(strict='--no-strict' not in sys.argv)
