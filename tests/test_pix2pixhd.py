"pix2pixHD: the networks key for key the reference's, its losses, label-map data, and Pix2pixHDTrainer against a plain PyTorch loop."
import pytest, torch
from pathlib import Path
import torch.nn.functional as F
from torch import nn
from gan_callbacks.nets.hd_networks import GlobalGenerator, LocalEnhancer, MultiscaleDiscriminator


def n_params(m): return sum(p.numel() for p in m.parameters())
def shapes(m): return {k: tuple(v.shape) for k, v in m.state_dict().items()}


# --- the networks, key for key the reference's (NVIDIA/pix2pixHD 14b3b3c, models/networks.py)

# Parameter counts of the reference's networks at its defaults (label_nc 35 + 1 instance channel in, 3 out; D sees 39),
# printed by running its models/networks.py: define_G(36, 3, 64, 'global'|'local', 4, 9, 1, 3, 'instance') and
# define_D(39, 64, 3, 'instance', False, 2, getIntermFeat) (the same count with and without intermediate features).
REF_GLOBAL, REF_LOCAL, REF_D = 182_546_755, 731_036_355, 5_603_202

def ref_g_keys(in_ch, out_ch, ngf, n_down, n_blocks, prefix='model', last=True):
    "The reference's `GlobalGenerator` layout (name -> shape), instance norm: one `model` Sequential"
    ks = {f'{prefix}.1.weight': (ngf, in_ch, 7, 7), f'{prefix}.1.bias': (ngf,)}
    i, c = 4, ngf
    for _ in range(n_down):   # conv 3x3 stride 2, norm, ReLU
        ks.update({f'{prefix}.{i}.weight': (2*c, c, 3, 3), f'{prefix}.{i}.bias': (2*c,)}); i, c = i + 3, 2*c
    for _ in range(n_blocks):   # pad, conv, norm, ReLU, pad, conv, norm
        for j in (1, 5): ks.update({f'{prefix}.{i}.conv_block.{j}.weight': (c, c, 3, 3), f'{prefix}.{i}.conv_block.{j}.bias': (c,)})
        i += 1
    for _ in range(n_down):   # transposed conv 3x3 stride 2, norm, ReLU
        ks.update({f'{prefix}.{i}.weight': (c, c//2, 3, 3), f'{prefix}.{i}.bias': (c//2,)}); i, c = i + 3, c//2
    if last: ks.update({f'{prefix}.{i+1}.weight': (out_ch, ngf, 7, 7), f'{prefix}.{i+1}.bias': (out_ch,)})   # pad, conv, Tanh
    return ks

def ref_local_keys(in_ch, out_ch, ngf, n_down, n_blocks, n_local, n_blocks_local):
    "The reference's `LocalEnhancer` layout: the global `model` without its last conv, then `model{n}_1` and `model{n}_2`"
    ks = ref_g_keys(in_ch, out_ch, ngf * 2**n_local, n_down, n_blocks, last=False)
    for n in range(1, n_local + 1):
        c = ngf * 2**(n_local - n)
        ks.update({f'model{n}_1.1.weight': (c, in_ch, 7, 7), f'model{n}_1.1.bias': (c,),
                   f'model{n}_1.4.weight': (2*c, c, 3, 3), f'model{n}_1.4.bias': (2*c,)})
        for b in range(n_blocks_local):
            for j in (1, 5): ks.update({f'model{n}_2.{b}.conv_block.{j}.weight': (2*c, 2*c, 3, 3), f'model{n}_2.{b}.conv_block.{j}.bias': (2*c,)})
        i = n_blocks_local
        ks.update({f'model{n}_2.{i}.weight': (2*c, c, 3, 3), f'model{n}_2.{i}.bias': (c,)})
        if n == n_local: ks.update({f'model{n}_2.{i+4}.weight': (out_ch, ngf, 7, 7), f'model{n}_2.{i+4}.bias': (out_ch,)})
    return ks

def ref_d_chans(in_ch, ndf, n_layers):
    "The (in, out) channels of the convolutions of one reference `NLayerDiscriminator`: capped at 512"
    cs, nf = [(in_ch, ndf)], ndf
    for _ in range(n_layers): cs.append((nf, min(nf*2, 512))); nf = min(nf*2, 512)
    return cs + [(nf, 1)]

def ref_d_keys(in_ch, ndf, n_layers, num_D, interm):
    "The reference's `MultiscaleDiscriminator` layout: `scale{i}_layer{j}.0` with intermediate features, else `layer{i}.{k}`"
    ks = {}
    for i in range(num_D):
        k = 0
        for j, (a, b) in enumerate(ref_d_chans(in_ch, ndf, n_layers)):
            name = f'scale{i}_layer{j}.0' if interm else f'layer{i}.{k}'
            ks.update({f'{name}.weight': (b, a, 4, 4), f'{name}.bias': (b,)})
            k += 2 if j == 0 else 3
    return ks

def test_reference_defaults_key_for_key():
    "At the reference's defaults: its parameter counts, and its names and shapes written out from its layout"
    with torch.device('meta'):   # no memory, no time: 731M parameters for the local enhancer
        G, L = GlobalGenerator(36, 3), LocalEnhancer(36, 3)
        Ds = [MultiscaleDiscriminator(39, get_interm_feat=f) for f in (True, False)]
    assert (n_params(G), n_params(L)) == (REF_GLOBAL, REF_LOCAL)
    assert [n_params(D) for D in Ds] == [REF_D, REF_D]
    assert shapes(G) == ref_g_keys(36, 3, 64, 4, 9) and len(shapes(G)) == 56
    assert shapes(L) == ref_local_keys(36, 3, 64, 4, 9, 1, 3) and len(shapes(L)) == 74
    assert shapes(Ds[0]) == ref_d_keys(39, 64, 3, 2, True) and shapes(Ds[1]) == ref_d_keys(39, 64, 3, 2, False)
    assert list(G.state_dict()) == list(ref_g_keys(36, 3, 64, 4, 9))   # the order too
    assert (G.multiple, L.multiple) == (16, 32)

@pytest.mark.parametrize('n_local', [1, 2])
def test_small_layouts(n_local):
    "Other sizes: more enhancers, batch norm (running statistics), more scales"
    assert shapes(LocalEnhancer(5, 2, 4, 2, 1, n_local, 2)) == ref_local_keys(5, 2, 4, 2, 1, n_local, 2)
    G = GlobalGenerator(5, 2, 4, 2, 1, norm='batch')
    bn = [f'model.{i}' for i in (2, 5, 8, 12, 15)] + ['model.10.conv_block.2', 'model.10.conv_block.6']
    bn_keys = {f'{m}.{k}' for m in bn for k in ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')}
    sd = shapes(G)
    assert set(sd) - bn_keys == set(ref_g_keys(5, 2, 4, 2, 1)) and bn_keys <= set(sd)
    assert all(G.state_dict()[k].abs().sum() > 0 for k in ('model.1.bias', 'model.4.bias'))   # biases kept with batch norm
    assert shapes(MultiscaleDiscriminator(9, 4, 2, num_D=3)) == ref_d_keys(9, 4, 2, 3, True)

# a forward written from the reference's layout with functional ops, on any state dict of that layout
def _inorm(x): return F.instance_norm(x)

def ref_global_forward(sd, x, n_down, n_blocks, prefix='model', last=True):
    conv = lambda x, i, **kw: F.conv2d(x, sd[f'{prefix}.{i}.weight'], sd[f'{prefix}.{i}.bias'], **kw)
    x = F.relu(_inorm(conv(F.pad(x, (3,)*4, mode='reflect'), 1)))
    i = 4
    for _ in range(n_down): x = F.relu(_inorm(conv(x, i, stride=2, padding=1))); i += 3
    for _ in range(n_blocks):
        w = lambda j: (sd[f'{prefix}.{i}.conv_block.{j}.weight'], sd[f'{prefix}.{i}.conv_block.{j}.bias'])
        h = F.relu(_inorm(F.conv2d(F.pad(x, (1,)*4, mode='reflect'), *w(1))))
        x = x + _inorm(F.conv2d(F.pad(h, (1,)*4, mode='reflect'), *w(5))); i += 1
    for _ in range(n_down):
        x = F.relu(_inorm(F.conv_transpose2d(x, sd[f'{prefix}.{i}.weight'], sd[f'{prefix}.{i}.bias'], stride=2, padding=1, output_padding=1))); i += 3
    return torch.tanh(conv(F.pad(x, (3,)*4, mode='reflect'), i + 1)) if last else x

def _pool(x): return F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)

def ref_local_forward(sd, x, n_down, n_blocks, n_local, n_blocks_local):
    xs = [x]
    for _ in range(n_local): xs.append(_pool(xs[-1]))
    out = ref_global_forward(sd, xs[-1], n_down, n_blocks, last=False)
    for n in range(1, n_local + 1):
        w = lambda k: (sd[f'model{n}_{k}.weight'], sd[f'model{n}_{k}.bias'])
        h = F.relu(_inorm(F.conv2d(F.pad(xs[n_local - n], (3,)*4, mode='reflect'), *w('1.1'))))
        h = F.relu(_inorm(F.conv2d(h, *w('1.4'), stride=2, padding=1))) + out
        for b in range(n_blocks_local):
            g = F.relu(_inorm(F.conv2d(F.pad(h, (1,)*4, mode='reflect'), *w(f'2.{b}.conv_block.1'))))
            h = h + _inorm(F.conv2d(F.pad(g, (1,)*4, mode='reflect'), *w(f'2.{b}.conv_block.5')))
        out = F.relu(_inorm(F.conv_transpose2d(h, *w(f'2.{n_blocks_local}'), stride=2, padding=1, output_padding=1)))
        if n == n_local: out = torch.tanh(F.conv2d(F.pad(out, (3,)*4, mode='reflect'), *w(f'2.{n_blocks_local + 4}')))
    return out

def ref_d_forward(sd, x, n_layers, num_D):
    "Every layer's output of every scale, finest first, from the `scale{i}_layer{j}` weights"
    res = []
    for s in range(num_D):
        i, feats, h = num_D - 1 - s, [], x
        for j in range(n_layers + 2):
            w, b = sd[f'scale{i}_layer{j}.0.weight'], sd[f'scale{i}_layer{j}.0.bias']
            h = F.conv2d(h, w, b, stride=2 if j < n_layers else 1, padding=2)
            if 0 < j <= n_layers: h = _inorm(h)
            if j <= n_layers: h = F.leaky_relu(h, 0.2)
            feats.append(h)
        res.append(feats)
        x = _pool(x)
    return res

def random_reference_file(keys, path, seed=0):
    "A `latest_net_G.pth` as the reference saves it: a plain state dict, here random tensors of its shapes"
    g = torch.Generator().manual_seed(seed)
    sd = {k: torch.randn(s, generator=g) * 0.1 for k, s in keys.items()}
    torch.save(sd, path)
    return sd

def test_reference_checkpoints_load_strictly_same_outputs(tmp_path):
    "A file in the reference's layout loads strictly and gives what its layout computes: the image, every D feature"
    x = torch.randn(2, 7, 32, 32)
    sd = random_reference_file(ref_g_keys(7, 3, 4, 2, 2), tmp_path/'latest_net_G.pth')
    G = GlobalGenerator(7, 3, 4, 2, 2); G.load_state_dict(torch.load(tmp_path/'latest_net_G.pth'), strict=True)
    torch.testing.assert_close(G(x), ref_global_forward(sd, x, 2, 2), atol=1e-5, rtol=0)
    sd = random_reference_file(ref_local_keys(7, 3, 4, 2, 1, 2, 1), tmp_path/'latest_net_G.pth')
    L = LocalEnhancer(7, 3, 4, 2, 1, 2, 1); L.load_state_dict(torch.load(tmp_path/'latest_net_G.pth'), strict=True)
    torch.testing.assert_close(L(x), ref_local_forward(sd, x, 2, 1, 2, 1), atol=1e-5, rtol=0)
    sd = random_reference_file(ref_d_keys(10, 4, 2, 3, True), tmp_path/'latest_net_D.pth')
    D = MultiscaleDiscriminator(10, 4, 2, num_D=3); D.load_state_dict(torch.load(tmp_path/'latest_net_D.pth'), strict=True)
    y = torch.randn(2, 10, 64, 48)
    out, ref = D(y), ref_d_forward(sd, y, 2, 3)
    assert [len(o) for o in out] == [4, 4, 4]
    for a, b in zip(out, ref):
        for u, v in zip(a, b): torch.testing.assert_close(u, v, atol=1e-5, rtol=0)
    flat = MultiscaleDiscriminator(10, 4, 2, num_D=3, get_interm_feat=False)
    # without intermediate features the same weights under `layer{i}.{k}` give the last feature of each scale
    ren = {}
    for i in range(3):
        for j, k in enumerate([0, 2, 5, 8]): ren[f'layer{i}.{k}.weight'], ren[f'layer{i}.{k}.bias'] = sd[f'scale{i}_layer{j}.0.weight'], sd[f'scale{i}_layer{j}.0.bias']
    flat.load_state_dict(ren, strict=True)
    for a, b in zip(flat(y), ref): torch.testing.assert_close(a[-1], b[-1], atol=1e-5, rtol=0); assert len(a) == 1

def test_init_is_the_reference():
    "Conv weights N(0, 0.02), conv biases PyTorch's default (not zeroed), BatchNorm weights N(1, 0.02) and biases 0"
    torch.manual_seed(0)
    G = GlobalGenerator(36, 3, 16, 2, 2, norm='batch')
    w = torch.cat([m.weight.flatten() for m in G.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))])
    assert abs(w.std().item() - 0.02) < 1e-3 and abs(w.mean().item()) < 1e-3
    first = G.model[1]
    assert first.bias.abs().max() > 0.01 and first.bias.abs().max() <= 1 / (36 * 49) ** 0.5   # PyTorch's U(-1/sqrt(fan_in), ...)
    bn = [m for m in G.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(m.bias.abs().sum() == 0 for m in bn) and abs(torch.cat([m.weight for m in bn]).mean().item() - 1) < 0.01


# --- the losses

from gan_callbacks.nets.hd_losses import MultiscaleGANLoss, FeatureMatchingLoss, VGG19Features, VGGLoss, vgg19_sha256_prefix

def test_vgg_is_torchvision_layout_and_slices(tmp_path):
    "torchvision's VGG19 file loads (names `features.N`, classifier ignored); the five features are its relu1_1 ... relu5_1"
    import torchvision, warnings
    tv = torchvision.models.vgg19(weights=None).eval()   # random weights, nothing downloaded
    torch.save(tv.state_dict(), tmp_path/'vgg19.pth')
    with pytest.warns(UserWarning, match=vgg19_sha256_prefix): vgg = VGG19Features.from_file(tmp_path/'vgg19.pth')
    x = torch.randn(1, 3, 32, 32)
    ref, h = [], x
    for a, b in ((0, 2), (2, 7), (7, 12), (12, 21), (21, 30)):
        h = tv.features[a:b](h); ref.append(h)
    for u, v in zip(vgg(x), ref): torch.testing.assert_close(u, v)
    fake, real = torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32)
    want = sum(w * F.l1_loss(a, b) for w, a, b in zip((1/32, 1/16, 1/8, 1/4, 1), vgg(fake), vgg(real)))
    torch.testing.assert_close(VGGLoss(vgg)(fake, real), want)
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in tv.state_dict().items()}, tmp_path/'vgg19.safetensors')
    torch.testing.assert_close(VGG19Features.from_file(tmp_path/'vgg19.safetensors')(x)[4], ref[4])
    with pytest.raises(FileNotFoundError, match='vgg19-dcbb9e9d.pth'): VGG19Features.from_file(tmp_path/'none.pth')

