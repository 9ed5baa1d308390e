import math
import pytest, torch
from torch import nn
from gan_callbacks.nets.losses import GANLoss, gan_modes, gradient_penalty, L1Recon, L2Recon, recon_losses, recon_loss

P = torch.tensor([[-2., 0., 1., 3.]])
def softplus(v): return math.log1p(math.exp(v))

# --- GAN objectives --------------------------------------------------------------------------------

@pytest.mark.parametrize('mode,real,fake', [
    ('vanilla', sum(softplus(-v) for v in (-2, 0, 1, 3))/4, sum(softplus(v) for v in (-2, 0, 1, 3))/4),
    ('lsgan',   (9 + 1 + 0 + 4)/4, (4 + 0 + 1 + 9)/4),
    ('hinge',   (3 + 1 + 0 + 0)/4, (0 + 1 + 2 + 4)/4),
    ('wgangp',  -0.5, 0.5)])
def test_discriminator_side(mode, real, fake):
    loss = GANLoss(mode)
    assert loss(P, True).item() == pytest.approx(real, rel=1e-6)
    assert loss(P, False).item() == pytest.approx(fake, rel=1e-6)
    assert loss(P, True).ndim == 0

@pytest.mark.parametrize('mode,expected', [
    ('vanilla', sum(softplus(-v) for v in (-2, 0, 1, 3))/4), ('lsgan', 14/4), ('hinge', -0.5), ('wgangp', -0.5)])
def test_generator_side(mode, expected):
    assert GANLoss(mode)(P, True, for_discriminator=False).item() == pytest.approx(expected, rel=1e-6)

def test_full_size_maps_and_gradient():
    "A PatchGAN map: the loss is the mean over every logit, and its gradient reaches every one"
    pred = torch.randn(2, 1, 3, 3, requires_grad=True)
    loss = GANLoss('vanilla')(pred, True)
    assert loss.item() == pytest.approx(nn.functional.softplus(-pred).mean().item(), rel=1e-6)
    loss.backward()
    torch.testing.assert_close(pred.grad, (torch.sigmoid(pred) - 1).detach() / pred.numel())
    assert GANLoss('lsgan')(torch.full((2, 1, 3, 3), 0.5), False).item() == pytest.approx(0.25)

def test_labels():
    assert GANLoss('lsgan', real_label=0.9)(torch.ones(1, 1, 2, 2), True).item() == pytest.approx(0.01, rel=1e-5)
    assert GANLoss('vanilla', fake_label=0.1)(torch.zeros(1, 1, 2, 2), False).item() == pytest.approx(math.log(2), rel=1e-6)

@pytest.mark.parametrize('mode', gan_modes)
def test_float32_from_half_logits(mode):
    pred = torch.randn(2, 1, 4, 4)
    for dt in (torch.bfloat16, torch.float16):
        loss = GANLoss(mode)(pred.to(dt).requires_grad_(), False)
        assert loss.dtype == torch.float32
        assert loss.item() == pytest.approx(GANLoss(mode)(pred.to(dt).float(), False).item(), rel=1e-6)

@pytest.mark.parametrize('mode', gan_modes)
def test_targets_follow_prediction_device(mode):
    "Targets are made on the prediction's device: a 'meta' prediction gives a 'meta' loss, no host tensor involved"
    loss = GANLoss(mode)(torch.empty(2, 1, 30, 30, device='meta', dtype=torch.bfloat16), True)
    assert loss.device.type == 'meta' and loss.dtype == torch.float32

def test_under_autocast():
    D = nn.Conv2d(6, 1, 3)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        pred = D(torch.randn(2, 6, 8, 8))
        loss = GANLoss()(pred, True)
    assert pred.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert D.weight.grad.isfinite().all()

def test_bad_mode():
    with pytest.raises(ValueError, match="'vanilla', 'lsgan', 'hinge', 'wgangp'"): GANLoss('wgan')
    assert "mode='hinge'" in repr(GANLoss('hinge'))

# --- gradient penalty ------------------------------------------------------------------------------

class Linear(nn.Module):
    "D(x) = sum(w * x) per sample: its gradient is w everywhere"
    def __init__(self, w): super().__init__(); self.w = nn.Parameter(w)
    def forward(self, x): return (x * self.w).sum((1, 2, 3))

