"SWD against an independent NumPy implementation of Karras et al. 2018's description, within its sampling noise; its behaviour on identical, blurred and noisy sets; the metric column."
import numpy as np, pytest, torch, scipy.ndimage
import torch.nn.functional as F
import skimage.data
from fastai.basics import DataLoaders, Learner, L1LossFlat
from gan_callbacks.metrics.swd import (swd, swd_levels, SWD, SWDDescriptors, laplacian_pyramid, pyr_down, pyr_up,
                                      sliced_wasserstein, neighbourhoods)
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.trainer.optim import pix2pix_adam

def photos(n=16, size=32, seed=0):
    "Crops of structured photographs, (n, 3, size, size) in [-1, 1]"
    ims = [skimage.data.astronaut(), skimage.data.chelsea(), skimage.data.coffee(), skimage.data.rocket()]
    rng, out = np.random.default_rng(seed), []
    for i in range(n):
        im = ims[i % 4]; y, x = rng.integers(0, im.shape[0] - size), rng.integers(0, im.shape[1] - size)
        out.append(im[y:y+size, x:x+size].transpose(2, 0, 1))
    return torch.from_numpy(np.stack(out)).float() / 127.5 - 1

def blur(x, sigma):
    return torch.from_numpy(scipy.ndimage.gaussian_filter(x.numpy(), (0, 0, sigma, sigma), mode='mirror'))

# --- the paper's recipe, written out in NumPy -------------------------------------------------------------------------
K5 = np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]) / 256.

def np_pyramid(x, n):
    "Laplacian pyramid: binomial blur with mirror borders, decimation; each level minus the next one upsampled"
    levels = [x.astype(np.float64)]
    for _ in range(1, n):
        cur = levels[-1]
        down = scipy.ndimage.convolve(cur, K5[None, None], mode='mirror')[:, :, ::2, ::2]
        up = np.zeros_like(cur); up[:, :, ::2, ::2] = down
        levels[-1] = cur - scipy.ndimage.convolve(up, 4 * K5[None, None], mode='mirror')
        levels.append(down)
    return levels

def np_descriptors(level, rng, n=128, k=7):
    "n random k x k neighbourhoods per image, normalised per channel over all of them, flattened"
    N, C, H, W = level.shape
    r = k // 2
    out = []
    for i in range(N):
        for _ in range(n):
            y, x = rng.integers(r, H - r), rng.integers(r, W - r)
            out.append(level[i, :, y-r:y+r+1, x-r:x+r+1])
    d = np.stack(out)
    d = (d - d.mean((0, 2, 3), keepdims=True)) / d.std((0, 2, 3), keepdims=True)
    return d.reshape(len(d), -1)

