"16-bit and many-channel images: read and written with their values, trained on and translated."
import json
import numpy as np
import pytest, torch
from PIL import Image
from gan_callbacks.cli.parser import main
from gan_callbacks.data.images import read_image, write_image
from gan_callbacks.data.folders import deep_dataloaders
from helpers import run_cli as run



TINY = ['--epochs', 1, '--epochs-decay', 0, '--bs', 2, '--load-size', 36, '--crop-size', 32, '--ngf', 4, '--n-samples', 2, '--seed', 0,
        '--test-mode', 'eval']

def test_16_bit_png_trains_and_comes_back_with_16_bits(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (('train', 4), ('val', 2)):
        (tmp_path/'d'/split).mkdir(parents=True)
        for k in range(n):
            a = rng.integers(0, 65536, (32, 32), dtype=np.uint16)
            Image.fromarray(np.concatenate([a, 65535 - a], 1)).save(tmp_path/'d'/split/f'{k}.png')   # A | B, 16-bit gray
    src = tmp_path/'d'/'val'/'0.png'
    assert Image.open(src).mode == 'I;16' and np.asarray(Image.open(src)).max() > 255
    t, dtype = read_image(src)
    assert dtype == np.uint16 and torch.equal(((t + 1) / 2 * 65535).round().to(torch.int64)[0], torch.from_numpy(np.asarray(Image.open(src)).astype(np.int64)))
    out = tmp_path/'run'
    assert run(['train', '--data', tmp_path/'d', '--out', out, *TINY]) == 0
    cfg = json.loads((out/'generator'/'config.json').read_text())
    assert (cfg['in_ch'], cfg['out_ch'], cfg['normalization']['bit_depth']) == (1, 1, 16)
    assert run(['translate', '--model', out/'generator', '--input', src, '--output', tmp_path/'t']) == 0
    got = Image.open(tmp_path/'t'/'0.png')
    assert got.mode == 'I;16' and got.size == (64, 32)
    y = np.asarray(got)
    assert y.max() > 255 and len(np.unique(y)) > 256   # 16-bit values, not 8 bits scaled up
    # the same through the library: the file holds exactly the network's output at 16 bits
    from gan_callbacks.deploy.interop import load_generator
    from gan_callbacks.deploy.inference import run_padded
    G = load_generator(out/'generator', device='cpu')
    want = np.round(((run_padded(G, read_image(src)[0][None], 'eval')[0].clamp(-1, 1) + 1) / 2 * 65535).numpy()).astype(np.uint16)[0]
    np.testing.assert_array_equal(y, want)

def test_five_channel_npy_trains_and_translates(tmp_path):
    rng = np.random.default_rng(1)
    for split, n in (('train', 4), ('val', 2)):
        for o in 'AB': (tmp_path/'d'/split/o).mkdir(parents=True)
        for k in range(n):
            a = rng.random((32, 32, 5)).astype(np.float32)
            np.save(tmp_path/'d'/split/'A'/f'{k}.npy', a); np.save(tmp_path/'d'/split/'B'/f'{k}.npy', a[..., :3] * 0.5)
    dls = deep_dataloaders(tmp_path/'d', 'separate', load_size=36, crop_size=32, bs=2, device='cpu')
    assert (dls.in_ch, dls.out_ch) == (5, 3)
    out = tmp_path/'run'
    assert run(['train', '--data', tmp_path/'d', '--layout', 'separate', '--out', out, *TINY]) == 0
    cfg = json.loads((out/'generator'/'config.json').read_text())
    assert (cfg['in_ch'], cfg['out_ch'], cfg['args']['in_ch'], cfg['normalization']['bit_depth']) == (5, 3, 5, 32)
    assert run(['translate', '--model', out/'generator', '--input', tmp_path/'d'/'val'/'A', '--output', tmp_path/'t']) == 0
    y = np.load(tmp_path/'t'/'0.npy')
    assert y.shape == (32, 32, 3) and y.dtype == np.float32 and 0 <= y.min() and y.max() <= 1

def test_a_mix_the_model_cannot_take(tmp_path, capsys):
    from gan_callbacks.nets.networks import UnetGenerator
    torch.save(UnetGenerator(in_ch=3, num_downs=5, ngf=4).state_dict(), tmp_path/'g.pth')
    np.save(tmp_path/'five.npy', np.zeros((32, 32, 5), np.float32))
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'five.npy', '--output', tmp_path/'o']) == 2
    assert 'five.npy has 5 channels, expected 3' in capsys.readouterr().err
    np.save(tmp_path/'ints.npy', np.zeros((32, 32, 3), np.int32))
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'ints.npy', '--output', tmp_path/'o']) == 2
    assert 'pixel type int32' in capsys.readouterr().err

@pytest.mark.parametrize('layout', ['aligned', 'separate'])
def test_from_folder_refuses_16_bit_images_it_would_blank(tmp_path, layout):
    "16-bit grey PNGs through `Pix2pixDataLoaders.from_folder` became constant white: refused, naming the file and `deep_dataloaders`"
    from gan_callbacks.data.folders import Pix2pixDataLoaders, UnpairedDataLoaders
    rng = np.random.default_rng(0)
    for k in range(4):
        a = rng.integers(0, 65536, (32, 32), dtype=np.uint16)
        if layout == 'aligned': (tmp_path/'d'/'train').mkdir(parents=True, exist_ok=True); Image.fromarray(np.concatenate([a, a], 1)).save(tmp_path/'d'/'train'/f'{k}.png')
        else:
            for s in 'AB': (tmp_path/'d'/'train'/s).mkdir(parents=True, exist_ok=True); Image.fromarray(a).save(tmp_path/'d'/'train'/s/f'{k}.png')
    with pytest.raises(ValueError, match=r"0\.png is a 16-bit or array image.*deep_dataloaders"):
        Pix2pixDataLoaders.from_folder(tmp_path/'d', layout=layout, load_size=32, crop_size=32, bs=2, valid_pct=0.5)
    dls = deep_dataloaders(tmp_path/'d', layout=layout, load_size=32, crop_size=32, bs=2, valid_pct=0.5)   # what it points to reads them
    x = dls.one_batch()[0]
    assert x.shape[1] == 1 and x.min() < x.max()
    if layout == 'separate':
        for d in ('trainA', 'trainB'): (tmp_path/'u'/d).mkdir(parents=True); Image.fromarray(rng.integers(0, 65536, (32, 32), dtype=np.uint16)).save(tmp_path/'u'/d/'0.png')
        with pytest.raises(ValueError, match=r"16-bit or array image.*convert the folders to 8 bits"):
            UnpairedDataLoaders.from_folder(tmp_path/'u', load_size=32, crop_size=32, bs=1, valid_pct=0.5)
