"The package's plan: wings with an `__init__`, one home per name, every public name in `all`, imports one way only."
import ast, importlib, sys
from pathlib import Path

root = Path(__file__).parent.parent
pkg = root/'gan_callbacks'
sys.path.insert(0, str(root/'tools'))

def modules():
    "Module name (`gans.pix2pix`) -> its parsed source, generated helpers and `__main__` left out"
    res = {}
    for p in sorted(pkg.rglob('*.py')):
        parts = p.relative_to(pkg).with_suffix('').parts
        if parts[-1] in ('_modidx', '__main__'): continue
        res['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = ast.parse(p.read_text())
    return res

def defined(tree):
    "The names a module's top level defines"
    res = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): res.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                res |= {e.id for e in ast.walk(t) if isinstance(e, ast.Name)}
    return res

def exported(tree):
    "The names of a module's literal `__all__`"
    return [x for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.List)
            and any(getattr(t, 'id', None) == '__all__' for t in n.targets) for x in ast.literal_eval(n.value)]

mods = modules()
wings = sorted({m.split('.')[0] for m in mods if '.' in m})
faces = {'all', *wings}   # the modules that may gather other modules' names

def test_every_wing_is_a_package():
    assert wings == ['callback', 'cli', 'data', 'deploy', 'gans', 'metrics', 'nets', 'stabilizers', 'trainer', 'v1']
    assert all((pkg/w/'__init__.py').exists() for w in wings)

def test_no_module_exports_a_name_it_does_not_define():
    bad = {m: [n for n in exported(t) if n not in defined(t)] for m, t in mods.items() if m not in faces}
    assert {m: ns for m, ns in bad.items() if ns} == {}

def test_the_library_imports_each_name_from_its_home():
    "A relative import names the module that defines the name (or a submodule), never one that imported it"
    bad = []
    for m, tree in mods.items():
        here = m.split('.') if m in wings else m.split('.')[:-1]
        for n in ast.walk(tree):
            if not (isinstance(n, ast.ImportFrom) and n.level and n.module): continue
            src = '.'.join(here[:len(here) - (n.level - 1)] + n.module.split('.'))
            if src in faces or src not in mods: continue
            bad += [f'{m}: {a.name} from {src}' for a in n.names if a.name != '*' and a.name not in defined(mods[src])
                    and f'{src}.{a.name}' not in mods]
    assert bad == []

def test_names_that_mislead_are_gone():
    leaves = {m.split('.')[-1] for m in mods}
    assert not leaves & {'test_time', 'core', 'generator', 'gan', 'steps', 'checks', 'safety', 'guard', 'app'}

def test_all_brings_every_public_name():
    "`from gan_callbacks.all import *`: every module's `__all__` but `internals`' and the v1 wing's, and no module objects"
    import gan_callbacks.all as everything
    want = {n for m, t in mods.items() if m not in faces and m != 'internals' and not m.startswith('v1.') for n in exported(t)}
    assert sorted(want - set(everything.__all__)) == []
    ns = {}
    exec('from gan_callbacks.all import *', ns)
    assert not [k for k, v in ns.items() if type(v).__name__ == 'module' and v.__name__.startswith('gan_callbacks')]

def test_v1_brings_the_bridge_the_port_and_fastai():
    ns = {}
    exec('from gan_callbacks.v1 import *', ns)
    from gan_callbacks.v1.bridge import StateDictCallback
    want = {n for m in ('v1.bridge', 'v1.port') for n in exported(mods[m])}
    assert want <= set(ns) and ns['Callback'] is StateDictCallback and 'Learner' in ns and 'optim' in ns

def test_imports_run_one_way():
    "No import cycle between modules, and no module of the library imports `all`"
    from house import imports, sources, floors
    deps = imports(sources())
    floors(deps)   # raises on a cycle
    assert not [m for m, ds in deps.items() if 'all' in ds]

def test_command_line_entry_point():
    "The console script and `python -m gan_callbacks` reach the parser's `main`"
    ini = (root/'settings.ini').read_text()
    assert 'console_scripts = gan_callbacks=gan_callbacks.cli.parser:main' in ini
    assert callable(importlib.import_module('gan_callbacks.cli.parser').main)

def test_no_test_module_imports_another():
    "What tests share lives in `helpers` and `conftest`, never in another test module"
    bad = []
    for p in sorted((root/'tests').glob('test_*.py')):
        for n in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ''] if isinstance(n, ast.ImportFrom) else []
            bad += [f'{p.name}: {m}' for m in names if m.split('.')[0].startswith('test_')]
    assert bad == []
