"Small convolutions as matmuls (`MatmulConvs`): the same convolutions, taken only under native bfloat16 autocast on the CPU and never compiled; `precision='auto'`'s choice on each kind of device, the capability faked"
import warnings
from unittest import mock
import pytest, torch
from torch import nn
import torch.nn.functional as F
import gan_callbacks.trainer.precision as precision
from gan_callbacks.trainer.precision import MatmulConvs, FitPrecision, maybe_autocast, auto_precision, native_bf16, EmulatedBF16Warning
from gan_callbacks.gans.pix2pix import pix2pix_learner
from helpers import make_learner, flipped_dls, fit

@pytest.fixture(params=[True, False], ids=['native-bf16', 'emulated-bf16'])
def cpu_bf16(request, monkeypatch):
    "A CPU with native bfloat16 and one without, faked: the library's answer to 'does this CPU compute bfloat16?'"
    monkeypatch.setattr(precision, '_cpu_bf16', lambda: request.param)
    return request.param

def fake_cuda(monkeypatch, major):
    "A CUDA device of compute capability `major`.0, as far as `auto_precision` asks"
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda d=None: (major, 0))
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda d=None: f'GPU {major}.0')

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
    for mode in (None, MatmulConvs(min_channels=1)):
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
    with MatmulConvs(max_positions=16, min_channels=1):
        nn.Conv2d(4, 4, 3, 1, 1)(torch.randn(1, 4, 5, 5))            # 25 output positions
        nn.ConvTranspose2d(4, 4, 4, 2, 1)(torch.randn(1, 4, 5, 5))   # 25 input positions
        nn.Conv2d(4, 4, 3, 1, 1, groups=2)(torch.randn(1, 4, 2, 2))
        nn.Conv2d(4, 4, 3, 1, 'same')(torch.randn(1, 4, 2, 2))
        nn.Conv2d(4, 4, 3, 1, 2, dilation=2)(torch.randn(1, 4, 2, 2))
        assert calls == []
        nn.Conv2d(4, 4, 3, 1, 1)(torch.randn(1, 4, 4, 4)); nn.ConvTranspose2d(4, 4, 4, 2, 1)(torch.randn(1, 4, 4, 4))
    assert calls == ['conv_as_matmul', 'conv_transpose_as_matmul']

def test_thin_convolutions_are_left_to_pytorch(monkeypatch):
    "Fewer than `min_channels` output channels (a PatchGAN's last layer): a matrix-vector product, slower as a matmul"
    calls = used(monkeypatch)
    with MatmulConvs():
        nn.Conv2d(512, 1, 4, 1, 1)(torch.randn(1, 512, 7, 7)); nn.ConvTranspose2d(64, 32, 4, 2, 1)(torch.randn(1, 64, 4, 4))
        assert calls == []
        nn.Conv2d(512, 64, 4, 1, 1)(torch.randn(1, 512, 7, 7)); nn.ConvTranspose2d(32, 64, 4, 2, 1)(torch.randn(1, 32, 4, 4))
    assert calls == ['conv_as_matmul', 'conv_transpose_as_matmul']

@pytest.mark.parametrize('bf16', [False, True])
def test_only_bfloat16_fits_on_the_cpu_take_them(tmp_path, monkeypatch, bf16):
    "A bfloat16 fit's small convolutions (the U-Net's inner layers) run as matmuls and it trains; a float32 fit never enters the mode"
    monkeypatch.setattr(precision, '_cpu_bf16', lambda: True)   # the choice is checked on any CPU; the tiny fit costs seconds emulated
    calls = used(monkeypatch)
    learn = make_learner(tmp_path)
    if bf16: learn.to_bf16()
    before = [p.detach().clone() for p in learn.model.parameters()]
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert bool(calls) == bf16
    assert all(torch.isfinite(p).all() for p in learn.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, learn.model.parameters()))