def np_swd(a, b, seed, repeats=4, dirs=128):
    "Per level and averaged: SWD x1000 with fresh random neighbourhoods and directions"
    rng = np.random.default_rng(seed)
    n = len([s for s in (a.shape[-1] // 2**i for i in range(8)) if s >= 16])
    res = []
    for la, lb in zip(np_pyramid(a, n), np_pyramid(b, n)):
        da, db = np_descriptors(la, rng), np_descriptors(lb, rng)
        v = []
        for _ in range(repeats):
            d = rng.standard_normal((da.shape[1], dirs)); d /= np.linalg.norm(d, axis=0, keepdims=True)
            v.append(np.abs(np.sort(da @ d, 0) - np.sort(db @ d, 0)).mean())
        res.append(1e3 * np.mean(v))
    return res + [np.mean(res)]

def test_pyramid_matches_numpy():
    x = photos(3, 48).double()
    for t, a in zip(laplacian_pyramid(x, 3), np_pyramid(x.numpy(), 3)): np.testing.assert_allclose(t.numpy(), a, atol=1e-12)

@pytest.mark.parametrize('fake', ['identical', 'blurred'])
def test_agrees_with_numpy_within_sampling_noise(fake):
    "Over 12 seeds each: the means agree within 4 standard errors, per level and averaged, and the spreads are alike"
    real = photos()
    other = real if fake == 'identical' else blur(real, 1.)
    ours = np.array([[*swd_levels(real, other, seed=s).values()] for s in range(12)])
    ours = np.concatenate([ours, ours.mean(1, keepdims=True)], 1)
    ref = np.array([np_swd(real.numpy(), other.numpy(), s) for s in range(12)])
    se = np.sqrt(ours.var(0, ddof=1) / 12 + ref.var(0, ddof=1) / 12)
    assert (np.abs(ours.mean(0) - ref.mean(0)) < 4 * se).all(), (ours.mean(0), ref.mean(0), se)
    ratio = ours.std(0, ddof=1) / ref.std(0, ddof=1)
    assert ((ratio > 0.33) & (ratio < 3)).all(), ratio

def test_identical_sets_and_monotonic_growth():
    real = photos(24, 32)
    floor = swd(real, real)
    assert swd(real, real, paired=True) == 0
    g = torch.Generator().manual_seed(1)
    blurred = [swd(real, blur(real, s)) for s in (0.6, 1., 2.)]
    noisy = [swd(real, (real + s * torch.randn(real.shape, generator=g)).clamp(-1, 1)) for s in (0.05, 0.1, 0.3)]
    assert floor < blurred[0] < blurred[1] < blurred[2], blurred
    assert floor < noisy[0] < noisy[1] < noisy[2], noisy
    paired = [swd(real, blur(real, s), seed=1, paired=True) for s in (0.3, 0.6, 1.)]
    assert 0 < paired[0] < paired[1] < paired[2], paired

def test_batches_and_seeds():
    real, fake = photos(12, 32), blur(photos(12, 32), 1.)
    v = swd(real, fake)
    assert swd(real, fake) == v                                               # a seed, a number
    assert swd(real.split(5), list(zip(fake.split(3), fake.split(3)))) == v   # batches of any size, or (images, ...) tuples
    assert swd(real, fake, seed=1) != v
    assert abs(swd(real[:, :, :, :24], fake[:, :, :, :24]) - v) > 0           # not square: levels by the shorter side
    assert list(swd_levels(real[:, :, :, :24], fake[:, :, :, :24])) == [24]
    from fastai.vision.all import TensorImage
    from gan_callbacks.data.label_maps import TensorLabelInput
    assert swd(TensorImage(real), TensorLabelInput(fake)) == v   # fastai's typed tensors: a G's output on label maps keeps its input's type

def test_sets_of_different_sizes_and_grey_images():
    real, fake = photos(12, 32), blur(photos(20, 32, seed=1), 1.)
    assert swd(real, fake) > 0
    grey = real.mean(1, keepdim=True)
    assert swd(grey, grey, paired=True) == 0 and swd(grey, blur(grey, 1.)) > swd(grey, grey)

def test_bad_input():
    x = photos(4, 32)
    with pytest.raises(ValueError, match='at least 16x16'): swd(x[..., :8, :8], x[..., :8, :8])
    with pytest.raises(ValueError, match='one size'): swd(x, x[..., :24, :24])
    with pytest.raises(ValueError, match=r'\(N, C, H, W\)'): swd(x[0], x[0])

def test_metric_column_is_swd_of_the_validation_outputs():
    torch.manual_seed(0)
    xs = photos(10, 32); ys = blur(xs, 1.)
    dls = DataLoaders.from_dsets(list(zip(xs[:6], ys[:6])), list(zip(xs[6:], ys[6:])), bs=3, shuffle=False, device='cpu')
    learn = Learner(dls, UnetGenerator(3, 3, num_downs=5, ngf=8), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Pix2pixTrainer(PatchDiscriminator(6, ndf=8, n_layers=2)), metrics=[SWD(), SWD(paired=True)])
    with learn.no_bar(), learn.no_logging(): learn.fit(2, 1e-3)
    names = list(learn.recorder.metric_names)
    col = lambda i: [v[i] for v in learn.recorder.values]
    i = names.index('swd') - 1
    learn.model.eval()
    with torch.no_grad(): out = learn.model(xs[6:])
    assert abs(col(i)[-1] - swd(ys[6:], out)) < 1e-3
    assert abs(col(i + 1)[-1] - swd(ys[6:], out, paired=True)) < 1e-3
    assert col(i)[0] != col(i)[-1]   # the outputs changed, the reals' draws did not
    assert SWD.lower_is_better
