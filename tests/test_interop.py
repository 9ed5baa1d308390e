"Loading reference-layout generator files, translating with them, and exporting ours (reference state dicts, ONNX)."
import pickle
from collections import OrderedDict
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator, PatchDiscriminator
from gan_callbacks.deploy.interop import load_generator, read_generator, export_reference, export_onnx, check_onnx, reference_options
from gan_callbacks.deploy.state_dicts import InteropError
from gan_callbacks.cli.parser import main
from gan_callbacks.deploy.inference import from_pil, to_pil
from helpers import run_cli as run

# --- reference-layout state dicts, written from the reference's published key layout ----------------------------------
# (`UnetSkipConnectionBlock`s nested at index 1 of the outermost block and 3 of the others; `ResnetGenerator` one flat
# Sequential with `ResnetBlock.conv_block`s from index 10.) Convolutions have a bias only with instance norm, except the
# last layer's; BatchNorm has weight, bias and running statistics; instance norm (affine=False) nothing, unless the file
# predates PyTorch 0.4 (`old_in`): then it has running_mean/var, which the reference's loader drops.

def _conv(sd, k, shape, bias):
    sd[f'{k}.weight'] = torch.randn(*shape) * 0.05
    if bias: sd[f'{k}.bias'] = torch.randn(shape[0]) * 0.05

def _norm(sd, k, ch, norm, old_in):
    if norm == 'batch':
        sd[f'{k}.weight'], sd[f'{k}.bias'] = 1 + torch.randn(ch) * 0.1, torch.randn(ch) * 0.1
        sd[f'{k}.running_mean'], sd[f'{k}.running_var'] = torch.randn(ch) * 0.1, torch.rand(ch) + 0.5
        sd[f'{k}.num_batches_tracked'] = torch.tensor(7)
    elif old_in: sd[f'{k}.running_mean'], sd[f'{k}.running_var'] = torch.zeros(ch), torch.ones(ch)

def unet_ref_sd(num_downs, ngf, norm, in_ch=3, out_ch=3, old_in=False):
    sd, b = OrderedDict(), norm == 'instance'
    chans = [(out_ch, ngf, in_ch), (ngf, ngf*2, ngf), (ngf*2, ngf*4, ngf*2), (ngf*4, ngf*8, ngf*4)] + [(ngf*8, ngf*8, ngf*8)] * (num_downs-4)
    for lvl, (outer, inner, inp) in enumerate(chans):
        p = 'model.model.' + ('1.model.' if lvl else '') + '3.model.' * max(lvl-1, 0)
        if lvl == 0:
            _conv(sd, p+'0', (inner, inp, 4, 4), b)
            sd[p+'3.weight'], sd[p+'3.bias'] = torch.randn(inner*2, outer, 4, 4) * 0.05, torch.randn(outer) * 0.05
        elif lvl == num_downs - 1:   # innermost: no norm after the down conv, no skip below
            _conv(sd, p+'1', (inner, outer, 4, 4), b)
            sd[p+'3.weight'] = torch.randn(inner, outer, 4, 4) * 0.05
            if b: sd[p+'3.bias'] = torch.randn(outer) * 0.05
            _norm(sd, p+'4', outer, norm, old_in)
        else:
            _conv(sd, p+'1', (inner, outer, 4, 4), b); _norm(sd, p+'2', inner, norm, old_in)
            sd[p+'5.weight'] = torch.randn(inner*2, outer, 4, 4) * 0.05
            if b: sd[p+'5.bias'] = torch.randn(outer) * 0.05
            _norm(sd, p+'6', outer, norm, old_in)
    return OrderedDict(sorted(sd.items()))   # order does not matter to a state dict

