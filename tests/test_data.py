"Paired image data: loading, shared augmentation, bad data, and the sample dataset"
import csv, os, shutil
from pathlib import Path

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from fastai.learner import Learner, load_learner
from fastai.callback.core import Callback
from fastai.torch_core import TensorImage, set_seed
from fastai.data.load import fa_collate
from fastai.vision.core import PILImage

from gan_callbacks.data.images import *
from gan_callbacks.data.samples import *
from gan_callbacks.data.folders import *
from gan_callbacks.data.fast_loader import *

BICUBIC = Image.Resampling.BICUBIC

def noise(h, w, c=3, seed=0):
    "Random uint8 image: no symmetry a flip or shift could hide"
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)

def save_ab(fn, a, b):
    "Write arrays `a` and `b` side by side to `fn`"
    fn.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate([a, b], axis=1)).save(fn)

def make_aligned(root, n_train=4, n_valid=2, size=12, rel=lambda a: a):
    "Aligned dataset where each B is `rel(A)`"
    for split,n in (('train', n_train), ('val', n_valid)):
        for i in range(n):
            a = noise(size, size, seed=100*(split=='val')+i)
            save_ab(root/split/f'{i:02d}.png', a, rel(a))
    return root

def bicubic(im, size):
    """PIL image `im` resized to `size` x `size` as the loaders resize (`resize_bicubic`: Pillow's bicubic filter on
    uint8, within one grey level of Pillow's own `resize`, see `test_bicubic_matches_pillow`), as an HW(C) array"""
    a = np.array(im); t = torch.from_numpy(a)
    out = resize_bicubic(t[None] if a.ndim == 2 else t.permute(2, 0, 1), size)
    return out[0].numpy() if a.ndim == 2 else out.permute(1, 2, 0).numpy()

def to_uint8(t):
    "Batch tensor in [-1, 1] back to uint8 HWC arrays"
    return ((t.detach().cpu().float()+1)*127.5).round().clamp(0, 255).byte().permute(0, 2, 3, 1).numpy()

def crops_of(im, n):
    "Every `n`x`n` crop of `im` (HWC) and of its mirror image, keyed by (top, left, flipped)"
    h,w = im.shape[:2]
    return {(t, l, f): (im[:, ::-1] if f else im)[t:t+n, l:l+n]
            for t in range(h-n+1) for l in range(w-n+1) for f in (False, True)}

# ---------------------------------------------------------------- loaders

def test_batch_shapes_dtype_range(tmp_path):
    dls = Pix2pixDataLoaders.from_folder(make_aligned(tmp_path), load_size=18, crop_size=16, bs=2)
    for dl in (dls.train, dls.valid):
        x,y = dl.one_batch()
        assert x.shape == y.shape == (2, 3, 16, 16)
        assert x.dtype == y.dtype == torch.float32
        assert isinstance(x, TensorImage) and isinstance(y, TensorImage)
        for t in (x, y): assert -1 <= t.min() < 0 < t.max() <= 1
    assert (dls.in_ch, dls.out_ch, dls.load_size, dls.crop_size) == (3, 3, 18, 16)
    assert (len(dls.train_ds), len(dls.valid_ds)) == (4, 2)
    assert dls.n_inp == 1
    assert dls.device == dls.train.device

def test_new_empty_keeps_attributes(tmp_path):
    dls = Pix2pixDataLoaders.from_folder(make_aligned(tmp_path), in_ch=1, load_size=18, crop_size=16)
    e = dls.new_empty()
    assert type(e) is Pix2pixDataLoaders
    assert (e.in_ch, e.out_ch, e.load_size, e.crop_size) == (1, 3, 18, 16)

def test_batches_copied_to_the_device_without_blocking(tmp_path, monkeypatch):
    "Same batches as fastai's own `TfmdDL` (same shuffle and augmentation), copied with `non_blocking=True`"
    import gan_callbacks.data.fast_loader as loader
    from fastai.data.core import TfmdDL
    dls = Pix2pixDataLoaders.from_folder(make_aligned(tmp_path, n_train=6), load_size=18, crop_size=16, bs=2, seed=0)
    assert type(dls.train) is type(dls.valid) is Pix2pixDL
    calls, to_device = [], loader.to_device
    monkeypatch.setattr(loader, 'to_device', lambda b, device, **kw: calls.append(kw) or to_device(b, device, **kw))
    ref = dls.train.new(cls=TfmdDL)
    assert type(ref) is TfmdDL
    def epoch(dl):
        dl.rng.seed(1); set_seed(0)   # the loader's shuffle, and the augmentation's draws
        return [torch.cat(b) for b in dl]
    ours, theirs = epoch(dls.train), epoch(ref)
    assert len(ours) == 3 and all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert calls == [{'non_blocking': True}] * 3

def test_shared_crop_and_flip_identical_pair(tmp_path):
    "B == A: whatever crop and flip were drawn, both sides come out identical, at a real crop of the resized image"
    root = make_aligned(tmp_path, n_train=2, n_valid=1, size=14)
    dls = Pix2pixDataLoaders.from_folder(root, load_size=20, crop_size=16, bs=1, shuffle=False)
    a0 = np.asarray(Image.open(root/'train'/'00.png'))[:, :14]
    expected = crops_of(bicubic(Image.fromarray(a0), 20), 16)
    seen = set()
    for _ in range(30):
        x,y = next(iter(dls.train))
        assert torch.equal(x, y)
        out = to_uint8(x)[0]
        hits = [k for k,v in expected.items() if np.array_equal(v, out)]
        assert len(hits) == 1
        seen.add(hits[0])
    assert {k[2] for k in seen} == {False, True}     # flipped and unflipped both occur
    assert len({k[:2] for k in seen}) > 3            # and the crop moves

def test_shared_crop_and_flip_inverted_pair(tmp_path):
    """B = 255 - A stays B = 255 - A after augmentation, to interpolation rounding: the uint8 resize rounds after each
    of its two passes, so A's and B's results may each be off by one level, two in their sum (x + y = (a + b - 255) / 127.5)"""
    root = make_aligned(tmp_path, n_train=3, n_valid=1, size=14, rel=lambda a: 255-a)
    dls = Pix2pixDataLoaders.from_folder(root, load_size=20, crop_size=16, bs=3)
    for _ in range(10):
        x,y = dls.train.one_batch()
        assert (x+y).abs().max() <= 2/127.5 + 1e-6
        assert ((x+y).abs() > 1e-6).float().mean() < 0.02
        assert x.abs().mean() > 0.1

def test_validation_resize_only_and_deterministic(tmp_path):
    root = make_aligned(tmp_path, size=12)
    dls = Pix2pixDataLoaders.from_folder(root, load_size=20, crop_size=16, bs=2)
    x1,y1 = dls.valid.one_batch()
    x2,y2 = dls.valid.one_batch()
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    ab = Image.open(root/'val'/'00.png')
    a = bicubic(ab.crop((0, 0, 12, 12)), 16)
    assert np.array_equal(to_uint8(x1)[0], a)

