"Small convolutions as matmuls (`MatmulConvs`): the same convolutions, taken only under bfloat16 autocast on the CPU and never compiled"
import warnings
import pytest, torch
from torch import nn
import torch.nn.functional as F
import gan_callbacks.precision as precision
from gan_callbacks.precision import MatmulConvs, FitPrecision, maybe_autocast
from helpers import make_learner

CONVS = [nn.Conv2d(8, 6, 4, 2, 1), nn.Conv2d(8, 6, 3, 1, 1, bias=False), nn.Conv2d(8, 6, 4, 1, 1), nn.Conv2d(8, 6, (3, 5), (1, 2), (0, 2)),
         nn.ConvTranspose2d(8, 6, 4, 2, 1), nn.ConvTranspose2d(8, 6, 3, 2, 1, output_padding=1, bias=False), nn.ConvTranspose2d(8, 6, 3, 1, 1)]

@pytest.mark.parametrize('conv', CONVS, ids=repr)
@pytest.mark.parametrize('hw', [(1, 1), (2, 3), (5, 4)])
@pytest.mark.parametrize('channels_last', [False, True])
def test_matmul_convs_compute_the_convolution(conv, hw, channels_last):
    "Outputs and all gradients as PyTorch's convolution gives them, to float32 rounding"
    torch.manual_seed(0)
    x = torch.randn(3, 8, *hw)
    if channels_last: x = x.contiguous(memory_format=torch.channels_last)
    if isinstance(conv, nn.Conv2d) and any(s + 2*p < k for s, p, k in zip(hw, conv.padding, conv.kernel_size)): return   # no output
    res = []
    for mode in (None, MatmulConvs()):
        x_ = x.clone().requires_grad_()
        if mode is None: y = conv(x_)
        else:
            with mode: y = conv(x_)
        g = torch.autograd.grad(y.square().sum(), [x_, *conv.parameters()])
        res.append((y, *g))
    for a, b in zip(*res): torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)

def used(monkeypatch):
    "The names of the matmul forms called from now on, in order"
    calls = []
    for f in ('conv_as_matmul', 'conv_transpose_as_matmul'):
        monkeypatch.setattr(precision, f, (lambda g: lambda *a: calls.append(g.__name__) or g(*a))(getattr(precision, f)))
    return calls

def test_large_and_grouped_convolutions_are_left_to_pytorch(monkeypatch):
    calls = used(monkeypatch)
    with MatmulConvs(max_positions=16):
        nn.Conv2d(4, 4, 3, 1, 1)(torch.randn(1, 4, 5, 5))            # 25 output positions
        nn.ConvTranspose2d(4, 4, 4, 2, 1)(torch.randn(1, 4, 5, 5))   # 25 input positions
        nn.Conv2d(4, 4, 3, 1, 1, groups=2)(torch.randn(1, 4, 2, 2))
        nn.Conv2d(4, 4, 3, 1, 'same')(torch.randn(1, 4, 2, 2))
        nn.Conv2d(4, 4, 3, 1, 2, dilation=2)(torch.randn(1, 4, 2, 2))
        assert calls == []
        nn.Conv2d(4, 4, 3, 1, 1)(torch.randn(1, 4, 4, 4)); nn.ConvTranspose2d(4, 4, 4, 2, 1)(torch.randn(1, 4, 4, 4))
    assert calls == ['conv_as_matmul', 'conv_transpose_as_matmul']

@pytest.mark.parametrize('bf16', [False, True])
def test_only_bfloat16_fits_on_the_cpu_take_them(tmp_path, monkeypatch, bf16):
    "A bfloat16 fit's small convolutions (the U-Net's inner layers) run as matmuls and it trains; a float32 fit never enters the mode"
    calls = used(monkeypatch)
    learn = make_learner(tmp_path)
    if bf16: learn.to_bf16()
    before = [p.detach().clone() for p in learn.model.parameters()]
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert bool(calls) == bf16
    assert all(torch.isfinite(p).all() for p in learn.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, learn.model.parameters()))

def test_not_on_cuda_nor_compiled_nor_asked_not_to(tmp_path, monkeypatch):
    calls, learn = used(monkeypatch), make_learner(tmp_path).to_bf16()
    for ctx in (FitPrecision().setup(learn).autocast(), FitPrecision().setup(learn, compile=True).autocast(),
                maybe_autocast('cpu', torch.bfloat16, matmul_convs=False)):
        with ctx: nn.Conv2d(2, 2, 3, 1, 1)(torch.randn(1, 2, 2, 2))
    assert calls == ['conv_as_matmul']   # only the first
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')   # autocast's notice that this machine has no CUDA
        assert isinstance(maybe_autocast('cuda', torch.bfloat16), torch.autocast)