def resnet_ref_sd(n_blocks, ngf, norm, in_ch=3, out_ch=3, old_in=False, dropout=False):
    sd, b = OrderedDict(), norm == 'instance'
    _conv(sd, 'model.1', (ngf, in_ch, 7, 7), b); _norm(sd, 'model.2', ngf, norm, old_in)
    _conv(sd, 'model.4', (ngf*2, ngf, 3, 3), b); _norm(sd, 'model.5', ngf*2, norm, old_in)
    _conv(sd, 'model.7', (ngf*4, ngf*2, 3, 3), b); _norm(sd, 'model.8', ngf*4, norm, old_in)
    for i in range(10, 10 + n_blocks):
        c2 = 6 if dropout else 5
        _conv(sd, f'model.{i}.conv_block.1', (ngf*4, ngf*4, 3, 3), b); _norm(sd, f'model.{i}.conv_block.2', ngf*4, norm, old_in)
        _conv(sd, f'model.{i}.conv_block.{c2}', (ngf*4, ngf*4, 3, 3), b); _norm(sd, f'model.{i}.conv_block.{c2+1}', ngf*4, norm, old_in)
    n = 10 + n_blocks
    for j, (ci, co) in enumerate([(ngf*4, ngf*2), (ngf*2, ngf)]):   # ConvTranspose2d weights are (in, out, k, k)
        sd[f'model.{n+3*j}.weight'] = torch.randn(ci, co, 3, 3) * 0.05
        if b: sd[f'model.{n+3*j}.bias'] = torch.randn(co) * 0.05
        _norm(sd, f'model.{n+3*j+1}', co, norm, old_in)
    _conv(sd, f'model.{n+7}', (out_ch, ngf, 7, 7), True)
    return sd

def strip(sd):
    "`sd` without old instance-norm statistics (as the reference's loader patches them away)"
    return OrderedDict((k, v) for k, v in sd.items()
                       if not (k.endswith(('running_mean', 'running_var')) and k.rsplit('.', 1)[0] + '.weight' not in sd))

NETS = {'unet_256': (lambda norm, **kw: unet_ref_sd(8, 8, norm, **kw), lambda norm: UnetGenerator(num_downs=8, ngf=8, norm=norm), 256),
        'unet_128': (lambda norm, **kw: unet_ref_sd(7, 8, norm, **kw), lambda norm: UnetGenerator(num_downs=7, ngf=8, norm=norm), 128),
        'resnet_9blocks': (lambda norm, **kw: resnet_ref_sd(9, 8, norm, **kw), lambda norm: ResnetGenerator(ngf=8, n_blocks=9, norm=norm), 32),
        'resnet_6blocks': (lambda norm, **kw: resnet_ref_sd(6, 8, norm, **kw), lambda norm: ResnetGenerator(ngf=8, n_blocks=6, norm=norm), 36)}

CASES = [('unet_256', 'batch', False, False), ('unet_256', 'instance', True, True), ('unet_128', 'batch', True, False),
         ('unet_128', 'instance', False, False), ('resnet_9blocks', 'instance', False, True), ('resnet_9blocks', 'batch', True, False),
         ('resnet_6blocks', 'instance', True, False), ('resnet_6blocks', 'batch', False, False)]


@pytest.mark.parametrize('netG,norm,prefix,old_in', CASES)
def test_reference_files_load_and_match_a_hand_built_network(netG, norm, prefix, old_in, tmp_path):
    make_sd, make_G, size = NETS[netG]
    torch.manual_seed(0)
    sd = make_sd(norm, old_in=old_in)
    if old_in: assert any(k.endswith('running_mean') for k in sd)
    saved = OrderedDict((f'module.{k}' if prefix else k, v) for k, v in sd.items())
    torch.save(saved, tmp_path/'latest_net_G.pth')
    G = load_generator(tmp_path/'latest_net_G.pth', device='cpu')
    manual = make_G(norm)
    manual.load_state_dict(strip(sd))   # strict: the layout written above is the network's
    manual.eval()
    assert type(G) is type(manual) and not G.training
    assert reference_options(G).startswith(f'--netG {netG} --ngf 8 --norm {norm} --input_nc 3 --output_nc 3')
    x = torch.randn(1, 3, size, size)
    with torch.no_grad(): assert torch.equal(G(x), manual(x))


def test_in_out_channels_and_dropout_read_from_the_keys(tmp_path):
    sd = resnet_ref_sd(2, 4, 'instance', in_ch=1, out_ch=4, dropout=True)
    torch.save(sd, tmp_path/'g.pth')
    G = load_generator(tmp_path/'g.pth', device='cpu')
    assert (G.in_ch, G.out_ch, G.n_blocks) == (1, 4, 2)
    assert sum(isinstance(m, torch.nn.Dropout) for m in G.modules()) == 2
    torch.save(unet_ref_sd(6, 4, 'batch', in_ch=1, out_ch=2), tmp_path/'u.pth')
    U = load_generator(tmp_path/'u.pth', device='cpu')
    assert (U.in_ch, U.out_ch, U.num_downs) == (1, 2, 6)


# --- translate with such files -------------------------------------------------------------------------------------


def pixels(im): return np.asarray(im)