def test_direction_swaps(tmp_path):
    save_ab(tmp_path/'train'/'0.png', np.full((8, 8, 3), 10, np.uint8), np.full((8, 8, 3), 200, np.uint8))
    save_ab(tmp_path/'val'/'0.png', np.full((8, 8, 3), 10, np.uint8), np.full((8, 8, 3), 200, np.uint8))
    kw = dict(load_size=10, crop_size=8)
    x,y = map(to_uint8, Pix2pixDataLoaders.from_folder(tmp_path, **kw).valid.one_batch())
    assert (x == 10).all() and (y == 200).all()
    x,y = map(to_uint8, Pix2pixDataLoaders.from_folder(tmp_path, direction='BtoA', **kw).valid.one_batch())
    assert (x == 200).all() and (y == 10).all()

def test_separate_layout_matches_stems(tmp_path):
    "A/ and B/ matched by stem whatever the extension; B = A + 5 everywhere"
    for split,stems in (('train', ['b', 'a', 'c']), ('val', ['z'])):
        for i,s in enumerate(stems):
            (tmp_path/split/'A').mkdir(parents=True, exist_ok=True); (tmp_path/split/'B').mkdir(parents=True, exist_ok=True)
            v = 20*i + 100*(split=='val')
            Image.new('RGB', (10, 6), (v,)*3).save(tmp_path/split/'A'/f'{s}.png')
            Image.new('RGB', (10, 6), (v+5,)*3).save(tmp_path/split/'B'/f'{s}.bmp')
    dls = Pix2pixDataLoaders.from_folder(tmp_path, layout='separate', load_size=10, crop_size=8, bs=3)
    x,y = dls.train.one_batch()
    d = to_uint8(y).astype(int) - to_uint8(x).astype(int)
    assert (d == 5).all()
    assert len(dls.valid_ds) == 1
    x,y = Pix2pixDataLoaders.from_folder(tmp_path, layout='separate', direction='BtoA', load_size=10, crop_size=8, bs=3).train.one_batch()
    assert ((to_uint8(x).astype(int) - to_uint8(y).astype(int)) == 5).all()

def test_channels(tmp_path):
    root = make_aligned(tmp_path)
    dls = Pix2pixDataLoaders.from_folder(root, in_ch=1, load_size=18, crop_size=16, bs=2)
    x,y = dls.one_batch()
    assert x.shape == (2, 1, 16, 16) and y.shape == (2, 3, 16, 16)
    assert (dls.in_ch, dls.out_ch) == (1, 3)
    dls = Pix2pixDataLoaders.from_folder(root, in_ch=3, out_ch=1, direction='BtoA', load_size=18, crop_size=16, bs=2)
    x,y = dls.valid.one_batch()
    assert x.shape == (2, 3, 16, 16) and y.shape == (2, 1, 16, 16)
    # a gray side is the PIL 'L' conversion of the file's colours
    b = bicubic(Image.open(root/'val'/'00.png').crop((0, 0, 12, 12)).convert('L'), 16)
    assert np.array_equal(to_uint8(y)[0, ..., 0], b)
    dls = Pix2pixDataLoaders.from_folder(root, in_ch=4, out_ch=4, load_size=18, crop_size=16, bs=2)
    x,y = dls.one_batch()
    assert x.shape == y.shape == (2, 4, 16, 16)
    assert (x[:, 3] == 1).all()       # opaque alpha

def test_random_split(tmp_path):
    root = make_aligned(tmp_path, n_train=10)
    dls = Pix2pixDataLoaders.from_folder(root, valid_pct=0.3, seed=1, load_size=18, crop_size=16)
    assert (len(dls.train_ds), len(dls.valid_ds)) == (7, 3)
    again = Pix2pixDataLoaders.from_folder(root, valid_pct=0.3, seed=1, load_size=18, crop_size=16)
    assert list(dls.valid_ds.items) == list(again.valid_ds.items)
    assert all(o.parent.name == 'train' for o in dls.valid_ds.items)
    dls = Pix2pixDataLoaders.from_folder(root, valid=None, load_size=18, crop_size=16)
    assert (len(dls.train_ds), len(dls.valid_ds)) == (8, 2)

def test_show_batch_and_results(tmp_path):
    dls = Pix2pixDataLoaders.from_folder(make_aligned(tmp_path), in_ch=1, load_size=18, crop_size=16, bs=2)
    dls.show_batch(max_n=2)
    learn = Learner(dls, nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh()), loss_func=nn.L1Loss())
    learn.show_results(max_n=2)
    assert len(plt.gcf().axes) == 6
    plt.close('all')

def window_of(big, small):
    "Whether HWC array `small` is a window of `big` or of its mirror image"
    h, w = small.shape[:2]
    return any(np.array_equal(b[t:t+h, l:l+w], small) for b in (big, big[:, ::-1])
               for t in range(big.shape[0]-h+1) for l in range(big.shape[1]-w+1))

@pytest.mark.parametrize('load_size', [(20, 30), 30])
def test_non_square_crops(tmp_path, load_size):
    "Sizes as in fastai, (height, width): crops 16 high and 24 wide of images resized to `load_size`, paired and unpaired"
    root = make_aligned(tmp_path/'p')
    dls = Pix2pixDataLoaders.from_folder(root, load_size=load_size, crop_size=(16, 24), bs=2, shuffle=False)
    assert dls.crop_size == (16, 24) and dls.load_size == load_size
    x, y = dls.train.one_batch()
    assert x.shape == y.shape == (2, 3, 16, 24) and np.array_equal(to_uint8(x), to_uint8(y))
    big = bicubic(Image.open(dls.train_ds.items[0]).crop((0, 0, 12, 12)), load_size)
    assert big.shape[:2] == ((20, 30) if load_size == (20, 30) else (30, 30)) and window_of(big, to_uint8(x)[0])
    x, _ = dls.valid.one_batch()
    assert np.array_equal(to_uint8(x)[0], bicubic(Image.open(root/'val'/'00.png').crop((0, 0, 12, 12)), (16, 24)))
    x, _ = pix2pix_datablock(load_size=load_size, crop_size=(16, 24)).dataloaders(get_pairs(root/'train'), bs=2).one_batch()
    assert x.shape == (2, 3, 16, 24)
    dls = UnpairedDataLoaders.from_folder(make_domains(tmp_path/'u'), load_size=load_size, crop_size=(16, 24), bs=2)
    for dl in (dls.train, dls.valid): assert [o.shape for o in dl.one_batch()] == [(2, 3, 16, 24)] * 2
    with pytest.raises(ValueError, match=r'crop_size \(\(16, 40\)\) is larger than load_size'):
        Pix2pixDataLoaders.from_folder(root, load_size=(20, 30), crop_size=(16, 40))
    with pytest.raises(ValueError, match=r'multiple of 8 .* use e\.g\. \(16, 16\)'):
        UnpairedDataLoaders.from_folder(tmp_path/'u', load_size=30, crop_size=(16, 20), num_downs=3)
    with pytest.raises(ValueError, match=r'crop_size must be an int or a \(height, width\) pair, not \(16,\)'):
        Pix2pixDataLoaders.from_folder(root, crop_size=(16,))

