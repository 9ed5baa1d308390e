"DiffAugment: the reference's functions (data-efficient-gans, DiffAugment_pytorch.py) written out here from their math, equal under the same torch random state; a pair's spatial draws shared."
import pytest, torch
import torch.nn.functional as F
from gan_callbacks.stabilizers.diffaugment import diff_augment, check_policy, rand_translation, rand_cutout

# --- the reference's math, one draw per image from torch's generator, in the reference's order -----------------------
def ref_brightness(x): return x + (torch.rand(x.size(0), 1, 1, 1, dtype=x.dtype, device=x.device) - 0.5)
def ref_saturation(x):
    m = x.mean(dim=1, keepdim=True)
    return (x - m) * (torch.rand(x.size(0), 1, 1, 1, dtype=x.dtype, device=x.device) * 2) + m
def ref_contrast(x):
    m = x.mean(dim=[1, 2, 3], keepdim=True)
    return (x - m) * (torch.rand(x.size(0), 1, 1, 1, dtype=x.dtype, device=x.device) + 0.5) + m

def ref_translation(x, ratio=0.125):
    "Index a 1-pixel zero-padded copy at clamped shifted positions"
    n, c, h, w = x.shape
    sx, sy = int(h * ratio + 0.5), int(w * ratio + 0.5)
    tx = torch.randint(-sx, sx + 1, size=[n, 1, 1], device=x.device)
    ty = torch.randint(-sy, sy + 1, size=[n, 1, 1], device=x.device)
    gb, gx, gy = torch.meshgrid(torch.arange(n), torch.arange(h), torch.arange(w), indexing='ij')
    gx = torch.clamp(gx + tx + 1, 0, h + 1)
    gy = torch.clamp(gy + ty + 1, 0, w + 1)
    pad = F.pad(x, [1, 1, 1, 1, 0, 0, 0, 0])
    return pad.permute(0, 2, 3, 1).contiguous()[gb, gx, gy].permute(0, 3, 1, 2).contiguous()