def test_translate_writes_what_the_network_gives(tmp_path):
    torch.manual_seed(1)
    sd = resnet_ref_sd(6, 8, 'instance')
    torch.save(sd, tmp_path/'latest_net_G_A.pth')
    manual = ResnetGenerator(ngf=8, n_blocks=6).eval(); manual.load_state_dict(sd)
    src = tmp_path/'in'; src.mkdir()
    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 40, 3), dtype=np.uint8))
    im.save(src/'a.png')
    # --preprocess none: the image as it is (sides are multiples of 4), output at the network's size
    assert run(['translate', '--model', tmp_path/'latest_net_G_A.pth', '--input', src, '--output', tmp_path/'o1',
                '--preprocess', 'none', '--network-size', '--test-mode', 'eval']) == 0
    with torch.no_grad(): want = to_pil(manual(from_pil(im)[None])[0])
    assert pixels(Image.open(tmp_path/'o1'/'a.png')).tolist() == pixels(want).tolist()
    # the default: resized to the load size (256 for a reference file) and back to the input's size
    assert run(['translate', '--model', tmp_path/'latest_net_G_A.pth', '--input', src, '--output', tmp_path/'o2', '--load-size', 64]) == 0
    with torch.no_grad(): y = manual(from_pil(im.resize((64, 64), Image.Resampling.BICUBIC))[None])[0]
    want = to_pil(y).resize((40, 32), Image.Resampling.BICUBIC)
    assert pixels(Image.open(tmp_path/'o2'/'a.png')).tolist() == pixels(want).tolist()


def test_translate_paper_mode_is_the_reference_default_train_mode(tmp_path):
    "The reference's test.py without --eval runs the net in train mode: batch statistics and dropout"
    torch.manual_seed(2)
    sd = unet_ref_sd(7, 8, 'batch')
    torch.save(sd, tmp_path/'latest_net_G.pth')
    manual = UnetGenerator(num_downs=7, ngf=8); manual.load_state_dict(sd)   # train mode, dropout on
    im = Image.fromarray(np.random.default_rng(1).integers(0, 256, (128, 128, 3), dtype=np.uint8))
    im.save(tmp_path/'x.png')
    torch.manual_seed(5)
    assert run(['translate', '--model', tmp_path/'latest_net_G.pth', '--input', tmp_path/'x.png', '--output', tmp_path/'o',
                '--load-size', 128]) == 0   # test mode: 'paper' for a state dict
    torch.manual_seed(5)
    with torch.no_grad(): want = to_pil(manual(from_pil(im)[None])[0])
    got = pixels(Image.open(tmp_path/'o'/'x.png'))
    assert got.tolist() == pixels(want).tolist()
    assert run(['translate', '--model', tmp_path/'latest_net_G.pth', '--input', tmp_path/'x.png', '--output', tmp_path/'e',
                '--load-size', 128, '--test-mode', 'eval']) == 0
    manual.load_state_dict(sd); manual.eval()   # its train-mode forward moved the running statistics: put them back
    with torch.no_grad(): want_eval = to_pil(manual(from_pil(im)[None])[0])
    assert pixels(Image.open(tmp_path/'e'/'x.png')).tolist() == pixels(want_eval).tolist()
    assert pixels(want_eval).tolist() != got.tolist()


# --- ours -> reference format -> load_generator ------------------------------------------------------------------

@pytest.mark.parametrize('make', [lambda: UnetGenerator(num_downs=7, ngf=8, norm='batch'),
                                  lambda: UnetGenerator(num_downs=6, ngf=4, norm='instance', in_ch=1),
                                  lambda: ResnetGenerator(ngf=8, n_blocks=6, norm='batch', use_dropout=True),
                                  lambda: ResnetGenerator(ngf=4, n_blocks=2, padding='zero', out_ch=1)])
def test_round_trip_through_the_reference_format_is_exact(make, tmp_path):
    torch.manual_seed(3)
    G = make()
    size = max(G.multiple, 32)
    G(torch.randn(2, G.in_ch, size, size))   # train-mode forward: running statistics move away from their initial values
    export_reference(G, tmp_path/'latest_net_G.pth')
    sd = torch.load(tmp_path/'latest_net_G.pth', weights_only=True)
    assert all(not k.startswith('module.') and v.device.type == 'cpu' for k, v in sd.items())
    G2 = load_generator(tmp_path/'latest_net_G.pth', device='cpu')
    assert type(G2) is type(G) and list(G2.state_dict()) == list(G.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(G.state_dict().values(), G2.state_dict().values()))
    assert [type(m) for m in G2.modules()] == [type(m) for m in G.modules()]   # dropout and padding layers too
    x = torch.randn(1, G.in_ch, size, size)
    G.eval()
    with torch.no_grad(): assert torch.equal(G(x), G2(x))