def test_vgg_sees_gray_as_rgb_and_refuses_other_channels():
    "Gray images (pix2pix on 1-channel targets with `perceptual='vgg'`) are VGG's input as gray RGB; 2 or 4 channels are refused"
    vgg, gray = VGG19Features(), torch.randn(2, 1, 32, 32)
    for u, v in zip(vgg(gray), vgg(gray.repeat(1, 3, 1, 1))): torch.testing.assert_close(u, v)
    torch.testing.assert_close(VGGLoss(vgg)(gray, -gray), VGGLoss(vgg)(gray.repeat(1, 3, 1, 1), -gray.repeat(1, 3, 1, 1)))
    for c in (2, 4):
        with pytest.raises(ValueError, match=f'1 or 3 channels, got {c}'): vgg(torch.randn(1, c, 32, 32))

def test_gan_and_feature_matching_losses():
    "Sum over scales of the last feature's loss; feature matching weights 4/(n_layers+1) x 1/num_D x lambda_feat"
    D = MultiscaleDiscriminator(4, 4, n_layers=2, num_D=3)
    pf, pr = D(torch.randn(2, 4, 32, 32)), D(torch.randn(2, 4, 32, 32))
    torch.testing.assert_close(MultiscaleGANLoss()(pf, True), sum(((s[-1] - 1) ** 2).mean() for s in pf))
    bce = sum(F.binary_cross_entropy(torch.sigmoid(s[-1]), torch.zeros_like(s[-1])) for s in pf)   # the reference's sigmoid + BCELoss
    torch.testing.assert_close(MultiscaleGANLoss('vanilla')(pf, False), bce)
    want = sum((4 / 3) * (1 / 3) * F.l1_loss(a, b) * 7. for s, t in zip(pf, pr) for a, b in zip(s[:-1], t[:-1]))
    torch.testing.assert_close(FeatureMatchingLoss(7.)(pf, pr), want)