def test_not_on_cuda_nor_compiled_nor_asked_not_to(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, '_cpu_bf16', lambda: True)
    calls, learn = used(monkeypatch), make_learner(tmp_path).to_bf16()
    for ctx in (FitPrecision().setup(learn).autocast(), FitPrecision().setup(learn, compile=True).autocast(),
                maybe_autocast('cpu', torch.bfloat16, matmul_convs=False)):
        with ctx: nn.Conv2d(2, 64, 3, 1, 1)(torch.randn(1, 2, 2, 2))
    assert calls == ['conv_as_matmul']   # only the first
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')   # autocast's notice that this machine has no CUDA
        assert isinstance(maybe_autocast('cuda', torch.bfloat16), torch.autocast)


# --- precision='auto' and an explicit bfloat16 on a CPU that emulates it

def test_auto_on_the_cpu(cpu_bf16):
    name, why = auto_precision('cpu')
    assert name == ('bf16' if cpu_bf16 else 'fp32') and native_bf16('cpu') == cpu_bf16
    assert ('natively' in why) == cpu_bf16 and ('no native bfloat16' in why) != cpu_bf16

@pytest.mark.parametrize('major,want', [(8, 'bf16'), (9, 'bf16'), (7, 'fp16'), (6, 'fp16')])
def test_auto_on_cuda(monkeypatch, major, want):
    "Ampere and later: bfloat16; older GPUs: fp16 with its scalers, as fastai's `to_fp16`"
    fake_cuda(monkeypatch, major)
    name, why = auto_precision('cuda:0')
    assert name == want and why.startswith(f'GPU {major}.0')
    learn = make_learner(None, precision='auto')
    monkeypatch.setattr(precision, 'learner_device', lambda learn: torch.device('cuda', 0))
    p = FitPrecision(precision='auto').setup(learn)
    assert p.chosen == want and p.device_type == 'cuda' and bool(p.scalers) == (want == 'fp16')

def test_auto_on_other_devices():
    assert auto_precision('meta')[0] == 'fp32' and native_bf16('meta') is False

def test_auto_fit_says_what_it_chose_and_trains_in_it(tmp_path, monkeypatch, capsys, cpu_bf16):
    "One line at the fit's start (not at `predict` or `validate`); the forwards run in the chosen dtype"
    seen = []
    learn = make_learner(tmp_path, precision='auto')
    learn.model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    with warnings.catch_warnings():
        warnings.simplefilter('error', EmulatedBF16Warning)   # auto never picks what this CPU emulates
        fit(learn)
    err = capsys.readouterr().err
    assert err.count('precision auto: ') == 1
    assert f"precision auto: {'bf16' if cpu_bf16 else 'fp32'} (" in err
    assert set(seen) == {torch.bfloat16 if cpu_bf16 else torch.float32}
    learn.validate()
    assert 'precision auto' not in capsys.readouterr().err

def test_explicit_bf16_on_an_emulating_cpu_warns_and_runs_without_matmul_convs(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, '_cpu_bf16', lambda: False)
    calls = used(monkeypatch)
    for learn in (make_learner(tmp_path, precision='bf16'), make_learner(tmp_path).to_bf16()):
        with pytest.warns(EmulatedBF16Warning, match=r"emulated on this CPU .* 5-20x slower than in float32"):
            fit(learn)
        assert all(torch.isfinite(p).all() for p in learn.model.parameters())
    assert calls == []   # the matmul form is slower there too

def test_explicit_precisions_keep_their_meaning(tmp_path, cpu_bf16):
    "'fp32' and 'bf16' whatever the CPU; the trainer's precision wins over the Learner's `to_bf16()`; fp16 only on CUDA"
    learn = make_learner(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', EmulatedBF16Warning)
        assert FitPrecision(precision='bf16').setup(learn).dtype == torch.bfloat16
    assert FitPrecision(precision='fp32').setup(learn.to_bf16()).dtype is None
    with pytest.raises(ValueError, match="'fp16' needs a CUDA device"): FitPrecision(precision='fp16').setup(learn)
    with pytest.raises(ValueError, match='auto, fp32, bf16, fp16'): FitPrecision(precision='float8')

def test_learner_functions_take_precision():
    learn = pix2pix_learner(flipped_dls(), precision='auto')
    assert learn.cbs.filter(lambda cb: hasattr(cb, 'precision') and isinstance(cb.precision, FitPrecision))[0].precision.precision == 'auto'