def test_export_command_reference_from_a_checkpoint(tmp_path, capsys):
    G = UnetGenerator(num_downs=7, ngf=4)
    torch.save(dict(format='gan_callbacks.callback.checkpoint/1', epoch=3, model=G.state_dict(), opt={}), tmp_path/'gan_epoch3.pth')
    assert run(['export', '--model', tmp_path/'gan_epoch3.pth', '--format', 'reference', '--out', tmp_path/'r'/'latest_net_G.pth']) == 0
    assert '--netG unet_128 --ngf 4 --norm batch --input_nc 3 --output_nc 3' in capsys.readouterr().out
    sd = torch.load(tmp_path/'r'/'latest_net_G.pth', weights_only=True)
    assert all(torch.equal(sd[k], v) for k, v in G.state_dict().items()) and len(sd) == len(G.state_dict())


# --- ONNX ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('G,size,xs', [
    (UnetGenerator(num_downs=5, ngf=8), 32, [(1, 3, 32, 32), (2, 3, 64, 96)]),
    (ResnetGenerator(ngf=8, n_blocks=2, norm='batch'), 24, [(1, 3, 24, 24), (2, 3, 20, 36)])])
def test_onnx_matches_pytorch_at_other_sizes_and_batches(G, size, xs, tmp_path):
    ort = pytest.importorskip('onnxruntime')
    torch.manual_seed(4)
    G(torch.randn(2, 3, size, size))   # running statistics away from 0/1
    export_onnx(G, tmp_path/'g.onnx', size=size)
    sess = ort.InferenceSession(str(tmp_path/'g.onnx'), providers=['CPUExecutionProvider'])
    G.eval()
    for shape in xs:
        x = torch.randn(*shape)
        with torch.no_grad(): want = G(x).numpy()
        got = sess.run(None, {'input': x.numpy()})[0]
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-4
    assert max(check_onnx(G, tmp_path/'g.onnx', *[torch.randn(*s) for s in xs])) < 1e-4


def test_onnx_export_at_a_size_the_unet_cannot_take(tmp_path, capsys):
    pytest.importorskip('onnx')
    G = UnetGenerator(num_downs=6, ngf=4)
    with pytest.raises(ValueError, match='multiples of 64, got 48x48'): export_onnx(G, tmp_path/'g.onnx', size=48)
    torch.save(G.state_dict(), tmp_path/'g.pth')
    assert run(['export', '--model', tmp_path/'g.pth', '--format', 'onnx', '--out', tmp_path/'g.onnx', '--size', 96]) == 2
    assert 'multiples of 64, got 96x96' in capsys.readouterr().err
    assert not (tmp_path/'g.onnx').exists()
    assert run(['export', '--model', tmp_path/'g.pth', '--format', 'onnx', '--out', tmp_path/'g.onnx', '--size', 128, '--batch', 2]) == 0
    assert (tmp_path/'g.onnx').stat().st_size > 0


# --- other sources and bad files ---------------------------------------------------------------------------------------

def test_fastai_export_loads_with_its_settings(tmp_path):
    from gan_callbacks.data.folders import Pix2pixDataLoaders
    from gan_callbacks.data.samples import sample_pairs
    from gan_callbacks.gans.pix2pix import pix2pix_learner
    data = sample_pairs(tmp_path/'s', n_train=2, n_valid=1, size=32)
    dls = Pix2pixDataLoaders.from_folder(data, load_size=36, crop_size=32, bs=2, num_downs=5)
    learn = pix2pix_learner(dls, generator=UnetGenerator(num_downs=5, ngf=4), path=tmp_path, trainer_kwargs=dict(test_mode='eval'))
    learn.export('generator.pkl')
    G, s = read_generator(tmp_path/'generator.pkl', device='cpu', trust_pickle=True)
    assert s == dict(in_ch=3, multiple=32, size=32, test_mode='eval')
    x = torch.randn(1, 3, 32, 32)
    learn.model.eval()
    with torch.no_grad(): assert torch.equal(G(x), learn.model(x))


class Payload:
    "A pickle that creates a file when it is loaded"
    def __init__(self, fn): self.fn = fn
    def __reduce__(self): return (Path.touch, (Path(self.fn),))