# --- label-map data

import numpy as np
from PIL import Image
from gan_callbacks.data.label_maps import get_edges, one_hot_labels, resize_nearest, LabelDataLoaders, sample_labels, ScaleWidthFlip, TensorLabels
from fastai.vision.all import TensorImage

def ref_get_edges(t):
    "The reference's `get_edges`, written from its description: a pixel is on a boundary if it differs from a 4-neighbour"
    e = np.zeros(t.shape, dtype=bool)
    e[:, 1:] |= t[:, 1:] != t[:, :-1]; e[:, :-1] |= t[:, 1:] != t[:, :-1]
    e[1:, :] |= t[1:, :] != t[:-1, :]; e[:-1, :] |= t[1:, :] != t[:-1, :]
    return e

def test_edges_one_hot_and_nearest_resize():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 3, (1, 1, 9, 11)) * 1000 + rng.integers(0, 2, (1, 1, 9, 11))
    assert (get_edges(torch.from_numpy(t))[0, 0].numpy() == ref_get_edges(t[0, 0])).all()
    oh = one_hot_labels(torch.tensor([[[[0, 4], [2, 2]]]]), 5)
    assert oh.shape == (1, 5, 2, 2) and (oh.argmax(1) == torch.tensor([[0, 4], [2, 2]])).all() and (oh.sum(1) == 1).all()
    for _ in range(100):   # pixel for pixel Pillow's NEAREST, as the reference resizes label and instance maps
        h, w = (int(v) for v in rng.integers(3, 120, 2)); W = int(rng.integers(3, 300)); H = max(1, int(W * h / w))
        a = rng.integers(0, 40000, (h, w)).astype(np.int32)
        assert (np.array(Image.fromarray(a).resize((W, H), Image.NEAREST)) == resize_nearest(torch.from_numpy(a), (H, W)).numpy()).all()

def test_scale_width_and_one_flip(monkeypatch):
    "Width to load_size, height int(load_size * h / w); one flip for label, instance and image"
    ids = torch.arange(6 * 10, dtype=torch.int32).view(1, 6, 10).expand(2, 6, 10).contiguous()
    im = torch.arange(6 * 10).view(1, 6, 10).expand(3, 6, 10).to(torch.uint8).contiguous()
    tfm = ScaleWidthFlip(load_size=20, p_flip=1.)
    lab, img = tfm((TensorLabels(ids), TensorImage(im)), split_idx=0)
    assert lab.shape == (2, 12, 20) and img.shape == (3, 12, 20)
    assert lab[0, 0, 0] == 9 and lab[0, 0, -1] == 0   # flipped, nearest
    lab, img = tfm((TensorLabels(ids), TensorImage(im)), split_idx=1)   # validation: no flip
    assert lab[0, 0, 0] == 0

def test_label_dataloaders(tmp_path):
    "The sample in the reference's folders: one-hot + boundary inputs, photos in [-1, 1]; bad ids named"
    path = sample_labels(tmp_path/'s', n_train=6, n_valid=2, size=32, label_nc=5)
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ['train_img', 'train_inst', 'train_label', 'val_img', 'val_inst', 'val_label']
    dls = LabelDataLoaders.from_folder(path, label_nc=5, load_size=32, bs=2, device='cpu')
    assert (dls.in_ch, dls.out_ch, len(dls.train_ds), len(dls.valid_ds)) == (6, 3, 6, 2)
    x, y = dls.valid.one_batch()
    fn = sorted((path/'val_label').iterdir())[0]
    ids = torch.from_numpy(np.array(Image.open(fn)).astype(np.int64))
    inst = np.array(Image.open(path/'val_inst'/fn.name))
    assert (x[0, :5].argmax(0) == ids).all() and (x[0, :5].sum(0) == 1).all()
    assert (x[0, 5].numpy() == ref_get_edges(inst)).all()
    assert y.min() >= -1 and y.max() <= 1 and y.shape == (2, 3, 32, 32)
    dls = LabelDataLoaders.from_folder(path, label_nc=5, instance=False, load_size=16, bs=2, device='cpu')
    assert dls.in_ch == 5 and dls.one_batch()[0].shape == (2, 5, 16, 16)
    with pytest.raises(ValueError, match='not below label_nc=3'):
        LabelDataLoaders.from_folder(path, label_nc=3, load_size=32, bs=2, device='cpu').one_batch()
    with pytest.raises(FileNotFoundError, match='train_label'): LabelDataLoaders.from_folder(tmp_path, label_nc=5)


# --- Pix2pixHDTrainer against a plain PyTorch loop written from the reference (pix2pixHD_model.py + train.py)

