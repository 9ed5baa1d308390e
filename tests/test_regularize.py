"R1/R2 equal torch.autograd.grad of StyleGAN2-ADA's form; the lazy schedule every k D steps with the right scale; D's Adam adjusted; spectral normalisation of D's convolutions."
import pickle
import pytest, torch
from torch import nn
from gan_callbacks.stabilizers.regularize import (r1_penalty, r2_penalty, d_output_sum, LazyRegularizer, lazy_ratio, lazy_hypers, lazy_adjust,
                                      spectral_norm_d)
from gan_callbacks.nets.networks import PatchDiscriminator
from gan_callbacks.trainer.optim import pix2pix_adam
from helpers import run_cli

def reference_r1(D, x, gamma):
    "StyleGAN2-ADA's loss_Dr1, written out: grad of the summed logits, squared and summed per image, gamma/2, batch mean"
    x = x.detach().requires_grad_(True)
    logits = D(x)
    grads, = torch.autograd.grad(outputs=[logits.sum()], inputs=[x], create_graph=True, only_inputs=True)
    return (grads.square().sum([1, 2, 3]) * (gamma / 2)).mean()

def d_grads(D, loss):
    D.zero_grad(); loss.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in D.parameters()]   # a last bias: no part in the gradient

@pytest.mark.parametrize('fn', [r1_penalty, r2_penalty])
def test_penalty_equals_autograd_reference(fn):
    torch.manual_seed(0)
    D = PatchDiscriminator(3, ndf=8, n_layers=2)
    x = torch.randn(4, 3, 32, 32)
    got, want = fn(D, x, gamma=3.), reference_r1(D, x, 3.)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    for a, b in zip(d_grads(D, fn(D, x, gamma=3.)), d_grads(D, reference_r1(D, x, 3.))): torch.testing.assert_close(a, b)   # the double backward

def test_conditional_gradient_with_respect_to_the_image_only():
    torch.manual_seed(0)
    D = PatchDiscriminator(6, ndf=8, n_layers=2)
    A, B = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 32, 32)
    got = r1_penalty(D, B, cond=A, gamma=10.)
    want = reference_r1(lambda x: D(torch.cat([A, x], 1)), B, 10.)
    torch.testing.assert_close(got, want)
    assert not B.requires_grad and B.grad is None   # the caller's tensor is left alone

def test_generator_gets_no_gradient_from_r2():
    G = nn.Conv2d(3, 3, 1)
    D = PatchDiscriminator(3, ndf=8, n_layers=2)
    fake = G(torch.randn(2, 3, 32, 32))
    r2_penalty(D, fake).backward()
    assert G.weight.grad is None

def test_multiscale_outputs_sum_their_predictions():
    "pix2pixHD's multi-scale D: per scale, a list of features ending with the prediction"
    torch.manual_seed(0)
    d1, d2 = PatchDiscriminator(3, ndf=8, n_layers=2), PatchDiscriminator(3, ndf=8, n_layers=1)
    def D(x): return [[x.mean() * 0 + 7., d1(x)], [d2(nn.functional.avg_pool2d(x, 2))]]   # a feature that would change the sum
    x = torch.randn(2, 3, 32, 32)
    want = reference_r1(lambda x: d1(x).sum() + d2(nn.functional.avg_pool2d(x, 2)).sum(), x, 2.)
    torch.testing.assert_close(r1_penalty(D, x, gamma=2.), want)
    assert d_output_sum([torch.ones(2), torch.ones(3)]) == 5

def test_lazy_schedule_every_k_steps_scaled_by_k():
    lazy = LazyRegularizer(16)
    computed, scales = [], []
    for step in range(50):
        out = lazy(lambda: computed.append(step) or torch.tensor(1.5))
        scales.append(None if out is None else float(out))
    assert computed == [0, 16, 32, 48]
    assert [s for s in scales if s is not None] == [24.] * 4 and scales.count(None) == 46
    # resume: the count carries over
    other = LazyRegularizer(16); other.load_state_dict(pickle.loads(pickle.dumps(lazy.state_dict())))
    assert [other(lambda: 1.) is not None for _ in range(16)] == [False] * 14 + [True, False]   # steps 50..65: due at 64
    every = LazyRegularizer(1)
    assert [every(lambda: 2.) for _ in range(3)] == [2., 2., 2.]
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match='interval'): LazyRegularizer(bad)