@pytest.mark.parametrize('layout', ['aligned', 'separate'])
def test_hand_built_datablock_predicts_whole_files(tmp_path, layout):
    "`pix2pix_datablock(...).dataloaders` are `Pix2pixDataLoaders`: they know their channels and sizes, and `predict` reads a file whole"
    if layout == 'aligned': make_aligned(tmp_path)
    else:
        for split, n in (('train', 4), ('val', 2)):
            for i in range(n):
                for side in 'AB':
                    (tmp_path/split/side).mkdir(parents=True, exist_ok=True)
                    Image.fromarray(noise(12, 20, seed=10*i + (side == 'B'))).save(tmp_path/split/side/f'{i}.png')
    dblock = pix2pix_datablock(layout, load_size=18, crop_size=16, in_ch=1)
    dls = dblock.dataloaders(get_pairs(tmp_path/'train', layout), bs=2, device='cpu')
    assert isinstance(dls, Pix2pixDataLoaders) and (dls.in_ch, dls.out_ch, dls.load_size, dls.crop_size) == (1, 3, 18, 16)
    learn = Learner(dls, nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh()), loss_func=nn.L1Loss())
    fn = tmp_path/'val'/'00.png' if layout == 'aligned' else tmp_path/'val'/'A'/'0.png'
    dec, pred, _ = learn.predict(fn)
    assert pred.shape == (3, 12, 24 if layout == 'aligned' else 20)   # the whole file, at its own size
    x, = dls.test_dl([fn]).one_batch()
    assert x.shape == (1, 1, 12, 24 if layout == 'aligned' else 20)

# ---------------------------------------------------------------- the fast path's semantics