import random, warnings
from copy import deepcopy
from fastai.basics import DataLoaders, Callback, set_seed
from fastai.optimizer import SGD
import fastai.callback.progress, fastai.callback.schedule   # Learner.no_bar, lr_find
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.gans.pix2pixhd import Pix2pixHDTrainer, pix2pixhd_learner
from gan_callbacks.callback.checkpoint import GANCheckpoint

LABEL_NC = 4

def hd_batches(n=3, bs=2, size=16, inst=True, seed=0):
    "(one-hot labels [+ instance boundaries], photo) batches, as `LabelDataLoaders` makes them"
    g = torch.Generator().manual_seed(seed)
    res = []
    for _ in range(n):
        ids = torch.randint(0, LABEL_NC, (bs, 1, size, size), generator=g)
        x = one_hot_labels(ids, LABEL_NC)
        if inst: x = torch.cat([x, get_edges(torch.randint(0, 3, (bs, 1, size, size), generator=g))], 1)
        res.append((x, torch.rand(bs, 3, size, size, generator=g) * 2 - 1))
    return res

def hd_dls(bs_list):
    items = [(a, b) for A, B in bs_list for a, b in zip(A, B)]
    return DataLoaders.from_dsets(items, items[:2], bs=len(bs_list[0][0]), shuffle=False, device='cpu')

def hd_nets(in_ch, feat=True, seed=1):
    torch.manual_seed(seed)
    G = GlobalGenerator(in_ch, 3, ngf=4, n_downsampling=2, n_blocks=1)
    D = MultiscaleDiscriminator(in_ch + 3, ndf=4, n_layers=2, num_D=2, get_interm_feat=feat)
    return G, D

def plain_hd(G, D, data, lr, opt, lambda_feat=10., feat=True, vgg=None, d_first=False, pool_size=0):
    "pix2pixHD's iteration as the reference writes it: one forward, G's loss and D's, G steps, then D"
    G, D = deepcopy(G).train(), deepcopy(D).train()
    mk = (lambda m: torch.optim.Adam(m.parameters(), lr=lr, betas=(0.5, 0.999))) if opt == 'adam' else (lambda m: torch.optim.SGD(m.parameters(), lr=lr))
    opt_g, opt_d = mk(G), mk(D)
    def gan(preds, real):   # GANLoss on lists, LSGAN: MSE of each scale's last output, summed
        return sum(F.mse_loss(p[-1], torch.full_like(p[-1], float(real))) for p in preds)
    pool = []
    for label, real in data:
        fake = G(label)
        fake_in = torch.cat([label, fake.detach()], 1)
        if pool_size:   # the reference's ImagePool
            out = []
            for im in fake_in.split(1):
                if len(pool) < pool_size: pool.append(im); out.append(im)
                elif random.uniform(0, 1) > 0.5:
                    i = random.randint(0, pool_size - 1); out.append(pool[i].clone()); pool[i] = im
                else: out.append(im)
            fake_in = torch.cat(out)
        pred_fake_pool = D(fake_in)
        loss_D_fake = gan(pred_fake_pool, False)
        pred_real = D(torch.cat([label, real.detach()], 1))
        loss_D_real = gan(pred_real, True)
        loss_D = (loss_D_fake + loss_D_real) * 0.5
        if d_first:   # the wrong order, as pix2pix's: D steps, then G's loss goes through the updated D
            opt_d.zero_grad(); loss_D.backward(); opt_d.step()
        pred_fake = D(torch.cat([label, fake], 1))
        loss_G_GAN = gan(pred_fake, True)
        loss_G_GAN_Feat = 0
        if feat:
            feat_weights, D_weights = 4.0 / (D.n_layers + 1), 1.0 / D.num_D
            for i in range(D.num_D):
                for j in range(len(pred_fake[i]) - 1):
                    loss_G_GAN_Feat += D_weights * feat_weights * F.l1_loss(pred_fake[i][j], pred_real[i][j].detach()) * lambda_feat
        loss_G_VGG = 0
        if vgg is not None:
            xs, ys = vgg(fake), vgg(real)
            loss_G_VGG = sum(w * F.l1_loss(a, b.detach()) for w, a, b in zip((1/32, 1/16, 1/8, 1/4, 1.), xs, ys)) * lambda_feat
        loss_G = loss_G_GAN + loss_G_GAN_Feat + loss_G_VGG
        opt_g.zero_grad(); loss_G.backward(); opt_g.step()   # G first (train.py), then D, from the same forward
        if not d_first: opt_d.zero_grad(); loss_D.backward(); opt_d.step()
    return G, D

def pre_norm_biases(m):
    "The state-dict keys of the convolution biases that an `InstanceNorm2d` follows directly"
    return {f'{n}.{i}.bias'.lstrip('.') for n, s in m.named_modules() if isinstance(s, nn.Sequential)
            for i, (c, nxt) in enumerate(zip(s, list(s)[1:])) if isinstance(c, (nn.Conv2d, nn.ConvTranspose2d)) and isinstance(nxt, nn.InstanceNorm2d)}

def state(m): return {k: v.detach().clone() for k, v in m.state_dict().items()}

def differs(a, b, lr, opt, atol=1e-5):
    "Where networks `a` and `b` differ beyond float tolerance (Adam: biases before an instance norm within a few steps of lr)"
    free = pre_norm_biases(a) if opt == 'adam' else set()
    sa, sb = state(a), state(b)
    bad = [k for k in sa if k not in free and not torch.allclose(sa[k], sb[k], atol=atol, rtol=0)]
    # a bias right before an instance norm has a zero gradient up to rounding, which Adam's normalised steps turn into steps
    # of about lr: they may differ by that and cancel in the norm (the networks compute the same)
    return bad + [k for k in free if not torch.allclose(sa[k], sb[k], atol=3 * 2 * lr, rtol=0)]

def fit_hd(G, D, data, lr, opt, vgg=None, seed=None, **kw):
    learn = pix2pixhd_learner(hd_dls(data), deepcopy(G), deepcopy(D), opt_func=pix2pix_adam if opt == 'adam' else SGD,
                              trainer_kwargs=dict(vgg=vgg if vgg is not None else False, **kw))
    if seed is not None: random.seed(seed)   # the pool's draws
    with learn.no_bar(), learn.no_logging(): learn.fit(1, lr)
    return learn

CASES = [('sgd', True, True, False), ('adam', True, True, False), ('sgd', False, True, False), ('adam', True, False, False),
         ('sgd', True, False, True), ('adam', False, True, True)]   # (optimizer, feature matching, instance maps, VGG)

@pytest.mark.parametrize('opt,feat,inst,use_vgg', CASES)
def test_trainer_matches_plain_loop(opt, feat, inst, use_vgg):
    data = hd_batches(n=3, inst=inst)
    lr = 0.01 if opt == 'sgd' else 1e-3
    G, D = hd_nets(data[0][0].shape[1], feat)
    torch.manual_seed(2); vgg = VGG19Features() if use_vgg else None
    ref = plain_hd(G, D, data, lr, opt, feat=feat, vgg=vgg)
    learn = fit_hd(G, D, data, lr, opt, vgg=vgg, feat_match=feat)
    t = learn.pix2pixhd_trainer
    assert differs(learn.model, ref[0], lr, opt) == [] and differs(t.discriminator, ref[1], lr, opt) == []
    for ours, before in ((learn.model, G), (t.discriminator, D)):   # both trained
        assert any(not torch.equal(a, b) for a, b in zip(state(ours).values(), state(before).values()))
    cols = ['g_gan'] + ['g_gan_feat'] * feat + ['g_vgg'] * use_vgg + ['d_real', 'd_fake']
    assert learn.recorder.metric_names[3:-1] == cols
    # the check separates: D stepped before G, or lambda_feat 10% off, is caught
    if opt == 'sgd' and inst:
        for wrong in (dict(d_first=True), dict(lambda_feat=11.) if feat or use_vgg else dict(d_first=True)):
            bad = plain_hd(G, D, data, lr, opt, feat=feat, vgg=vgg, **{'lambda_feat': 10., **wrong})
            assert differs(learn.model, bad[0], lr, opt) or differs(t.discriminator, bad[1], lr, opt)