def test_no_path_unpickles_without_trust(tmp_path):
    from gan_callbacks.deploy.interop import export_generator
    from gan_callbacks.metrics.evaluation import evaluate
    from gan_callbacks.deploy.webapp import make_app
    ran = tmp_path/'payload-ran'
    for name in ('evil.pkl', 'EVIL.PKL'):
        bad = tmp_path/name
        bad.write_bytes(pickle.dumps(Payload(ran)))
        for load in (lambda: load_generator(bad), lambda: read_generator(bad, device='cpu'),
                     lambda: evaluate(bad, tmp_path, tmp_path/'e', quiet=True),
                     lambda: export_generator(bad, 'reference', tmp_path/'x.pth'), lambda: make_app(bad)):
            with pytest.raises(InteropError, match=r'is a pickle, and loading a pickle runs any code it holds: pass trust_pickle=True'):
                load()
            assert not ran.exists()
    # trusted, it is unpickled (the payload runs: that is what trusting means), then refused as no export
    with pytest.raises(InteropError, match='cannot load it as a fastai export'): load_generator(bad, trust_pickle=True)
    assert ran.exists()


@pytest.mark.parametrize('content,hints,msg', [
    (lambda: PatchDiscriminator(ndf=4).state_dict(), {}, "a PatchGAN discriminator's layout"),
    (lambda: {'a.weight': torch.ones(2)}, {}, 'holds no generator this library can read'),
    (lambda: torch.nn.Conv2d(3, 3, 1).state_dict(), {}, 'holds no generator this library can read (the state dict of a U-Net or ResNet generator): 2 tensors, keys weight, bias'),
    (lambda: unet_ref_sd(8, 4, 'batch'), {'netG': 'unet_128'}, 'num_downs=8, but num_downs=7 was asked for'),
    (lambda: unet_ref_sd(8, 4, 'batch'), {'netG': 'unet_512'}, 'netG must be one of'),
    (lambda: resnet_ref_sd(6, 4, 'instance'), {'netG': 'resnet_9blocks'}, 'n_blocks=6, but n_blocks=9'),
    (lambda: [1, 2], {}, 'holds a list, not a state dict'),
])
def test_impossible_files_name_what_was_found(content, hints, msg, tmp_path):
    torch.save(content(), tmp_path/'x.pth')
    with pytest.raises(InteropError) as e: load_generator(tmp_path/'x.pth', device='cpu', **hints)
    assert msg in str(e.value) and 'x.pth' in str(e.value)


def test_truncated_file_and_cli_errors(tmp_path, capsys):
    torch.save(unet_ref_sd(5, 4, 'batch'), tmp_path/'g.pth')
    (tmp_path/'t.pth').write_bytes((tmp_path/'g.pth').read_bytes()[:200])
    with pytest.raises(InteropError, match='t.pth: cannot read it'): load_generator(tmp_path/'t.pth')
    Image.new('RGB', (32, 32)).save(tmp_path/'i.png')
    assert run(['translate', '--model', tmp_path/'t.pth', '--input', tmp_path/'i.png', '--output', tmp_path/'o']) == 2
    assert 't.pth: cannot read it' in capsys.readouterr().err
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'i.png', '--output', tmp_path/'o', '--netG', 'unet_256']) == 2
    assert 'num_downs=5, but num_downs=8 was asked for' in capsys.readouterr().err


def test_generator_settings_follow_any_trainers_test_mode():
    "A CycleGAN Learner's test mode is its trainer's, as pix2pix's is (the trainer found by `find_trainer`)"
    from fastai.data.core import DataLoaders
    from gan_callbacks.nets.networks import ResnetGenerator
    from gan_callbacks.gans.cyclegan import cyclegan_learner
    from gan_callbacks.trainer.base import find_trainer
    from gan_callbacks.deploy.inference import generator_settings
    x = torch.randn(4, 3, 16, 16)
    dls = DataLoaders.from_dsets(list(zip(x, x.flip(-1))), list(zip(x, x.flip(-1))), bs=2, device='cpu')
    for mode in ('paper', 'eval'):
        learn = cyclegan_learner(dls, *(ResnetGenerator(3, 3, ngf=4, n_blocks=1) for _ in 'ab'), lambda_idt=0,
                                 trainer_kwargs=dict(test_mode=mode))
        assert find_trainer(learn) is learn.cycle_gan_trainer
        assert generator_settings(learn)['test_mode'] == mode