def test_adam_adjustment():
    r = lazy_ratio(16)
    assert r == 16 / 17
    assert lazy_hypers(dict(lr=1e-3, mom=0.5, sqr_mom=0.99, wd=0.1), 16) == dict(lr=1e-3 * r, mom=0.5 ** r, sqr_mom=0.99 ** r, wd=0.1)
    assert lazy_hypers(dict(lr=2e-3, betas=(0., 0.99), eps=1e-8), 4) == dict(lr=2e-3 * 0.8, betas=(0., 0.99 ** 0.8), eps=1e-8)
    D = PatchDiscriminator(3, ndf=8, n_layers=1)
    opt = lazy_adjust(pix2pix_adam(D.parameters(), lr=2e-4), 16)
    pg = opt.opt.param_groups[0]
    assert pg['lr'] == pytest.approx(2e-4 * r, rel=1e-12) and pg['betas'] == pytest.approx((0.5 ** r, 0.999 ** r), rel=1e-12)
    t = lazy_adjust(torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999)), 16)
    assert t.param_groups[0]['lr'] == pytest.approx(2e-4 * r) and t.param_groups[0]['betas'] == pytest.approx((0.5 ** r, 0.999 ** r))

def test_spectral_norm_top_singular_value_is_one():
    torch.manual_seed(0)
    D = nn.Sequential(nn.Conv2d(3, 16, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(16, 32, 4, 2, 1), nn.BatchNorm2d(32),
                      nn.Conv2d(32, 1, 3), nn.Flatten(), nn.Linear(36, 1))
    with torch.no_grad():
        for m in D.modules():
            if isinstance(m, nn.Conv2d): m.weight.mul_(5)   # far from 1 to begin with
    spectral_norm_d(D)
    convs = [m for m in D.modules() if isinstance(m, nn.Conv2d)]
    assert all(hasattr(m, 'weight_orig') for m in convs) and not hasattr(D[-1], 'weight_orig')   # convolutions only, by default
    for _ in range(40): D(torch.randn(2, 3, 32, 32))
    for m in convs: assert abs(torch.linalg.matrix_norm(m.weight.detach().flatten(1), ord=2) - 1) < 1e-3
    spectral_norm_d(D, linear=True)
    assert hasattr(D[-1], 'weight_orig')
    D2 = pickle.loads(pickle.dumps(D))   # `learn.export` can keep it
    D.eval(); D2.eval()
    x = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(D(x), D2(x))

def test_spectral_norm_starts_each_raw_weight_at_norm_1(tmp_path, unpaired):
    "CUT's D (xavier init, gain 0.02) under spectral norm: Adam's steps on raw weights of norm ~0.03 made its losses 50-70 at the start"
    from gan_callbacks.stabilizers.regularize import spectral_norm_d
    from gan_callbacks.nets.networks import PatchDiscriminator, init_weights
    D = spectral_norm_d(init_weights(PatchDiscriminator(3, norm='instance', antialias=True), 'xavier'))
    for m in D.modules():
        if hasattr(m, 'weight_orig'): assert torch.linalg.matrix_norm(m.weight_orig.flatten(1), ord=2).item() == pytest.approx(1, rel=1e-4)
    out = tmp_path/'cut'
    assert run_cli(['train', '--model', 'cut', '--data', unpaired, '--out', out, '--spectral-norm', '--epochs', 1, '--epochs-decay', 0, '--bs', 2,
                    '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--n-blocks', 1, '--n-samples', 1, '--seed', 0]) == 0
    head, row = (out/'history.csv').read_text().splitlines()[:2]
    got = dict(zip(head.split(','), row.split(',')))
    assert float(got['d_real']) < 5 and float(got['d_fake']) < 5 and float(got['g_gan']) < 10, got   # were 58, 65 and 66