def test_image_pool_matches_the_references():
    data = hd_batches(n=4)
    G, D = hd_nets(data[0][0].shape[1])
    random.seed(3); ref = plain_hd(G, D, data, 0.01, 'sgd', pool_size=3)
    learn = fit_hd(G, D, data, 0.01, 'sgd', seed=3, pool_size=3)
    assert differs(learn.model, ref[0], 0.01, 'sgd') == [] and differs(learn.pix2pixhd_trainer.discriminator, ref[1], 0.01, 'sgd') == []
    assert len(learn.pix2pixhd_trainer.pool) == 3


# --- niter_fix_global, exact resume, lr_find, precision, the VGG note

from helpers import Interrupt, RandFlip, run_gan, run_cli as cli

class Watch(Callback):
    "Which of G's parameters train in each epoch, and the optimizer's state size at each epoch's start"
    order = 70
    def __init__(self): self.trainable, self.n_state = [], []
    def before_batch(self):   # after the trainer's epoch start, before the first step
        if self.training and self.iter == 0: self.n_state.append(len(self.opt.opt.state))   # PyTorch's Adam inside fastai's wrapper
    def after_epoch(self):
        self.trainable.append(sorted({k.split('.')[0] for k, p in self.model.named_parameters() if p.requires_grad}))

def local_learner(path, seed=0, cbs=None, **kw):
    set_seed(seed)
    items = [(a, b) for A, B in hd_batches(n=4, size=16) for a, b in zip(A, B)]
    dls = DataLoaders.from_dsets(items, items[:2], bs=2, after_batch=RandFlip(), device='cpu')   # shuffled, augmented
    G = LocalEnhancer(5, 3, ngf=4, n_downsampling=1, n_blocks=1, n_local_enhancers=1, n_blocks_local=1)
    D = MultiscaleDiscriminator(8, ndf=4, n_layers=2, num_D=2)
    return pix2pixhd_learner(dls, G, D, cbs=cbs, path=path, trainer_kwargs=dict(vgg=False, pool_size=2, niter_fix_global=1, **kw))

def test_niter_fix_global_trains_the_outer_enhancer_first(tmp_path):
    "Epoch 0: only model1_* changes; from epoch 1 all of G, the optimizer's state cleared as the reference's new Adam"
    w = Watch()
    learn = local_learner(tmp_path, cbs=w)
    before = state(learn.model)
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit(1, 1e-3)
    after = state(learn.model)
    changed = {k.split('.')[0] for k in before if not torch.equal(before[k], after[k])}
    assert changed == {'model1_1', 'model1_2'}
    assert all(p.requires_grad for p in learn.model.parameters())   # back after the fit
    w2 = Watch(); learn.add_cb(w2)
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit(2, 1e-3)   # a new fit: epochs 0 and 1 again
    assert w2.trainable[0] == ['model1_1', 'model1_2'] and w2.trainable[1] == ['model', 'model1_1', 'model1_2']
    n_outer = len(learn.model.outer_parameters())
    assert w2.n_state[1] == 0 and 0 < n_outer < len(list(learn.model.parameters()))   # cleared at the switch
    with pytest.raises(ValueError, match='LocalEnhancer'):
        G, D = hd_nets(5)
        l = pix2pixhd_learner(hd_dls(hd_batches(n=1)), G, D, trainer_kwargs=dict(vgg=False, niter_fix_global=1))
        with l.no_bar(), l.no_logging(): l.fit(1)

def test_interrupt_and_resume_under_another_seed_is_bitwise_identical(tmp_path):
    ref = local_learner(tmp_path/'ref')
    run_gan(ref)
    learn = local_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=1)])
    with pytest.raises(KeyboardInterrupt): run_gan(learn)
    resumed = local_learner(tmp_path, seed=1234, cbs=GANCheckpoint(resume=True))
    run_gan(resumed)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_epoch0.pth'
    t, t0 = resumed.pix2pixhd_trainer, ref.pix2pixhd_trainer
    assert state(resumed.model).keys() == state(ref.model).keys()
    assert all(torch.equal(a, b) for a, b in zip(state(resumed.model).values(), state(ref.model).values()))
    assert all(torch.equal(a, b) for a, b in zip(state(t.discriminator).values(), state(t0.discriminator).values()))
    for a, b in ((resumed.opt, ref.opt), (t.d_opt, t0.d_opt)): assert str(a.state_dict()) == str(b.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(t.pool.images, t0.pool.images)) and len(t.pool) == 2
    assert all(torch.equal(a, b) for a, b in zip(t.hist, t0.hist)) and len(t.hist) == len(t0.hist) == 12

def test_schedule_without_decay_epochs_stays_at_lr():
    from gan_callbacks.gans.pix2pixhd import pix2pixhd_schedule
    s = pix2pixhd_schedule(2e-4, 3, 0)   # `--epochs-decay 0`: the reference never lowers the rate
    assert [s(e / 3) for e in range(3)] + [s(1.)] == [2e-4] * 4
    s = pix2pixhd_schedule(2e-4, 2, 2)
    assert [round(s(e / 4) / 2e-4, 6) for e in range(4)] == [1, 1, 1, 0.5]   # n_epochs + 1 at the rate, then 1/n_decay less per epoch

def test_lr_find_and_validation_leave_d_alone(tmp_path):
    G, D = hd_nets(5)
    learn = pix2pixhd_learner(hd_dls(hd_batches(n=2)), G, D, path=tmp_path, trainer_kwargs=dict(vgg=False, pool_size=2))
    t = learn.pix2pixhd_trainer
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    before, w, pool = deepcopy(t.state_dict()), state(learn.model), [p.clone() for p in t.pool.images]
    with learn.no_bar():
        learn.validate()
        learn.lr_find(num_it=5, end_lr=10, show_plot=False)
    after = t.state_dict()
    sd0, sd1 = before['discriminators']['discriminator'], after['discriminators']['discriminator']
    assert all(torch.equal(sd0[k], sd1[k]) for k in sd0)
    assert str(after['d_opt']) == str(before['d_opt'])
    assert all(torch.equal(a, b) for a, b in zip(state(learn.model).values(), w.values()))
    assert all(torch.equal(a, b) for a, b in zip(t.pool.images, pool))

def test_bf16_and_the_vgg_note(monkeypatch, tmp_path):
    "bf16 autocast runs G and every D scale in bf16; without a VGG file the run says so once, and the term is off"
    seen = set()
    G, D = hd_nets(5)
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))   # no cached torchvision file
    with pytest.warns(UserWarning, match='VGG perceptual term is off') as rec:
        learn = pix2pixhd_learner(hd_dls(hd_batches(n=2)), G, D).to_bf16()
    assert len([r for r in rec if 'VGG' in str(r.message)]) == 1
    assert learn.pix2pixhd_trainer.g_cols == ('g_gan', 'g_gan_feat') and learn.pix2pixhd_trainer.vgg_loss is None
    for m in (learn.model.model[1], D.scale0_layer3[0], D.scale1_layer0[0]):
        m.register_forward_hook(lambda m, i, o: seen.add((type(m).__name__, o.dtype)))
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert seen == {('Conv2d', torch.bfloat16)}
    assert all(torch.isfinite(h).all() for h in learn.pix2pixhd_trainer.hist)
    with pytest.raises(FileNotFoundError, match='vgg19-dcbb9e9d'): Pix2pixHDTrainer(vgg=tmp_path/'nothere.pth')