def smooth(h, w, c=3, seed=0):
    "A smooth random uint8 image (blurred noise), as photos are"
    im = Image.fromarray(noise(h // 4 + 2, w // 4 + 2, c, seed)[..., 0] if c == 1 else noise(h // 4 + 2, w // 4 + 2, c, seed))
    return im.resize((w, h), BICUBIC)

@pytest.mark.parametrize('c', [1, 3])
@pytest.mark.parametrize('src,size', [(14, 20), (256, 286), (256, 256), (286, 256), (60, 16)])
def test_bicubic_matches_pillow(c, src, size):
    """`resize_bicubic` is Pillow's bicubic resize (antialiased when shrinking) to one level for RGB and two for gray, on
    at most 2% of the values, on noise and on smooth images; Pillow's bilinear, for comparison, is further off"""
    mode = {1: 'L', 3: 'RGB'}[c]
    for im in (Image.fromarray(noise(src, src, c)[..., 0] if c == 1 else noise(src, src, c)).convert(mode), smooth(src, src, c).convert(mode)):
        ours = bicubic(im, size).astype(int)
        d = np.abs(ours - np.asarray(im.resize((size, size), BICUBIC)).astype(int))
        assert ours.shape == np.asarray(im.resize((size, size))).shape
        assert d.max() <= (1 if c == 3 else 2) and (d > 0).mean() <= 0.02, (d.max(), (d > 0).mean())
    if src != size:
        lin = np.abs(ours - np.asarray(im.resize((size, size), Image.Resampling.BILINEAR)).astype(int))
        assert lin.max() > 2

def test_loaders_match_the_pillow_pipeline(tmp_path):
    """Training batches are a crop of Pillow's bicubic resize to `load_size`, the same one for A and B, flipped or not;
    validation batches are Pillow's bicubic resize to `crop_size`: all to one grey level"""
    root = tmp_path
    for split in ('train', 'val'):
        (root/split).mkdir()
        Image.fromarray(np.concatenate([np.asarray(smooth(40, 40, seed=1)), 255 - np.asarray(smooth(40, 40, seed=1))], 1)).save(root/split/'0.png')
    dls = Pix2pixDataLoaders.from_folder(root, load_size=36, crop_size=32, bs=1)
    ab = Image.open(root/'train'/'0.png')
    a, b = (np.asarray(ab.crop(box).resize((36, 36), BICUBIC)).astype(int) for box in ((0, 0, 40, 40), (40, 0, 80, 40)))
    ca, cb = crops_of(a, 32), crops_of(b, 32)
    flips = set()
    for _ in range(12):
        x, y = (to_uint8(t)[0].astype(int) for t in dls.train.one_batch())
        k = min(ca, key=lambda k: np.abs(ca[k] - x).max())
        assert np.abs(ca[k] - x).max() <= 1 and np.abs(cb[k] - y).max() <= 1   # B: the same crop and flip as A
        flips.add(k[2])
    assert flips == {False, True}
    x, y = (to_uint8(t)[0].astype(int) for t in dls.valid.one_batch())
    assert np.abs(x - np.asarray(ab.crop((0, 0, 40, 40)).resize((32, 32), BICUBIC))).max() <= 1
    assert np.abs(y - np.asarray(ab.crop((40, 0, 80, 40)).resize((32, 32), BICUBIC))).max() <= 1

def test_value_range_exact(tmp_path):
    "0 -> -1 and 255 -> 1 exactly, v -> v/127.5 - 1 as the reference's ToTensor + Normalize(0.5, 0.5), in float32"
    a = np.zeros((8, 8, 3), np.uint8); a[:, 4:] = 255; a[4:, :4] = 100
    for split in ('train', 'val'): save_ab(tmp_path/split/'0.png', a, a)
    x, _ = Pix2pixDataLoaders.from_folder(tmp_path, load_size=8, crop_size=8).valid.one_batch()
    assert x.dtype == torch.float32
    assert set(x.unique().tolist()) == {-1., 1., ((torch.tensor(100.) / 255 - 0.5) / 0.5).item()}

def test_uint8_batches_stay_channels_last_until_float(tmp_path):
    "A collated uint8 batch keeps the crops' channels-last memory; the float batch is contiguous and the same values as fastai's collation gives"
    dls = Pix2pixDataLoaders.from_folder(make_aligned(tmp_path, size=20), load_size=20, crop_size=16, bs=3)
    dl = dls.train
    items = [dl.do_item(i) for i in range(3)]
    assert all(x.stride(0) == 1 for it in items for x in it)   # `ResizeCropFlip` leaves (C, H, W) views of (H, W, C) memory
    b, ref = dl.create_batch(items), fa_collate(items)
    for t, r in zip(b, ref):
        assert type(t) is type(r) and t.dtype == torch.uint8 and torch.equal(t, r)
        assert t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    for t, r in zip(dl.after_batch(b), dl.after_batch(ref)):
        assert t.is_contiguous() and t.dtype == torch.float32 and torch.equal(t, r)
    assert dls.valid.one_batch()[0].is_contiguous()

def test_one_decode_per_item(tmp_path, monkeypatch):
    "An aligned A|B file is opened once per item, for both of its halves (and once per image of an unpaired item)"
    root = make_aligned(tmp_path, n_train=4)
    dls = Pix2pixDataLoaders.from_folder(root, load_size=14, crop_size=12, bs=2)
    import gan_callbacks.data.folders as data
    opened, open_, decode = [], Image.open, data.decode_file
    monkeypatch.setattr(Image, 'open', lambda fn, *a, **k: opened.append(fn) or open_(fn, *a, **k))
    monkeypatch.setattr(data, 'decode_file', lambda fn, *a, **k: opened.append(fn) or decode(fn, *a, **k))
    monkeypatch.setattr(data, '_last_file', data._LastFile())   # empty: the loaders' set-up decoded the first item
    for _ in dls.train: pass
    assert len(opened) == 4 and len(set(map(str, opened))) == 4   # decoded by torchvision (RGB PNGs): Pillow opens nothing

def test_jpeg_decoded_at_reduced_scale(tmp_path, monkeypatch):
    """A JPEG at least twice the load size is decoded smaller (Pillow's `draft`), never below the load size, and the
    batch stays close to the full decode resized with Pillow (mean difference under 1.5 grey levels)"""
    photo = np.asarray(sample_photo('astronaut').resize((256, 256), BICUBIC))
    for split in ('train', 'val'):
        (tmp_path/split).mkdir()
        Image.fromarray(np.concatenate([photo, photo[:, ::-1]], 1)).save(tmp_path/split/'0.jpg', quality=95)
    import gan_callbacks.data.folders as data
    def wh(im): return im.size if isinstance(im, Image.Image) else (im.shape[-1], im.shape[-2])   # PIL image or (C, H, W) tensor
    sizes, decode = [], data.decode_file
    monkeypatch.setattr(data, 'decode_file', lambda fn, size=None: sizes.append(wh(s := decode(fn, size))) or s)
    dls = Pix2pixDataLoaders.from_folder(tmp_path, load_size=72, crop_size=64)
    x, y = (to_uint8(t)[0].astype(int) for t in dls.valid.one_batch())
    assert set(sizes) == {(256, 128)}               # 512 x 256 at 1/2: halves of 128 >= 72; 1/4 would be 64 < 72
    full = Image.open(tmp_path/'val'/'0.jpg')
    for t, box in ((x, (0, 0, 256, 256)), (y, (256, 0, 512, 256))):
        assert np.abs(t - np.asarray(full.crop(box).resize((64, 64), BICUBIC))).mean() < 1.5
    assert Pix2pixDataLoaders.from_folder(tmp_path, load_size=72, crop_size=64).train.one_batch()[0].shape == (1, 3, 64, 64)
    assert sizes[-1] == (256, 128)
    sizes.clear()
    Pix2pixDataLoaders.from_folder(tmp_path, load_size=200, crop_size=64).valid.one_batch()
    assert set(sizes) == {(512, 256)}               # halves of 128 would be below 200: full scale

def test_general_path_for_other_images():
    "8-bit images become uint8 tensors before the augmentation (the fast path); other PIL images stay PIL images"
    rgb = Image.fromarray(noise(6, 5))
    t = ToImage(PILImage)(rgb)
    assert type(t) is TensorImage and t.dtype == torch.uint8 and t.shape == (3, 6, 5)
    assert np.array_equal(t.permute(1, 2, 0).numpy(), np.asarray(rgb))
    g = ToImage(PILImageGray)(rgb.convert('L'))
    assert type(g) is TensorImageGray and g.shape == (1, 6, 5)
    deep = Image.fromarray((noise(6, 5, 1)[..., 0].astype(np.uint16) * 257), 'I;16')
    out = ToImage(PILImage)(deep)
    assert isinstance(out, Image.Image) and out.mode == 'I;16'
    x, = ResizeCropFlip(8, 4)((out,), split_idx=1)
    assert isinstance(x, Image.Image) and x.size == (4, 4)

def test_workers_default(tmp_path):
    "No workers on the CPU; on CUDA one per core, pinned memory, and workers kept across epochs"
    from fastai.torch_core import defaults
    from gan_callbacks.data.fast_loader import loader_defaults
    root = make_aligned(tmp_path)
    for cls, r in ((Pix2pixDataLoaders, root), (UnpairedDataLoaders, make_domains(tmp_path/'u'))):
        for dl in cls.from_folder(r, load_size=14, crop_size=12, device='cpu').loaders:
            assert dl.fake_l.num_workers == 0 and not dl.fake_l.pin_memory and not dl.fake_l.persistent_workers
        fl = cls.from_folder(r, load_size=14, crop_size=12, device='cpu', num_workers=1).train.fake_l
        assert fl.num_workers == 1 and fl.persistent_workers
    n = defaults.cpus
    assert loader_defaults(torch.device('cuda')) == dict(num_workers=n, pin_memory=True, persistent_workers=n > 0)
    assert loader_defaults(torch.device('cuda'), 2, pin_memory=False) == dict(num_workers=2, pin_memory=False, persistent_workers=True)
    assert loader_defaults(torch.device('cpu')) == dict(num_workers=0, pin_memory=False, persistent_workers=False)

class Touch:
    "Touch a file named by this process's PID in `folder` (picklable, unlike a local function)"
    def __init__(self, folder): self.folder = folder
    def __call__(self): (self.folder/str(os.getpid())).touch()

def test_workers_persist_across_epochs(tmp_path):
    "With workers, a loader starts them once and keeps them (unless `persistent_workers=False`); its batches are those of a loader without workers"
    import pickle
    root, starts = make_aligned(tmp_path/'data', n_train=4, n_valid=3, size=20), tmp_path/'starts'
    starts.mkdir()
    wif = Touch(starts)   # fastai's per-worker hook: one file per worker started
    ref = list(Pix2pixDataLoaders.from_folder(root, load_size=20, crop_size=16, bs=2, device='cpu').valid)
    for persist, started in ((True, 2), (False, 6)):
        for f in starts.iterdir(): f.unlink()
        dls = Pix2pixDataLoaders.from_folder(root, load_size=20, crop_size=16, bs=2, device='cpu', num_workers=2,
                                             persistent_workers=persist, wif=wif)
        for epoch in range(3):
            got = list(dls.valid)
            assert len(got) == len(ref) == 2
            assert all(type(a) is type(b) and a.stride() == b.stride() and torch.equal(a, b) for x, y in zip(got, ref) for a, b in zip(x, y))
        assert len(list(starts.iterdir())) == started
        assert sum(len(b[0]) for b in dls.train) == 4   # every training item, once per epoch
        assert pickle.loads(pickle.dumps(dls.valid)).one_batch()[0].shape == (2, 3, 16, 16)   # pickled without its workers
        assert dls.valid.new(bs=1).fake_l.persistent_workers == persist   # `test_dl` and `new` keep the choice

# ---------------------------------------------------------------- bad data

def test_missing_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match='nowhere'): Pix2pixDataLoaders.from_folder(tmp_path/'nowhere')
    save_ab(tmp_path/'train'/'A'/'a.png', noise(4, 2), noise(4, 2))
    with pytest.raises(FileNotFoundError, match=r'train/B'): Pix2pixDataLoaders.from_folder(tmp_path, layout='separate')

def test_empty_folder(tmp_path):
    (tmp_path/'train').mkdir()
    (tmp_path/'train'/'notes.txt').write_text('no images here')
    with pytest.raises(ValueError, match=r'No image files in .*train'): Pix2pixDataLoaders.from_folder(tmp_path)
    make_aligned(tmp_path/'ok', n_valid=1)
    for f in (tmp_path/'ok'/'val').iterdir(): f.unlink()
    with pytest.raises(ValueError, match=r'No image files in .*val'): Pix2pixDataLoaders.from_folder(tmp_path/'ok')
    save_ab(tmp_path/'sep'/'train'/'A'/'a.png', noise(4, 2), noise(4, 2))   # separate folders read as aligned: the layout is named
    (tmp_path/'sep'/'train'/'B').mkdir()
    with pytest.raises(ValueError, match=r"No image files in .*train \(it holds folders A/ and B/: the layout is 'separate', --layout separate\)"):
        Pix2pixDataLoaders.from_folder(tmp_path/'sep')

def test_unmatched_pairs(tmp_path):
    for o,stems in (('A', 'abcx'), ('B', 'abcy')):
        for s in stems: save_ab(tmp_path/'train'/o/f'{s}.png', noise(4, 2), noise(4, 2))
    with pytest.raises(ValueError) as e: Pix2pixDataLoaders.from_folder(tmp_path, layout='separate')
    a,b = tmp_path/'train'/'A',tmp_path/'train'/'B'
    assert f"in {a} but not in {b}: x;" in str(e.value)
    assert f"in {b} but not in {a}: y" in str(e.value)

def test_duplicate_stems(tmp_path):
    for o in 'AB': save_ab(tmp_path/'train'/o/'a.png', noise(4, 2), noise(4, 2))
    save_ab(tmp_path/'train'/'A'/'a.jpg', noise(4, 2), noise(4, 2))
    with pytest.raises(ValueError, match=r"Two images named 'a'"): Pix2pixDataLoaders.from_folder(tmp_path, layout='separate')

def test_too_narrow_to_split(tmp_path):
    make_aligned(tmp_path)
    Image.new('RGB', (1, 4)).save(tmp_path/'train'/'thin.png')
    with pytest.raises(ValueError, match=r'thin\.png is 1x4.*at least 2 columns'): Pix2pixDataLoaders.from_folder(tmp_path)

@pytest.mark.parametrize('w,h', [(48, 16), (9, 4), (8, 8)])
def test_halves_need_not_be_square(tmp_path, w, h):
    "As the reference: split at half the width (the right half gets an odd column), resize each half to a square"
    for split, n in (('train', 2), ('val', 2)):
        for i in range(n):
            (tmp_path/split).mkdir(exist_ok=True)
            Image.fromarray(noise(h, w, seed=i)).save(tmp_path/split/f'{i}.png')
    dls = Pix2pixDataLoaders.from_folder(tmp_path, load_size=18, crop_size=16, bs=2)
    x, y = dls.valid.one_batch()
    assert x.shape == y.shape == (2, 3, 16, 16)
    for i in range(2):
        im = Image.fromarray(noise(h, w, seed=i))
        a, b = im.crop((0, 0, w//2, h)), im.crop((w//2, 0, w, h))
        assert (to_uint8(x)[i] == bicubic(a, 16)).all()
        assert (to_uint8(y)[i] == bicubic(b, 16)).all()

def test_corrupt_files(tmp_path):
    make_aligned(tmp_path)
    (tmp_path/'val'/'garbage.png').write_bytes(b'certainly not a png')
    with pytest.raises(ValueError, match=r'Cannot read image .*garbage\.png'): Pix2pixDataLoaders.from_folder(tmp_path)
    (tmp_path/'val'/'garbage.png').unlink()
    data = (tmp_path/'val'/'00.png').read_bytes()
    (tmp_path/'val'/'cut.png').write_bytes(data[:len(data)//2])
    with pytest.raises(ValueError, match=r'Cannot read image .*cut\.png'): Pix2pixDataLoaders.from_folder(tmp_path)

def test_unreadable_at_load_time_names_file(tmp_path):
    "A file that breaks after the checks (or with check=False) still names itself"
    make_aligned(tmp_path)
    (tmp_path/'val'/'00.png').write_bytes(b'broken')
    dls = Pix2pixDataLoaders.from_folder(tmp_path, check=False, load_size=18, crop_size=16, bs=2)
    with pytest.raises(OSError, match=r'00\.png'): dls.valid.one_batch()

def test_bad_sizes_and_options(tmp_path):
    make_aligned(tmp_path)
    with pytest.raises(ValueError, match=r'crop_size \(300\) is larger than load_size \(286\)'):
        Pix2pixDataLoaders.from_folder(tmp_path, crop_size=300)
    with pytest.raises(ValueError, match=r'multiple of 256 \(2\*\*num_downs with num_downs=8\)'):
        Pix2pixDataLoaders.from_folder(tmp_path, load_size=143, crop_size=128, num_downs=8)
    with pytest.raises(ValueError, match='multiple of 128'):
        Pix2pixDataLoaders.from_folder(tmp_path, load_size=286, crop_size=250, num_downs=7)
    Pix2pixDataLoaders.from_folder(tmp_path, load_size=18, crop_size=16, num_downs=4)
    with pytest.raises(ValueError, match='layout'): Pix2pixDataLoaders.from_folder(tmp_path, layout='stacked')
    with pytest.raises(ValueError, match='direction'): Pix2pixDataLoaders.from_folder(tmp_path, direction='AB')
    with pytest.raises(ValueError, match=r'1 \(gray\), 3 \(RGB\) or 4'): Pix2pixDataLoaders.from_folder(tmp_path, in_ch=2)
    with pytest.raises(ValueError, match='bs=8'): Pix2pixDataLoaders.from_folder(tmp_path, load_size=18, crop_size=16, bs=8)

# ---------------------------------------------------------------- sample dataset

@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv('GAN_CALLBACKS_HOME', str(tmp_path))
    return tmp_path

def read_dir(p): return {f.relative_to(p): f.read_bytes() for f in sorted(p.rglob('*')) if f.is_file()}

def test_sample_pairs_layout_and_cache(home):
    p = sample_pairs(n_train=8, n_valid=3, size=32)
    assert p.parent == home and p.name.startswith('sample_colorize_32')
    assert [len(list((p/s).glob('*.png'))) for s in ('train', 'val')] == [8, 3]
    assert (p/'train'/'0000.png').exists() and (p/'val'/'0002.png').exists()
    ab = np.asarray(Image.open(p/'train'/'0003.png'))
    assert ab.shape == (32, 64, 3)
    a,b = ab[:, :32].astype(int), ab[:, 32:]
    assert (a[..., 0] == a[..., 1]).all() and (a[..., 1] == a[..., 2]).all()
    assert np.abs(a[..., 0] - np.asarray(Image.fromarray(b).convert('L'))).max() == 0
    mtime = (p/'train'/'0000.png').stat().st_mtime_ns
    assert sample_pairs(n_train=8, n_valid=3, size=32) == p
    assert (p/'train'/'0000.png').stat().st_mtime_ns == mtime      # reused, not rebuilt
    assert not [o for o in home.iterdir() if o.name.startswith('.')]  # no temporary folders left

@pytest.mark.slow
def test_sample_pairs_default_location(home):
    assert sample_pairs(n_train=400, n_valid=40, size=16, kind='edges', path=None).name == 'sample_edges_16'

def test_sample_pairs_deterministic(home):
    p = sample_pairs(n_train=6, n_valid=2, size=32, seed=3)
    first = read_dir(p)
    assert sample_pairs(n_train=6, n_valid=2, size=32, seed=3, force=True) == p
    assert read_dir(p) == first
    other = sample_pairs(home/'other', n_train=6, n_valid=2, size=32, seed=3)
    assert read_dir(other) == first
    assert read_dir(sample_pairs(n_train=6, n_valid=2, size=32, seed=4)) != first

def test_sample_pairs_validation_strip_held_out(home):
    p = sample_pairs(n_train=60, n_valid=20, size=16)
    rows = list(csv.DictReader(open(p/'pairs.csv')))
    assert len(rows) == 80
    sizes = {n: sample_photo(n).size for n in sample_photos}
    for r in rows:
        l, t, s = int(r['left']), int(r['top']), int(r['side'])
        rl, rt, rr, rb = sample_regions(*sizes[r['photo']])[r['split'] == 'val']
        assert rl <= l and rt <= t and l + s <= rr and t + s <= rb, r     # inside its own part of the photo
        assert s >= 0.3 * min(sizes[r['photo']]) - 1 or s == min(rr - rl, rb - rt), r
    for split in ('train', 'val'): assert len({r['photo'] for r in rows if r['split'] == split}) > 4

def test_sample_pairs_edges(home):
    p = sample_pairs(n_train=4, n_valid=2, size=32, kind='edges')
    a = np.asarray(Image.open(p/'train'/'0000.png'))[:, :32]
    assert set(np.unique(a)) <= {0, 255} and (a == 255).mean() > 0.5    # black edges on white
    with pytest.raises(ValueError, match='kind'): sample_pairs(kind='sketch')

def test_sample_pairs_does_not_overwrite_other_folders(home):
    (home/'mine').mkdir(); (home/'mine'/'keep.txt').write_text('x')
    with pytest.raises(FileExistsError): sample_pairs(home/'mine', n_train=2, n_valid=1, size=16)
    assert (home/'mine'/'keep.txt').exists()

def test_sample_pairs_loads(home):
    dls = Pix2pixDataLoaders.from_folder(sample_pairs(n_train=8, n_valid=2, size=32), load_size=36, crop_size=32,
                                         bs=4, num_downs=5)
    x,y = dls.one_batch()
    assert x.shape == y.shape == (4, 3, 32, 32)

# ---------------------------------------------------------------- unpaired images

def make_domains(root, sizes=dict(trainA=5, trainB=3, testA=2, testB=1), side=12, ch=None):
    "Random noise images in `root/<folder>`, image `i` of folder `f` seeded by (f, i)"
    for k, (f, n) in enumerate(sizes.items()):
        (root/f).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            c = (ch or {}).get(f, 3)
            a = noise(side, side, c, seed=100*k+i)
            Image.fromarray(a[..., 0] if c == 1 else a).save(root/f/f'{f}_{i}.png')
    return root

def ids(t, lookup):
    "Which of the `lookup` images (uint8 HWC arrays, resized to the batch's size) each image of batch `t` is"
    return [next(k for k, v in lookup.items() if np.array_equal(v, o)) for o in to_uint8(t)]

def valid_images(root, folder, size):
    return {f.name: bicubic(Image.open(f).convert('RGB'), size) for f in sorted((root/folder).iterdir())}

def test_unpaired_batches(tmp_path):
    root = make_domains(tmp_path)
    dls = UnpairedDataLoaders.from_folder(root, load_size=18, crop_size=16, bs=2)
    assert isinstance(dls, UnpairedDataLoaders) and type(dls.train) is type(dls.valid) is UnpairedDL
    assert dls.n_inp == 2 and (dls.in_ch, dls.out_ch, dls.load_size, dls.crop_size) == (3, 3, 18, 16)
    assert (len(dls.train_ds), len(dls.valid_ds)) == (5, 2)          # the A images set the epoch
    assert len(dls.train) == 2                                       # drop_last on the shuffled training set
    a, b = dls.train.one_batch()
    assert a.shape == b.shape == (2, 3, 16, 16) and isinstance(a, TensorImage) and isinstance(b, TensorImage)
    for t in (a, b): assert -1 <= t.min() < 0 < t.max() <= 1
    # validation: testA in order, each with testB i % 1, resized to crop_size
    a, b = dls.valid.one_batch()
    assert ids(a, valid_images(root, 'testA', 16)) == ['testA_0.png', 'testA_1.png']
    assert ids(b, valid_images(root, 'testB', 16)) == ['testB_0.png'] * 2

def test_unpaired_pairing_changes_every_epoch_and_follows_rng(tmp_path):
    root = make_domains(tmp_path, dict(trainA=6, trainB=6, testA=1, testB=1), side=8)
    set_seed(0)
    dls = UnpairedDataLoaders.from_folder(root, load_size=8, crop_size=8, bs=1, seed=0)
    lookup = {**{f'A{k}': v[:, ::-1] for k, v in valid_images(root, 'trainA', 8).items()}, **valid_images(root, 'trainA', 8),
              **{f'B{k}': v[:, ::-1] for k, v in valid_images(root, 'trainB', 8).items()}, **valid_images(root, 'trainB', 8)}
    def epoch():
        return [(ids(a, lookup)[0].lstrip('A').split('_')[1], ids(b, lookup)[0].lstrip('B').split('_')[1]) for a, b in dls.train]
    state = dls.train.rng.getstate()
    epochs = [epoch() for _ in range(8)]
    for e in epochs: assert sorted(a for a, _ in e) == [f'{i}.png' for i in range(6)]   # every A image once
    assert len({tuple(e) for e in epochs}) == 8                                          # pairings differ
    assert len({b for e in epochs for _, b in e}) == 6                                   # B drawn from all of trainB
    assert any(len({b for _, b in e}) < 6 for e in epochs)                              # with replacement, as the reference
    dls.train.rng.setstate(state)
    torch.manual_seed(123)   # other generators do not matter for the pairing
    assert epoch() == epochs[0]

def test_unpaired_independent_augmentation(tmp_path):
    "trainA and trainB hold the same image: its two crops and flips are drawn separately, each a real crop"
    root = tmp_path
    for f in ('trainA', 'trainB', 'testA', 'testB'):
        (root/f).mkdir()
        Image.fromarray(noise(14, 14, seed=7)).save(root/f/'x.png')
    dls = UnpairedDataLoaders.from_folder(root, load_size=20, crop_size=16, bs=1)
    expected = crops_of(bicubic(Image.fromarray(noise(14, 14, seed=7)), 20), 16)
    keys = []
    for _ in range(20):
        a, b = dls.train.one_batch()
        ka, kb = ([k for k, v in expected.items() if np.array_equal(v, o)] for o in (to_uint8(a)[0], to_uint8(b)[0]))
        assert len(ka) == len(kb) == 1
        keys.append((ka[0], kb[0]))
    assert sum(ka != kb for ka, kb in keys) >= 15          # a shared crop would make them always equal
    assert {k[2] for k, _ in keys} == {False, True} and {k[2] for _, k in keys} == {False, True}
    a, b = dls.valid.one_batch()
    assert torch.equal(a, b)                                # validation: both only resized

def test_unpaired_channels_and_sizes(tmp_path):
    root = make_domains(tmp_path, ch=dict(trainA=1, testA=1))
    dls = UnpairedDataLoaders.from_folder(root, load_size=18, crop_size=16, bs=2, in_ch=1, out_ch=4)
    a, b = dls.train.one_batch()
    assert a.shape == (2, 1, 16, 16) and b.shape == (2, 4, 16, 16) and (b[:, 3] == 1).all()
    assert (dls.in_ch, dls.out_ch) == (1, 4)
    e = dls.new_empty()
    assert type(e) is UnpairedDataLoaders and (e.in_ch, e.out_ch, e.n_inp) == (1, 4, 2)

def test_unpaired_random_split(tmp_path):
    root = make_domains(tmp_path, dict(trainA=10, trainB=5))
    dls = UnpairedDataLoaders.from_folder(root, valid_pct=0.2, seed=1, load_size=18, crop_size=16)
    assert (len(dls.train_ds), len(dls.valid_ds)) == (8, 2)
    assert (len(dls.train_ds.tls[1]), len(dls.valid_ds.tls[1])) == (4, 1)
    again = UnpairedDataLoaders.from_folder(root, valid_pct=0.2, seed=1, load_size=18, crop_size=16)
    assert list(again.valid_ds.tls[1].items) == list(dls.valid_ds.tls[1].items)
    assert not set(dls.train_ds.items) & set(dls.valid_ds.items)

def test_unpaired_learner_no_target_show_and_export(tmp_path):
    "Both images are inputs and there is no target: the model gets (A, B); fastai then calls no loss (a trainer supplies it)"
    dls = UnpairedDataLoaders.from_folder(make_domains(tmp_path/'d'), load_size=18, crop_size=16, bs=2)
    class Both(nn.Module):
        def __init__(self): super().__init__(); self.conv = nn.Conv2d(3, 3, 1)
        def forward(self, a, b): seen.append((a.shape, b.shape)); return self.conv(a) - b
    seen, losses = [], []
    learn = Learner(dls, Both(), loss_func=lambda out, *ys: losses.append(len(ys)) or out.abs().mean(), path=tmp_path,
                    cbs=Callback(after_pred=lambda cb: batches.append((len(learn.xb), learn.yb))))
    batches = []
    learn.fit(1, 1e-2)
    assert seen == [((2, 3, 16, 16), (2, 3, 16, 16))] * 3 and batches == [(2, ())] * 3
    assert losses == []   # fastai's Learner skips loss, backward and step when `yb` is empty
    dls.show_batch(max_n=2)
    axes = plt.gcf().axes
    assert len(axes) == 4 and [a.get_images()[0].get_array().shape for a in axes[:2]] == [(16, 16, 3)] * 2
    plt.close('all')
    learn.export(tmp_path/'l.pkl')
    assert type(load_learner(tmp_path/'l.pkl').dls) is UnpairedDataLoaders

def test_unpaired_bad_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"Folder not found: {tmp_path/'trainA'}"): UnpairedDataLoaders.from_folder(tmp_path)
    make_domains(tmp_path, dict(trainA=2, testA=1, testB=1))
    with pytest.raises(FileNotFoundError, match=f"Folder not found: {tmp_path/'trainB'}"): UnpairedDataLoaders.from_folder(tmp_path)
    (tmp_path/'trainB').mkdir(); (tmp_path/'trainB'/'readme.txt').write_text('no images')
    with pytest.raises(ValueError, match=f"No image files in {tmp_path/'trainB'}"): UnpairedDataLoaders.from_folder(tmp_path)
    make_domains(tmp_path, dict(trainB=2))
    (tmp_path/'testB'/'testB_0.png').unlink()
    with pytest.raises(ValueError, match=f"No image files in {tmp_path/'testB'}"): UnpairedDataLoaders.from_folder(tmp_path)
    shutil.rmtree(tmp_path/'testB')
    with pytest.raises(FileNotFoundError, match=f"Folder not found: {tmp_path/'testB'}"): UnpairedDataLoaders.from_folder(tmp_path)
    shutil.rmtree(tmp_path/'testA')   # no test folders at all: a random split
    assert len(UnpairedDataLoaders.from_folder(tmp_path, load_size=18, crop_size=16, valid_pct=0.5).valid_ds) == 1
    (tmp_path/'trainB'/'bad.png').write_bytes(b'not a png')
    with pytest.raises(ValueError, match=r'Cannot read image .*trainB/bad\.png'): UnpairedDataLoaders.from_folder(tmp_path)
    (tmp_path/'trainB'/'bad.png').unlink()
    with pytest.raises(ValueError, match=r'No training batch: 1 A images in .*trainA for bs=2'):
        UnpairedDataLoaders.from_folder(tmp_path, load_size=18, crop_size=16, bs=2, valid_pct=0.5)
    with pytest.raises(ValueError, match=r'crop_size \(20\) is larger'): UnpairedDataLoaders.from_folder(tmp_path, load_size=18, crop_size=20)
    with pytest.raises(ValueError, match='multiple of 4'): UnpairedDataLoaders.from_folder(tmp_path, load_size=18, crop_size=14, num_downs=2)

# ---------------------------------------------------------------- unpaired sample

def test_sample_mapping():
    im = Image.fromarray(noise(5, 7))
    out = np.asarray(sample_mapping(im))
    assert np.array_equal(out, 255 - np.asarray(im))
    assert np.array_equal(np.asarray(sample_mapping(Image.fromarray(out))), np.asarray(im))   # its own inverse
    gray = sample_mapping(im.convert('L'))
    assert gray.mode == 'RGB' and np.array_equal(np.asarray(gray)[..., 0], 255 - np.asarray(im.convert('L')))

def test_sample_unpaired_layout_and_truth(home):
    p = sample_unpaired(n_train=10, n_test=4, size=16)
    assert p.parent == home and p.name == 'sample_unpaired_16_10_4_42'
    counts = {f: len(list((p/f).glob('*.png'))) for f in ('trainA', 'trainB', 'testA', 'testB', 'testA_true')}
    assert counts == dict(trainA=10, trainB=10, testA=4, testB=4, testA_true=4)
    rows = list(csv.DictReader(open(p/'crops.csv')))
    by = {(r['split'], r['file']): r for r in rows}
    sizes = {n: sample_photo(n).size for n in sample_photos}
    for r in rows:   # training crops from the training part of each photo, test crops from the held-out part
        rl, rt, rr, rb = sample_regions(*sizes[r['photo']])[r['split'].startswith('test')]
        l, t, s = int(r['left']), int(r['top']), int(r['side'])
        assert rl <= l and rt <= t and l + s <= rr and t + s <= rb
    for f in sorted((p/'testA').iterdir()):
        assert {k: v for k, v in by['testA_true', f.name].items() if k != 'split'} == {k: v for k, v in by['testA', f.name].items() if k != 'split'}
        assert np.array_equal(np.asarray(Image.open(p/'testA_true'/f.name)), 255 - np.asarray(Image.open(f)))
    # B is other crops than A, mapped: no B image is the mapping of an A image
    key = lambda r: (r['photo'], r['left'], r['top'], r['side'])
    assert not {key(by['trainA', f'{i:04d}.png']) for i in range(10)} & {key(by['trainB', f'{i:04d}.png']) for i in range(10)}
    b = np.asarray(Image.open(p/'trainB'/'0000.png'))
    rb = by['trainB', '0000.png']
    photo = sample_photo(rb['photo'])
    l, t, s = int(rb['left']), int(rb['top']), int(rb['side'])
    crop = 255 - np.asarray(photo.resize((16, 16), BICUBIC, box=(l, t, l+s, t+s))).astype(int)
    assert np.abs(crop - b).mean() < 12       # the mapped crop (cut here from the full-size photo)
    assert sample_unpaired(n_train=10, n_test=4, size=16) == p and read_dir(p) == read_dir(sample_unpaired(home/'x', n_train=10, n_test=4, size=16))

def test_sample_unpaired_loads(home):
    dls = UnpairedDataLoaders.from_folder(sample_unpaired(n_train=6, n_test=2, size=32), load_size=36, crop_size=32, bs=2)
    a, b = dls.one_batch()
    assert a.shape == b.shape == (2, 3, 32, 32)
    assert (len(dls.train_ds), len(dls.valid_ds)) == (6, 2)

def test_unpaired_epoch_is_the_larger_domain(tmp_path):
    "As the reference's unaligned dataset: an epoch has max(|A|, |B|) items, A repeated when B is larger"
    root = make_domains(tmp_path, dict(trainA=2, trainB=7, testA=1, testB=1), side=8)
    dls = UnpairedDataLoaders.from_folder(root, load_size=8, crop_size=8, bs=1)
    assert len(dls.train) == 7 and len(dls.valid) == 1
    lookup = {**valid_images(root, 'trainA', 8), **{'flipped' + k: v[:, ::-1] for k, v in valid_images(root, 'trainA', 8).items()}}
    a_seen = [ids(a, lookup)[0].replace('flipped', '') for a, _ in dls.train]
    assert len(a_seen) == 7 and sorted(set(a_seen)) == ['trainA_0.png', 'trainA_1.png']
    assert sorted(a_seen.count(k) for k in set(a_seen)) == [3, 4]   # A visited max(|A|, |B|) // |A| or one more times
    assert len(UnpairedDataLoaders.from_folder(root, load_size=8, crop_size=8, bs=3).train) == 2   # drop_last over 7 items

# ---------------------------------------------------------------- decoding to tensors

@pytest.mark.parametrize('name,mode,kw,fast', [
    ('rgb.png', 'RGB', {}, True), ('gray.png', 'L', {}, True), ('rgba.png', 'RGBA', {}, True),
    ('rgb.jpg', 'RGB', dict(quality=90), True), ('gray.jpg', 'L', {}, True), ('prog.jpg', 'RGB', dict(progressive=True), True),
    ('sub.jpg', 'RGB', dict(subsampling=0, quality=75), True),
    ('pal.png', 'P', {}, False), ('la.png', 'LA', {}, False), ('one.png', '1', {}, False), ('cmyk.jpg', 'CMYK', {}, False),
    ('rgb.bmp', 'RGB', {}, False), ('gamma.png', 'RGB', 'gamma', True), ('trns.png', 'RGB', 'trns', False)])
@pytest.mark.parametrize('png', ['libspng', 'torchvision'])
def test_decode_file_gives_pillows_pixels(tmp_path, monkeypatch, name, mode, kw, fast, png):
    """`decode_file` decodes 8-bit gray/RGB/RGBA JPEGs and PNGs to tensors (torchvision, or libspng for PNGs) and leaves
    every other file to Pillow; either way `in_mode` gives exactly Pillow's pixels in every mode the loaders ask for"""
    import gan_callbacks.data.images as images
    if png == 'libspng': assert images.pyspng is not None, 'pyspng (a dev requirement) is not installed'
    else: monkeypatch.setattr(images, 'pyspng', None)
    fn, im = tmp_path/name, smooth(24, 40).convert(mode)
    if kw == 'gamma':   # a gAMA chunk: Pillow, like both decoders, leaves the values as stored
        from PIL.PngImagePlugin import PngInfo
        kw = dict(pnginfo=PngInfo()); kw['pnginfo'].add(b'gAMA', (45455).to_bytes(4, 'big'))
    if kw == 'trns': kw = dict(transparency=im.getpixel((0, 0)))   # that colour becomes transparent in Pillow's RGBA
    im.save(fn, **kw)
    x = decode_file(fn)
    assert isinstance(x, torch.Tensor) == fast
    pil = Image.open(fn)
    for m in ('L', 'RGB', 'RGBA'):
        y = in_mode(x, m)
        a = y.permute(1, 2, 0).squeeze(-1).numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        assert np.array_equal(a, np.asarray(pil.convert(m))), m
        assert isinstance(y, torch.Tensor) == (fast and m != 'RGBA' and {1: 'L', 3: 'RGB', 4: 'RGBA'}[x.shape[0]] == m)
