"Model folders (model.safetensors, config.json, README.md): written by `export` and `train`, read without unpickling anything."
import json, pickle
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from gan_callbacks.cli.parser import main
from gan_callbacks.data.samples import sample_pairs, sample_unpaired
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator
from gan_callbacks.deploy.interop import export_generator, load_generator, read_generator
from gan_callbacks.deploy.model_folder import write_model_folder
from gan_callbacks.trainer.test_mode import run_generator
from gan_callbacks.deploy.state_dicts import InteropError
from helpers import run_cli as run



@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    data = sample_pairs(tmp_path_factory.mktemp('home')/'sample', n_train=8, n_valid=2, size=32)
    out = tmp_path_factory.mktemp('run')
    assert run(['train', '--data', data, '--out', out, '--epochs', 1, '--epochs-decay', 0, '--bs', 4,
                '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--n-samples', 2, '--seed', 0]) == 0
    return data, out

def translated(model, inp, out, *args):
    torch.manual_seed(0)   # the paper's test mode keeps dropout on
    assert run(['translate', '--model', model, '--input', inp, '--output', out, *args, *(['--trust-pickle'] if str(model).endswith('.pkl') else [])]) == 0
    return {f.name: np.asarray(Image.open(f)) for f in sorted(Path(out).iterdir())}


def test_train_writes_a_folder_that_translates_as_the_pickle(trained, tmp_path):
    data, out = trained
    folder = out/'generator'
    assert sorted(f.name for f in folder.iterdir()) == ['README.md', 'config.json', 'model.safetensors', 'sample.png']
    cfg = json.loads((folder/'config.json').read_text())
    assert (cfg['architecture'], cfg['model_type'], cfg['in_ch'], cfg['out_ch'], cfg['size'], cfg['test_mode']) == \
           ('UnetGenerator', 'pix2pix', 3, 3, 32, 'paper')
    assert cfg['args'] == dict(in_ch=3, out_ch=3, num_downs=5, ngf=8, norm='batch', use_dropout=False)   # depth 5: no dropout layers
    assert cfg['training']['crop_size'] == 32 and cfg['training']['lr'] == 2e-4 and cfg['training']['seed'] == 0
    assert cfg['scores']['final_valid_l1'] == json.loads((out/'summary.json').read_text())['final_valid_l1']
    assert cfg['normalization'] == dict(range=[-1.0, 1.0], mean=0.5, std=0.5, bit_depth=8)
    card = (folder/'README.md').read_text()
    assert card.startswith('---\nlibrary_name: gan_callbacks\n') and '![' in card and 'upload_folder(' in card and 'final_valid_l1' in card
    a = translated(out/'generator.pkl', data/'val', tmp_path/'pkl')
    b = translated(folder, data/'val', tmp_path/'folder')
    assert a.keys() == b.keys() and len(a) == 2
    for k in a: np.testing.assert_array_equal(a[k], b[k])

def test_export_load_translate_is_bitwise_the_original(trained, tmp_path, capsys):
    data, out = trained
    assert run(['export', '--trust-pickle', '--model', out/'generator.pkl', '--format', 'folder', '--out', tmp_path/'my-model']) == 0
    assert 'Wrote' in capsys.readouterr().out
    cfg = json.loads((tmp_path/'my-model'/'config.json').read_text())
    assert cfg['scores']['final_valid_l1'] > 0 and cfg['size'] == 32   # the summary beside the file, the training size
    G0, G1 = load_generator(out/'generator.pkl', device='cpu', trust_pickle=True), load_generator(tmp_path/'my-model', device='cpu')
    assert G0.state_dict().keys() == G1.state_dict().keys()
    for k, v in G0.state_dict().items(): assert torch.equal(v, G1.state_dict()[k]), k
    x = torch.randn(2, 3, 64, 96)
    for mode in ('eval', 'paper'):
        torch.manual_seed(1); y0 = run_generator(G0, x, mode)
        torch.manual_seed(1); y1 = run_generator(G1, x, mode)
        assert torch.equal(y0, y1)
    a = translated(out/'generator.pkl', data/'val', tmp_path/'a')
    b = translated(tmp_path/'my-model', data/'val', tmp_path/'b')
    for k in a: np.testing.assert_array_equal(a[k], b[k])


class RunsCode:
    "Unpickling this creates the file `path`"
    def __init__(self, path): self.path = str(path)
    def __reduce__(self): return (open, (self.path, 'w'))