def test_predict_show_results_and_export_on_label_maps(tmp_path):
    "A label-map Learner translates (label, instance) files whole, shows label | translation | photo, and exports G only"
    import pickle, matplotlib; matplotlib.use('Agg')
    from fastai.learner import load_learner
    path = sample_labels(tmp_path/'s', n_train=4, n_valid=2, size=32, label_nc=5)
    dls = LabelDataLoaders.from_folder(path, label_nc=5, load_size=32, bs=2, device='cpu')
    learn = pix2pixhd_learner(dls, ngf=4, n_downsampling=2, n_blocks=1, path=tmp_path, trainer_kwargs=dict(ndf=4, vgg=False))
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    fn = sorted((path/'val_label').iterdir())[0]
    im = Image.open(fn); Image.fromarray(np.array(im)[:, :24]).save(tmp_path/'l.png'); Image.fromarray(np.array(Image.open(path/'val_inst'/fn.name))[:, :24]).save(tmp_path/'i.png')
    with learn.no_bar(): dec, out, raw = learn.predict((tmp_path/'l.png', tmp_path/'i.png'))   # 32x24: not a multiple of 4 across
    assert out.shape == raw.shape == (3, 32, 24) and raw.min() >= -1 and raw.max() <= 1
    from gan_callbacks.metrics.scores import PSNR, SSIM
    learn.metrics = [PSNR(), SSIM()]   # scores of the translations against the photos
    with learn.no_bar(), learn.no_logging(): res = learn.validate()
    assert all(np.isfinite(res[:3])) and res[1] > 5   # loss, PSNR (dB), SSIM
    with pytest.raises(ValueError, match='instance map'): learn.predict(fn)
    with learn.no_bar(): learn.show_results(max_n=2)
    learn.export(tmp_path/'hd.pkl')
    learn2 = load_learner(tmp_path/'hd.pkl')
    assert learn2.pix2pixhd_trainer.discriminator is None
    with learn2.no_bar(): out2 = learn2.predict((tmp_path/'l.png', tmp_path/'i.png'))[2]
    torch.testing.assert_close(out2, raw)

def test_export_leaves_vgg_out():
    G, D = hd_nets(5)
    t = Pix2pixHDTrainer(D, vgg=VGG19Features())
    assert t.vgg_loss is not None and t.__getstate__()['vgg_loss'] is None and t.__getstate__()['discriminator'] is None
    assert Pix2pixHDTrainer(D, vgg=VGG19Features(), export_discriminator=True).__getstate__()['vgg_loss'] is not None

def test_reference_files_and_model_folders_read_back(tmp_path):
    "A reference `latest_net_G.pth` (global or local) loads through `load_generator`; a model folder round-trips"
    from gan_callbacks.deploy.interop import load_generator
    from gan_callbacks.deploy.model_folder import write_model_folder, read_model_folder
    x = torch.randn(1, 7, 32, 32)
    for keys, fwd in ((ref_g_keys(7, 3, 4, 3, 2), lambda sd: ref_global_forward(sd, x, 3, 2)),
                      (ref_local_keys(7, 3, 4, 2, 1, 2, 1), lambda sd: ref_local_forward(sd, x, 2, 1, 2, 1))):
        sd = random_reference_file(keys, tmp_path/'latest_net_G.pth')
        G = load_generator(tmp_path/'latest_net_G.pth', device='cpu')
        assert type(G) in (GlobalGenerator, LocalEnhancer)
        with torch.no_grad(): torch.testing.assert_close(G(x), fwd(sd), atol=1e-5, rtol=0)
        write_model_folder(G, tmp_path/'folder', sample=False)
        G2, s = read_model_folder(tmp_path/'folder', 'cpu')
        assert type(G2) is type(G) and s['multiple'] == G.multiple
        with torch.no_grad(): torch.testing.assert_close(G2(x), G(x))


# --- the command line

def test_cli_trains_pix2pixhd_on_label_maps(tmp_path, capsys):
    from gan_callbacks.deploy.interop import load_generator
    import json
    data = sample_labels(tmp_path/'s', n_train=4, n_valid=2, size=32, label_nc=8)
    out = tmp_path/'out'
    assert cli(['train', '--model', 'pix2pixhd', '--data', data, '--out', out, '--label-nc', 8, '--epochs', 1, '--epochs-decay', 1,
                '--bs', 2, '--load-size', 32, '--ngf', 4, '--n-downsampling', 2, '--n-blocks', 1, '--ndf', 4, '--num-d', 2,
                '--vgg', 'off', '--n-samples', 2, '--seed', 0]) == 0
    text = capsys.readouterr().out
    assert '8 classes, instance maps, 32x32, global generator, 2 discriminators' in text
    hist = (out/'history.csv').read_text().splitlines()
    assert hist[0].split(',')[3:7] == ['g_gan', 'g_gan_feat', 'd_real', 'd_fake'] and len(hist) == 3
    G = load_generator(out/'generator', device='cpu')
    assert isinstance(G, GlobalGenerator) and G.in_ch == 9
    cfg = json.loads((out/'generator'/'config.json').read_text())
    assert cfg['training']['model'] == 'pix2pixhd'
    assert (cfg['label_nc'], cfg['instance']) == (8, True)   # what translate needs to encode label files as training did
    assert cli(['translate', '--model', out/'generator', '--input', data/'val_label', '--instances', data/'val_inst', '--output', tmp_path/'t']) == 0
    assert len(list((tmp_path/'t').glob('*.png'))) == 2
    # scored on the label-map layout it trained on: the validation images, as the last epoch's validation saw them
    assert cli(['evaluate', '--model', out/'generator', '--data', data, '--out', tmp_path/'ev']) == 0
    ev, summary = (json.loads((p/'summary.json').read_text()) for p in (tmp_path/'ev', out))
    assert ev['n_images'] == 2 and ev['size'] == 32 and ev['l1'] == pytest.approx(summary['final_valid_l1'], rel=1e-4)   # float32 sums in another order
    assert cli(['train', '--model', 'pix2pixhd', '--data', data, '--out', tmp_path/'o2', '--label-nc', 8, '--load-size', 40,
                '--n-downsampling', 4]) != 0
    assert 'multiples of 16' in capsys.readouterr().err
    assert cli(['train', '--model', 'pix2pix', '--data', data, '--out', tmp_path/'o3', '--label-nc', 8]) != 0
    assert 'is an option of --model pix2pixhd' in capsys.readouterr().err

# --- deployment: translate, export, model folders, tiles for label-map inputs