@pytest.mark.parametrize('kind', ['mixed', 'real', 'fake'])
def test_gp_linear_critic(kind):
    w = torch.full((1, 2, 2), 1.5)  # |w| = 3
    D = Linear(w.clone())
    real, fake = torch.randn(4, 1, 2, 2), torch.randn(4, 1, 2, 2, requires_grad=True)
    gp = gradient_penalty(D, real, fake, weight=10., kind=kind)
    assert gp.ndim == 0 and gp.dtype == torch.float32
    assert gp.item() == pytest.approx(10 * (3 - 1)**2, rel=1e-5)
    gp.backward()  # create_graph: the penalty reaches the critic's weights
    torch.testing.assert_close(D.w.grad, 2 * 10 * (3 - 1) * w / 3)
    assert fake.grad is None  # the samples themselves are not differentiated

def test_gp_unit_gradient_is_free():
    D = Linear(torch.full((1, 2, 2), 0.5))  # |w| = 1
    assert gradient_penalty(D, torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2)).item() == pytest.approx(0, abs=1e-6)

def test_gp_cond_is_concatenated_first():
    w = torch.cat([torch.full((2, 2, 2), 5.), torch.full((1, 2, 2), 2.)])  # 2 cond channels, then 1 sample channel
    D = Linear(w)
    real, fake, cond = torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2), torch.randn(3, 2, 2, 2)
    # only the sample's part of the gradient counts: |grad| = sqrt(4 * 2**2) = 4
    assert gradient_penalty(D, real, fake, cond=cond, weight=1.).item() == pytest.approx(9., rel=1e-5)

def test_gp_mixes_each_sample():
    "With D(x) = sum(x**2)/2, grad = x: between real=1 and fake=0 each sample's norm is alpha_i * sqrt(n)"
    D = lambda x: x.pow(2).sum((1, 2, 3)) / 2
    real, fake = torch.ones(5, 1, 2, 2), torch.zeros(5, 1, 2, 2)
    torch.manual_seed(3); gp = gradient_penalty(D, real, fake, weight=2.)
    torch.manual_seed(3); alpha = torch.rand(5)
    assert len(alpha.unique()) == 5
    assert gp.item() == pytest.approx((2 * (alpha * 2 - 1)**2).mean().item(), rel=1e-5)

def test_gp_patch_critic_and_bad_kind():
    D = nn.Sequential(nn.Conv2d(6, 4, 3), nn.LeakyReLU(0.2), nn.Conv2d(4, 1, 3))
    real, fake, cond = torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)
    gp = gradient_penalty(D, real, fake, cond=cond)
    assert gp.ndim == 0 and gp.item() > 0
    gp.backward()
    for w in (D[0].weight, D[2].weight): assert w.grad.isfinite().all() and w.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="'mixed', 'real', 'fake'"): gradient_penalty(D, real, fake, cond=cond, kind='both')

# --- reconstruction --------------------------------------------------------------------------------

def test_recon_values():
    pred, targ = torch.tensor([[0., 1.], [2., -1.]]), torch.tensor([[1., 1.], [0., 1.]])
    assert recon_loss('l1')(pred, targ).item() == pytest.approx(5/4)
    assert recon_loss('l2')(pred, targ).item() == pytest.approx(9/4)
    assert isinstance(recon_loss(), L1Recon) and isinstance(recon_loss('l2'), L2Recon)
    assert L1Recon()(pred.bfloat16(), targ).dtype == torch.float32

def test_recon_registry():
    f = nn.SmoothL1Loss()
    assert recon_loss(f) is f
    with pytest.raises(ValueError, match="'l1', 'l2'"): recon_loss('ssim')
    class Edge(nn.Module):
        def __init__(self, scale=1.): super().__init__(); self.scale = scale
        def forward(self, pred, targ): return self.scale * (pred.diff(dim=-1) - targ.diff(dim=-1)).abs().mean()
    recon_losses['edge'] = Edge
    try:
        loss = recon_loss('edge', scale=2.)
        assert loss(torch.tensor([[0., 2.]]), torch.tensor([[0., 1.]])).item() == pytest.approx(2.)
    finally: del recon_losses['edge']