def test_loading_a_folder_never_unpickles(tmp_path, monkeypatch):
    G = UnetGenerator(num_downs=5, ngf=4).eval()
    folder = write_model_folder(G, tmp_path/'m', dict(size=32, test_mode='eval'), sample=False)
    marker = tmp_path/'code_ran'
    (folder/'generator.pkl').write_bytes(pickle.dumps(RunsCode(marker)))
    torch.save({'model.model.0.weight': RunsCode(marker)}, folder/'pytorch_model.bin')
    torch.save(RunsCode(marker), folder/'model.pth')
    pickle.loads((folder/'generator.pkl').read_bytes()); assert marker.exists()   # the files do run code when unpickled
    marker.unlink()
    def refuse(*a, **k): raise AssertionError('unpickling while loading a model folder')
    for mod, name in ((pickle, 'load'), (pickle, 'loads'), (pickle, 'Unpickler'), (torch, 'load')): monkeypatch.setattr(mod, name, refuse)
    G2, s = read_generator(folder, device='cpu')
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(run_generator(G2, x), run_generator(G, x)) and s['size'] == 32
    monkeypatch.undo()
    out = tmp_path/'out'; Image.new('RGB', (32, 32), 'red').save(tmp_path/'in.png')
    assert run(['translate', '--model', folder, '--input', tmp_path/'in.png', '--output', out]) == 0
    assert (out/'in.png').is_file() and not marker.exists()

def test_cyclegan_folder_keeps_both_directions(tmp_path):
    data = sample_unpaired(tmp_path/'u', n_train=4, n_test=2, size=32)
    out = tmp_path/'run'
    assert run(['train', '--model', 'cyclegan', '--data', data, '--out', out, '--epochs', 1, '--epochs-decay', 0, '--bs', 2,
                '--load-size', 32, '--crop-size', 32, '--ngf', 4, '--n-blocks', 1, '--n-samples', 2, '--seed', 0]) == 0
    cfg = json.loads((out/'generator'/'config.json').read_text())
    assert cfg['architecture'] == 'CycleGANModel' and set(cfg['networks']) == {'g_a', 'g_b'} and cfg['directions'] == ['AtoB', 'BtoA']
    for d in ('AtoB', 'BtoA'):
        a = translated(out/'generator.pkl', data/'testA', tmp_path/f'p{d}', '--direction', d)
        b = translated(out/'generator', data/'testA', tmp_path/f'f{d}', '--direction', d)
        for k in a: np.testing.assert_array_equal(a[k], b[k])

@pytest.mark.parametrize('edit, msg', [
    (lambda f: (f/'config.json').unlink(), 'no config.json, so not a model folder'),
    (lambda f: (f/'config.json').write_text('{'), 'config.json: not a JSON file'),
    (lambda f: (f/'config.json').write_text(json.dumps(dict(json.loads((f/'config.json').read_text()), architecture='os.system'))),
     "architecture 'os.system' is none of"),
    (lambda f: (f/'config.json').write_text(json.dumps({**json.loads((f/'config.json').read_text()), 'args': dict(ngf=5)})),
     'does not fit'),
    (lambda f: (f/'model.safetensors').write_bytes(b'\x00' * 20), 'cannot read it as safetensors'),
])
def test_broken_folders_name_what_is_wrong(edit, msg, tmp_path, capsys):
    folder = write_model_folder(ResnetGenerator(ngf=4, n_blocks=1), tmp_path/'m', sample=False)
    edit(folder)
    with pytest.raises(InteropError, match=msg): load_generator(folder, device='cpu')
    Image.new('RGB', (32, 32)).save(tmp_path/'in.png')
    assert run(['translate', '--model', folder, '--input', tmp_path/'in.png', '--output', tmp_path/'o']) == 2
    assert msg.split(' ')[0] in capsys.readouterr().err

def test_folder_is_replaced_only_when_it_is_a_model_folder(tmp_path):
    G = ResnetGenerator(ngf=4, n_blocks=1)
    (tmp_path/'mine').mkdir(); (tmp_path/'mine'/'notes.txt').write_text('keep')
    with pytest.raises(InteropError, match='holds other files'): write_model_folder(G, tmp_path/'mine', sample=False)
    assert (tmp_path/'mine'/'notes.txt').read_text() == 'keep'
    write_model_folder(G, tmp_path/'m', sample=False)
    write_model_folder(ResnetGenerator(ngf=8, n_blocks=1), tmp_path/'m', sample=False)   # a model folder: replaced whole
    assert json.loads((tmp_path/'m'/'config.json').read_text())['args']['ngf'] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ['m', 'mine']