def label_model(tmp_path, instance=True):
    "A small label-map Learner (5 classes) on the sample, exported as generator.pkl and as a model folder; and a folder of label maps to translate"
    import shutil
    from gan_callbacks.deploy.interop import export_generator
    path = sample_labels(tmp_path/'s', n_train=4, n_valid=2, size=32, label_nc=5)
    dls = LabelDataLoaders.from_folder(path, label_nc=5, instance=instance, load_size=32, bs=2, device='cpu')
    set_seed(0)
    learn = pix2pixhd_learner(dls, ngf=4, n_downsampling=2, n_blocks=1, path=tmp_path, trainer_kwargs=dict(ndf=4, vgg=False))
    learn.export(tmp_path/'hd.pkl')
    export_generator(learn, 'folder', tmp_path/'folder')
    for k in ('label', 'inst'): shutil.copytree(path/f'val_{k}', tmp_path/k)
    return learn, tmp_path/'folder'

def test_translate_label_maps_as_training_encodes_them(tmp_path, capsys):
    "translate --model (model folder, generator.pkl, a reference .pth with --label-nc) on label PNGs and instance PNGs gives `predict`'s images"
    import json
    from gan_callbacks.data.label_maps import encode_label_files
    from gan_callbacks.deploy.inference import run_tiled, to_pil
    learn, folder = label_model(tmp_path)
    cfg = json.loads((folder/'config.json').read_text())
    assert (cfg['label_nc'], cfg['instance'], cfg['in_ch'], cfg['model_type']) == (5, True, 6, 'pix2pixhd')
    assert 'one-hot encoded to 5 channels' in (folder/'README.md').read_text() and (folder/'sample.png').is_file()
    names = sorted(p.name for p in (tmp_path/'label').iterdir())
    with learn.no_bar(): want = {n: np.asarray(to_pil(learn.predict((tmp_path/'label'/n, tmp_path/'inst'/n))[2])) for n in names}
    assert cli(['export', '--model', tmp_path/'hd.pkl', '--format', 'reference', '--out', tmp_path/'latest_net_G.pth', '--trust-pickle']) == 0
    for model, extra in ((folder, []), (tmp_path/'hd.pkl', ['--trust-pickle']), (tmp_path/'latest_net_G.pth', ['--label-nc', 5])):
        out = tmp_path/f'out_{Path(model).name}'
        assert cli(['translate', '--model', model, '--input', tmp_path/'label', '--instances', tmp_path/'inst', '--output', out, *extra]) == 0, capsys.readouterr().err
        for n in names: assert np.array_equal(np.asarray(Image.open(out/n)), want[n]), (model, n)
    # translate_image on the Learner: a (label map, instance map) pair, as `predict` takes it
    from gan_callbacks.deploy.inference import translate_image
    for n in names: assert np.array_equal(np.asarray(translate_image(learn, (tmp_path/'label'/n, tmp_path/'inst'/n))), want[n])
    with pytest.raises(ValueError, match='takes an instance map with each label map'): translate_image(learn, tmp_path/'label'/names[0])
    # in tiles: the encoded label map, cut into tiles
    n = names[0]
    assert cli(['translate', '--model', folder, '--input', tmp_path/'label'/n, '--instances', tmp_path/'inst'/n, '--output', tmp_path/'tiled', '--tile', 16]) == 0
    x = encode_label_files(tmp_path/'label'/n, tmp_path/'inst'/n, 5)
    assert np.array_equal(np.asarray(Image.open(tmp_path/'tiled'/n)), np.asarray(to_pil(run_tiled(learn.model.eval(), x, 16, 64))))
    # resized as the reference's test script: ids nearest, then encoded
    assert cli(['translate', '--model', folder, '--input', tmp_path/'label', '--instances', tmp_path/'inst', '--output', tmp_path/'small',
                '--load-size', 16, '--network-size']) == 0
    assert Image.open(tmp_path/'small'/n).size == (16, 16)
    capsys.readouterr()

def test_translate_refuses_what_is_no_label_map_of_the_model(tmp_path, capsys):
    "One line for: no instance maps, a missing one, an RGB photo, a class id >= label_nc, a wrong --label-nc; nothing written"
    learn, folder = label_model(tmp_path)
    n = sorted(p.name for p in (tmp_path/'label').iterdir())[0]
    Image.new('RGB', (32, 32)).save(tmp_path/'photo.png'); Image.new('L', (32, 32), 7).save(tmp_path/'seven.png')
    base = ['translate', '--model', folder, '--output', tmp_path/'o']
    for args, msg in (([ '--input', tmp_path/'label'], 'takes an instance map with each label map'),
                      (['--input', tmp_path/'label', '--instances', tmp_path], f'no {n}, the instance map of label map'),
                      (['--input', tmp_path/'photo.png', '--instances', tmp_path/'inst'/n], 'has 3 channels: expected one channel of integer ids'),
                      (['--input', tmp_path/'seven.png', '--instances', tmp_path/'inst'/n], 'holds class id 7, not below label_nc=5'),
                      (['--input', tmp_path/'label', '--instances', tmp_path/'inst', '--label-nc', 4], 'the model says it takes 5 classes'),
                      (['--input', tmp_path/'label', '--instances', tmp_path/'inst', '--aligned'], 'not A|B pairs')):
        assert cli(base + args) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1 and 'Traceback' not in err, err
    assert not any((tmp_path/'o').glob('*.png'))
    assert cli(['export', '--model', folder, '--format', 'reference', '--out', tmp_path/'G.pth']) == 0   # a file that does not say what its inputs are
    assert cli(['translate', '--model', tmp_path/'G.pth', '--input', tmp_path/'label', '--output', tmp_path/'o', '--label-nc', 9]) == 2
    assert '--label-nc 9: the generator takes 6 channels, so label_nc must be 6 or 5' in capsys.readouterr().err
    assert cli(['translate', '--model', tmp_path/'G.pth', '--input', tmp_path/'label', '--output', tmp_path/'o']) == 2
    assert 'the generator takes 6 channels' in (err := capsys.readouterr().err) and '--label-nc' in err and len(err.splitlines()) == 1

def test_label_model_without_instances_and_the_app_helper(tmp_path):
    "Label maps alone (no instance maps): translate takes no --instances; the app's `translate_upload` gives the command's file"
    from gan_callbacks.deploy.webapp import translate_upload, AppError
    from gan_callbacks.deploy.interop import read_generator
    learn, folder = label_model(tmp_path, instance=False)
    n = sorted(p.name for p in (tmp_path/'label').iterdir())[0]
    assert cli(['translate', '--model', folder, '--input', tmp_path/'label'/n, '--output', tmp_path/'o']) == 0
    assert cli(['translate', '--model', folder, '--input', tmp_path/'label'/n, '--instances', tmp_path/'inst'/n, '--output', tmp_path/'o2']) == 2
    G, s = read_generator(folder, device='cpu')
    assert s['label_nc'] == 5 and s['instance'] is False and s['in_ch'] == 5
    page = translate_upload(G, s, tmp_path/'label'/n, out_dir=tmp_path/'page')
    assert np.array_equal(np.asarray(Image.open(page)), np.asarray(Image.open(tmp_path/'o'/n)))
    Image.new('RGB', (32, 32)).save(tmp_path/'photo.png')
    with pytest.raises(AppError, match='photo.png: label map photo.png has 3 channels'): translate_upload(G, s, tmp_path/'photo.png', out_dir=tmp_path/'page')

def test_loggers_show_label_maps_in_colour(tmp_path):
    "TensorBoard's and W&B's grid: a label map's classes in colour (not its first one-hot channels) | translation | photo"
    from gan_callbacks.callback.loggers import GANLogger
    from gan_callbacks.data.label_maps import colour_labels
    class Grids(GANLogger):
        def scalars(self, values, step): pass
        def image(self, tag, im, step): self.got = im
    learn, _ = label_model(tmp_path)
    cb = Grids(n_images=1)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3, cbs=cb)
    x = cb.images[0]
    h, w = x.shape[-2:]
    torch.testing.assert_close(cb.got[:, 2:2+h, 2:2+w], (colour_labels(x, 5)[0].float().cpu() + 1) / 2)