def ref_cutout(x, ratio=0.5):
    "Zero a mask at clamped offsets around a random centre"
    n, c, h, w = x.shape
    cs = int(h * ratio + 0.5), int(w * ratio + 0.5)
    ox = torch.randint(0, h + (1 - cs[0] % 2), size=[n, 1, 1], device=x.device)
    oy = torch.randint(0, w + (1 - cs[1] % 2), size=[n, 1, 1], device=x.device)
    gb, gx, gy = torch.meshgrid(torch.arange(n), torch.arange(cs[0]), torch.arange(cs[1]), indexing='ij')
    gx = torch.clamp(gx + ox - cs[0] // 2, min=0, max=h - 1)
    gy = torch.clamp(gy + oy - cs[1] // 2, min=0, max=w - 1)
    mask = torch.ones(n, h, w, dtype=x.dtype, device=x.device)
    mask[gb, gx, gy] = 0
    return x * mask.unsqueeze(1)

REF = {'color': [ref_brightness, ref_saturation, ref_contrast], 'translation': [ref_translation], 'cutout': [ref_cutout]}
def ref_diff_augment(x, policy):
    for p in policy.split(','):
        for f in REF[p]: x = f(x)
    return x

SHAPES = [(4, 3, 32, 32), (3, 6, 17, 23), (2, 1, 64, 48), (5, 3, 8, 8), (1, 3, 9, 4)]
POLICIES = ['color', 'translation', 'cutout', 'color,translation,cutout', 'translation,cutout', 'cutout,color']

@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('policy', POLICIES)
def test_equals_reference_under_the_same_random_state(shape, policy):
    for dtype in (torch.float32, torch.float64):
        x = torch.rand(shape, dtype=dtype, generator=torch.Generator().manual_seed(0)) * 2 - 1
        for seed in range(4):
            torch.manual_seed(seed); a = ref_diff_augment(x, policy); after_ref = torch.rand(2)
            torch.manual_seed(seed); b = diff_augment(x, policy); after = torch.rand(2)
            assert torch.equal(a, b), (shape, policy, dtype, seed)
            assert torch.equal(after_ref, after)   # the same draws consumed

def test_gradients_equal_reference():
    x = torch.rand(3, 3, 16, 16, dtype=torch.float64) * 2 - 1
    w = torch.randn_like(x)
    grads = []
    for f in (ref_diff_augment, diff_augment):
        xi = x.clone().requires_grad_()
        torch.manual_seed(3); (f(xi, 'color,translation,cutout') * w).sum().backward()
        grads.append(xi.grad)
    assert torch.allclose(*grads, rtol=0, atol=1e-14) and grads[0].abs().sum() > 0   # summed in another order: to the last bit or so

def test_translation_is_a_zero_filled_shift():
    x = torch.arange(2 * 1 * 16 * 16, dtype=torch.float32).view(2, 1, 16, 16) + 1
    torch.manual_seed(0)
    dy, dx = torch.randint(-2, 3, size=[2, 1, 1]), torch.randint(-2, 3, size=[2, 1, 1])
    torch.manual_seed(0); t = rand_translation(x)
    for i in range(2):
        a, b = int(dy[i]), int(dx[i])
        want = torch.zeros(16, 16)
        src = x[i, 0, max(a, 0):16 + min(a, 0), max(b, 0):16 + min(b, 0)]
        want[max(-a, 0):16 - max(a, 0), max(-b, 0):16 - max(b, 0)] = src
        assert torch.equal(t[i, 0], want)

def test_cutout_zeroes_a_clipped_rectangle():
    x = torch.ones(64, 1, 10, 10)
    torch.manual_seed(0); c = rand_cutout(x)
    holes = (c[:, 0] == 0)
    for h in holes:   # one rectangle, at most 5x5, clipped at the border
        rows, cols = h.any(1).nonzero().flatten(), h.any(0).nonzero().flatten()
        assert 0 < len(rows) <= 5 and 0 < len(cols) <= 5
        assert h.sum() == len(rows) * len(cols) and (rows.diff() == 1).all() and (cols.diff() == 1).all()
    assert holes[:, 0].any() and holes[:, -1].any()   # some clipped at the border

def test_pairs_share_spatial_draws():
    A, B = torch.rand(4, 3, 32, 32) * 2 - 1, torch.rand(4, 3, 32, 32) * 2 - 1
    AB = torch.cat([A, B], 1)
    # the pair form: colour on B, then the reference's spatial parts on the concatenation, one random stream
    torch.manual_seed(5); want = ref_diff_augment(torch.cat([A, ref_diff_augment(B, 'color')], 1), 'translation,cutout')
    torch.manual_seed(5); got = diff_augment(AB, 'color,translation,cutout', n_cond=3)
    assert torch.equal(got, want)
    # the condition as a copy of the image: both halves land in the same places, and cut alike
    torch.manual_seed(6); out = diff_augment(torch.cat([B, B], 1), 'translation,cutout', n_cond=3)
    assert torch.equal(out[:, :3], out[:, 3:])
    torch.manual_seed(6); out = diff_augment(torch.cat([B, B], 1), 'color,translation,cutout', n_cond=3)
    zero_a, zero_b = (out[:, :3] == 0).all(1), (out[:, 3:] == 0).all(1)   # cut out or moved away: in both halves alike
    assert torch.equal(zero_a, zero_b) and zero_a.any()
    torch.manual_seed(6); ref = ref_diff_augment(torch.cat([B, ref_diff_augment(B, 'color')], 1), 'translation,cutout')
    assert torch.equal(out, ref)
    # and without `n_cond` the colour draws would mix the condition's channels in
    torch.manual_seed(6); mixed = diff_augment(torch.cat([B, B], 1), 'color', n_cond=0)
    torch.manual_seed(6); paired = diff_augment(torch.cat([B, B], 1), 'color', n_cond=3)
    assert torch.equal(paired[:, :3], B) and not torch.equal(mixed[:, :3], B)

def test_policies():
    x = torch.rand(2, 3, 8, 8)
    assert diff_augment(x, '') is x and diff_augment(x, None) is x
    assert check_policy('color,translation,cutout') == ['color', 'translation', 'cutout']
    with pytest.raises(ValueError, match="unknown part.*'colour'"): diff_augment(x, 'colour')