def test_image_input_pix2pixhd_translates_like_pix2pix(tmp_path):
    "label_nc=0: the model folder says nothing of labels and translate reads photos, as for pix2pix"
    import json
    from gan_callbacks.data.folders import Pix2pixDataLoaders
    from gan_callbacks.data.samples import sample_pairs
    from gan_callbacks.deploy.interop import export_generator
    from gan_callbacks.deploy.inference import run_padded, from_pil, to_pil
    dls = Pix2pixDataLoaders.from_folder(sample_pairs(tmp_path/'p', n_train=4, n_valid=2, size=32), load_size=36, crop_size=32, bs=2, device='cpu')
    learn = pix2pixhd_learner(dls, ngf=4, n_downsampling=2, n_blocks=1, trainer_kwargs=dict(ndf=4, vgg=False))
    export_generator(learn, 'folder', tmp_path/'folder')
    cfg = json.loads((tmp_path/'folder'/'config.json').read_text())
    assert 'label_nc' not in cfg and cfg['model_type'] == 'pix2pixhd' and cfg['in_ch'] == 3
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 42, 3), dtype=np.uint8)).save(tmp_path/'photo.png')
    assert cli(['translate', '--model', tmp_path/'folder', '--input', tmp_path/'photo.png', '--output', tmp_path/'o']) == 0
    want = to_pil(run_padded(learn.model.eval(), from_pil(Image.open(tmp_path/'photo.png'))[None], 'eval', 4)[0])
    assert np.array_equal(np.asarray(Image.open(tmp_path/'o'/'photo.png')), np.asarray(want))
    assert cli(['translate', '--model', tmp_path/'folder', '--input', tmp_path/'photo.png', '--output', tmp_path/'o2', '--instances', tmp_path]) == 2

def test_image_inputs_label_nc_0(tmp_path):
    "label_nc=0: train_A/train_B images in the reference's layout, or the library's paired layouts, train the same trainer"
    from gan_callbacks.data.folders import Pix2pixDataLoaders
    from gan_callbacks.data.samples import sample_pairs
    src = sample_labels(tmp_path/'s', n_train=4, n_valid=2, size=32, label_nc=5)
    (tmp_path/'ab').mkdir()
    for ph in ('train', 'val'):
        (src/f'{ph}_img').rename(tmp_path/'ab'/f'{ph}_B'); (src/f'{ph}_label').rename(tmp_path/'ab'/f'{ph}_A')
    with pytest.raises(ValueError, match='instance maps go with label maps'):
        LabelDataLoaders.from_folder(tmp_path/'ab', label_nc=0, instance=True, load_size=32, bs=2, device='cpu')
    dls = LabelDataLoaders.from_folder(tmp_path/'ab', label_nc=0, load_size=32, bs=2, device='cpu')
    x, y = dls.one_batch()
    assert x.shape == y.shape == (2, 3, 32, 32) and x.min() >= -1 and dls.in_ch == 3
    pairs = Pix2pixDataLoaders.from_folder(sample_pairs(tmp_path/'p', n_train=4, n_valid=2, size=32), load_size=36, crop_size=32, bs=2, device='cpu')
    for d in (dls, pairs):
        learn = pix2pixhd_learner(d, ngf=4, n_downsampling=2, n_blocks=1, trainer_kwargs=dict(ndf=4, vgg=False))
        with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
        assert learn.model.in_ch == 3 and len(learn.pix2pixhd_trainer.hist) == 2


# --- two processes

WORKER = '''
import sys, warnings, torch
from fastai.basics import DataLoaders, Callback, set_seed
from fastai.distributed import rank_distrib
import fastai.callback.progress
from gan_callbacks.nets.hd_networks import GlobalGenerator, MultiscaleDiscriminator
from gan_callbacks.data.label_maps import one_hot_labels, get_edges
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from gan_callbacks.trainer.distributed import unwrap
out, rank = sys.argv[1], rank_distrib()
g = torch.Generator().manual_seed(0)
x = torch.cat([one_hot_labels(torch.randint(0, 4, (8, 1, 16, 16), generator=g), 4), get_edges(torch.randint(0, 3, (8, 1, 16, 16), generator=g))], 1)
items = list(zip(x, torch.rand(8, 3, 16, 16, generator=g) * 2 - 1))
set_seed(rank)   # different weights on each rank: rank 0's must win
G, D = GlobalGenerator(5, 3, ngf=4, n_downsampling=2, n_blocks=1), MultiscaleDiscriminator(8, ndf=4, n_layers=2)
torch.save(dict(G=G.state_dict(), D=D.state_dict()), f'{out}/init{rank}.pt')
learn = pix2pixhd_learner(DataLoaders.from_dsets(items, items[:2], bs=2, shuffle=False, device='cpu'), G, D,
                          trainer_kwargs=dict(vgg=False), path=out)
with warnings.catch_warnings(), learn.no_bar(), learn.no_logging(), learn.distrib_ctx():
    warnings.simplefilter('ignore'); learn.fit(1, 1e-3)
t = learn.pix2pixhd_trainer
torch.save(dict(G=unwrap(learn.model).state_dict(), D=t.discriminator.state_dict(), d_opt=t.d_opt.state_dict(), opt=learn.opt.state_dict()),
           f'{out}/state{rank}.pt')
'''

@pytest.mark.slow
def test_two_processes_train_one_model(tmp_path):
    "Data-parallel on 2 CPU processes: G (DDP) and the discriminators (the library's all-reduce) start from rank 0's weights and stay equal"
    import sys
    from gan_callbacks.trainer.distributed import launch
    (tmp_path/'worker.py').write_text(WORKER)
    n = torch.get_num_threads(); torch.set_num_threads(1)
    try: launch([sys.executable, str(tmp_path/'worker.py'), str(tmp_path)], nproc=2)
    finally: torch.set_num_threads(n)
    s0, s1 = (torch.load(tmp_path/f'state{r}.pt', weights_only=False) for r in (0, 1))
    i0, i1 = (torch.load(tmp_path/f'init{r}.pt', weights_only=False) for r in (0, 1))
    for k in ('G', 'D'):
        assert all(torch.equal(s0[k][n], s1[k][n]) for n in s0[k]), k
        assert any(not torch.equal(i0[k][n], i1[k][n]) for n in i0[k])   # they started apart
        assert any(not torch.equal(s0[k][n], i0[k][n]) for n in s0[k])   # and trained
    assert str(s0['d_opt']) == str(s1['d_opt']) and str(s0['opt']) == str(s1['opt'])

def test_fastai_gradient_accumulation_steps_g_and_d_together():
    "With fastai's `GradientAccumulation(n_acc=4)` on batches of 2, G and D step once every 2 batches: 2 steps for 4 batches"
    from fastai.callback.training import GradientAccumulation
    G, D = hd_nets(5)
    learn = pix2pixhd_learner(hd_dls(hd_batches(n=4)), G, D, cbs=GradientAccumulation(n_acc=4), trainer_kwargs=dict(vgg=False))
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    steps = lambda o: {int(s['step']) for s in o.opt.state.values()}
    assert steps(learn.opt) == {2} and steps(learn.pix2pixhd_trainer.d_opt) == {2}
