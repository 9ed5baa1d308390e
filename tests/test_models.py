import functools, math
import pytest, torch
from torch import nn
from gan_callbacks.nets.networks import (UnetGenerator, UnetBlock, PatchDiscriminator, PixelDiscriminator, init_weights,
                                  norm_layer, check_input)

def n_params(m): return sum(p.numel() for p in m.parameters())
def convs(m): return [c for c in m.modules() if isinstance(c, (nn.Conv2d, nn.ConvTranspose2d))]

# --- parameter counts and shapes -------------------------------------------------------------------

def test_param_counts():
    assert n_params(UnetGenerator()) == 54_413_955                 # unet_256
    assert n_params(UnetGenerator(num_downs=7)) == 41_828_995      # unet_128
    assert n_params(PatchDiscriminator()) == 2_768_705
    assert n_params(PixelDiscriminator()) == 9_024

def test_generator_attrs_and_shapes():
    G = UnetGenerator(in_ch=1, out_ch=2, num_downs=6, ngf=4)
    assert (G.in_ch, G.out_ch, G.num_downs, G.multiple) == (1, 2, 6, 64)
    y = G(torch.randn(2, 1, 128, 64))
    assert y.shape == (2, 2, 128, 64)
    assert y.abs().max() <= 1 and y.abs().max() > 0  # Tanh output

def test_patchgan_256():
    D = PatchDiscriminator()
    with torch.no_grad(): out = D(torch.randn(1, 6, 256, 256))
    assert out.shape == (1, 1, 30, 30)
    assert out.min() < 0 < out.max()  # logits, no sigmoid

def test_discriminator_variants_shapes():
    assert PatchDiscriminator(in_ch=3, ndf=8, n_layers=2)(torch.randn(2, 3, 64, 64)).shape == (2, 1, 14, 14)
    assert PatchDiscriminator(ndf=8, n_layers=1)(torch.randn(2, 6, 32, 32)).shape == (2, 1, 14, 14)
    assert PixelDiscriminator(ndf=8)(torch.randn(2, 6, 10, 14)).shape == (2, 1, 10, 14)

def test_patchgan_receptive_field():
    "Each logit depends on a 70x70 window of the input"
    D = PatchDiscriminator(ndf=4, norm='none').double()
    x = torch.randn(1, 6, 96, 96, dtype=torch.double, requires_grad=True)
    D(x)[0, 0, 5, 5].backward()
    rows = x.grad.abs().sum((0, 1, 3)).nonzero()
    assert rows.max() - rows.min() + 1 == 70

# --- structure -------------------------------------------------------------------------------------

def test_unet_structure():
    G = UnetGenerator(num_downs=8, ngf=2)
    # bias only where no BatchNorm follows: just the output transposed conv
    assert [c.bias is not None for c in convs(G)].count(True) == 1
    assert isinstance(G.model.model[3], nn.ConvTranspose2d) and G.model.model[3].bias is not None
    assert isinstance(G.model.model[-1], nn.Tanh)
    # the bottleneck: the innermost block, its down conv not followed by a norm
    blocks = [m for m in G.modules() if isinstance(m, UnetBlock)]
    assert len(blocks) == 8
    inner = blocks[-1]
    assert [type(l) for l in inner.model] == [nn.LeakyReLU, nn.Conv2d, nn.ReLU, nn.ConvTranspose2d, nn.BatchNorm2d]

def test_dropout_on_three_innermost_decoder_blocks():
    G = UnetGenerator(num_downs=8, ngf=2)
    shapes = []
    for m in G.modules():
        if isinstance(m, nn.Dropout):
            assert m.p == 0.5
            m.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape[1:])))
    G(torch.randn(2, 3, 256, 256))
    assert sorted(shapes) == [(16, 4, 4), (16, 8, 8), (16, 16, 16)]  # ngf*8 channels at 4, 8 and 16
    assert sum(isinstance(m, nn.Dropout) for m in UnetGenerator(num_downs=7, ngf=2).modules()) == 2
    assert not any(isinstance(m, nn.Dropout) for m in UnetGenerator(num_downs=8, ngf=2, use_dropout=False).modules())

def test_train_mode_dropout_random_eval_deterministic():
    G = UnetGenerator(num_downs=6, ngf=4)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert not torch.equal(G(x), G(x))
        G.eval()
        assert torch.equal(G(x), G(x))

@pytest.mark.parametrize('norm', ['instance', 'none'])
def test_norm_variants(norm):
    G = UnetGenerator(num_downs=5, ngf=4, norm=norm, use_dropout=False)
    D = PatchDiscriminator(ndf=4, norm=norm)
    P = PixelDiscriminator(ndf=4, norm=norm)
    for net in (G, D, P):
        assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
        assert all(c.bias is not None for c in convs(net))  # no BatchNorm to absorb the bias
        inorms = [m for m in net.modules() if isinstance(m, nn.InstanceNorm2d)]
        assert bool(inorms) == (norm == 'instance')
        assert all(not m.affine and not m.track_running_stats for m in inorms)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():  # no batch statistics: an image's output does not depend on its batch
        torch.testing.assert_close(G(x)[:1], G(x[:1]), atol=1e-5, rtol=1e-4)
        assert D(torch.randn(2, 6, 32, 32)).shape == (2, 1, 2, 2)

def test_bad_norm():
    for make in (lambda: UnetGenerator(norm='layer'), lambda: PatchDiscriminator(norm='layer'),
                 lambda: PixelDiscriminator(norm='Batch')):
        with pytest.raises(ValueError, match="'batch', 'instance', 'none'"): make()

def test_num_downs_too_small():
    with pytest.raises(ValueError, match='at least 5'): UnetGenerator(num_downs=4)

# --- initialisation --------------------------------------------------------------------------------

def test_init_statistics():
    torch.manual_seed(0)
    for net in (UnetGenerator(num_downs=7, ngf=16), PatchDiscriminator()):
        ws = torch.cat([c.weight.detach().flatten() for c in convs(net)])
        assert abs(ws.mean()) < 1e-3 and abs(ws.std() - 0.02) < 5e-4
        assert all((c.bias == 0).all() for c in convs(net) if c.bias is not None)
        bn = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
        bw = torch.cat([m.weight.detach() for m in bn])
        assert abs(bw.mean() - 1) < 3e-3 and abs(bw.std() - 0.02) < 3e-3
        assert all((m.bias == 0).all() for m in bn)

def test_init_schemes():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(64, 128, 3), nn.Linear(256, 128), nn.BatchNorm2d(16), nn.InstanceNorm2d(4))
    fan_in, fan_out = 64*9, 128*9
    init_weights(net, 'kaiming')
    assert abs(net[0].weight.std() - math.sqrt(2/fan_in)) < 2e-3
    init_weights(net, 'xavier', gain=1.)
    assert abs(net[0].weight.std() - math.sqrt(2/(fan_in+fan_out))) < 2e-3
    init_weights(net, 'orthogonal', gain=2.)
    w = net[1].weight.detach()
    torch.testing.assert_close(w @ w.T, 4*torch.eye(128), atol=1e-4, rtol=0)
    assert init_weights(net, 'normal', gain=0.1) is net
    assert abs(net[1].weight.std() - 0.1) < 0.01 and abs(net[2].weight.mean() - 1) < 0.1
    with pytest.raises(ValueError, match="'normal', 'xavier', 'kaiming', 'orthogonal'"): init_weights(net, 'uniform')

def test_spectral_norm():
    D = PatchDiscriminator(ndf=8, norm='none', spectral_norm=True)
    sn = [c for c in D.modules() if isinstance(c, nn.Conv2d)]
    assert len(sn) == 5 and all(nn.utils.parametrize.is_parametrized(c, 'weight') for c in sn)
    assert n_params(D) == n_params(PatchDiscriminator(ndf=8, norm='none'))
    assert abs(sn[1].parametrizations.weight.original.std() - 0.02) < 3e-3  # initialised before normalising
    for _ in range(15): D(torch.randn(1, 6, 32, 32))
    for c in sn: assert abs(torch.linalg.matrix_norm(c.weight.detach().flatten(1), ord=2) - 1) < 0.05
    init_weights(D, 'normal', gain=0.5)  # re-initialising goes through the original weight
    assert abs(sn[1].parametrizations.weight.original.std() - 0.5) < 0.05

# --- input checks ----------------------------------------------------------------------------------

def test_size_error():
    G = UnetGenerator(num_downs=6, ngf=2)
    with pytest.raises(ValueError, match='multiples of 64, got 64x96'): G(torch.randn(1, 3, 64, 96))
    with pytest.raises(ValueError, match='multiples of 128, got 120x128'): UnetGenerator(num_downs=7, ngf=2)(torch.randn(1, 3, 120, 128))

def test_channel_errors():
    with pytest.raises(ValueError, match='UnetGenerator expected 3 input channels, got 1'):
        UnetGenerator(num_downs=5, ngf=2)(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match='PatchDiscriminator expected 6 input channels, got 3'):
        PatchDiscriminator(ndf=4)(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match='PixelDiscriminator expected 4 input channels, got 6'):
        PixelDiscriminator(in_ch=4, ndf=4)(torch.randn(1, 6, 8, 8))
    with pytest.raises(ValueError, match=r'4D batch'): UnetGenerator(num_downs=5, ngf=2)(torch.randn(3, 32, 32))

def test_check_input_under_compile():
    "The checks are skipped while dynamo traces, so they add no guards or graph breaks"
    G = UnetGenerator(num_downs=5, ngf=2, use_dropout=False).eval()
    x = torch.randn(1, 3, 32, 32)
    explain = torch._dynamo.explain(G)(x)
    assert explain.graph_break_count == 0 and explain.graph_count == 1

# --- memory format and mixed precision -------------------------------------------------------------

def test_channels_last_matches_contiguous():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32)
    for net, inp in ((UnetGenerator(num_downs=5, ngf=4).eval(), x),
                     (UnetGenerator(num_downs=5, ngf=4, use_dropout=False), x),  # train mode: batch statistics
                     (PatchDiscriminator(ndf=8), torch.randn(2, 6, 32, 32))):
        with torch.no_grad():
            ref = net(inp)
            net.to(memory_format=torch.channels_last)
            out = net(inp.contiguous(memory_format=torch.channels_last))
        torch.testing.assert_close(out.contiguous(), ref, atol=1e-5, rtol=1e-4)

def test_autocast_bf16_forward_backward():
    torch.manual_seed(0)
    G, D = UnetGenerator(num_downs=5, ngf=4), PatchDiscriminator(ndf=8)
    dtypes = []
    for c in convs(G) + convs(D): c.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    x = torch.randn(2, 3, 32, 32)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        y = G(x)
        out = D(torch.cat([x, y], 1))
    assert len(dtypes) == len(convs(G)) + len(convs(D)) and set(dtypes) == {torch.bfloat16}
    assert y.isfinite().all() and out.isfinite().all()
    out.float().mean().backward()
    for p in list(G.parameters()) + list(D.parameters()):
        assert p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 and p.grad.isfinite().all()
    assert any(p.grad.abs().sum() > 0 for p in G.parameters())

# --- parity with the reference implementation ------------------------------------------------------
# A condensed copy of the reference's UnetSkipConnectionBlock (BatchNorm case), to check that parameter
# names match (so its checkpoints load) and that the outputs are the same.

class _RefBlock(nn.Module):
    def __init__(self, outer_nc, inner_nc, input_nc=None, submodule=None, outermost=False, innermost=False,
                 norm_layer=nn.BatchNorm2d, use_dropout=False):
        super().__init__()
        self.outermost, use_bias = outermost, norm_layer == nn.InstanceNorm2d
        input_nc = input_nc or outer_nc
        downconv = nn.Conv2d(input_nc, inner_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
        downrelu, downnorm, uprelu, upnorm = nn.LeakyReLU(0.2, True), norm_layer(inner_nc), nn.ReLU(True), norm_layer(outer_nc)
        if outermost:
            upconv = nn.ConvTranspose2d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1)
            model = [downconv] + [submodule] + [uprelu, upconv, nn.Tanh()]
        elif innermost:
            upconv = nn.ConvTranspose2d(inner_nc, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv] + [uprelu, upconv, upnorm]
        else:
            upconv = nn.ConvTranspose2d(inner_nc * 2, outer_nc, kernel_size=4, stride=2, padding=1, bias=use_bias)
            model = [downrelu, downconv, downnorm] + [submodule] + [uprelu, upconv, upnorm]
            if use_dropout: model += [nn.Dropout(0.5)]
        self.model = nn.Sequential(*model)

    def forward(self, x): return self.model(x) if self.outermost else torch.cat([x, self.model(x)], 1)

class _RefUnet(nn.Module):
    def __init__(self, input_nc, output_nc, num_downs, ngf=64, use_dropout=False):
        super().__init__()
        b = _RefBlock(ngf * 8, ngf * 8, innermost=True)
        for i in range(num_downs - 5): b = _RefBlock(ngf * 8, ngf * 8, submodule=b, use_dropout=use_dropout)
        b = _RefBlock(ngf * 4, ngf * 8, submodule=b)
        b = _RefBlock(ngf * 2, ngf * 4, submodule=b)
        b = _RefBlock(ngf, ngf * 2, submodule=b)
        self.model = _RefBlock(output_nc, ngf, input_nc=input_nc, submodule=b, outermost=True)

    def forward(self, x): return self.model(x)

def test_reference_parity():
    torch.manual_seed(0)
    G, ref = UnetGenerator(num_downs=6, ngf=4), _RefUnet(3, 3, 6, ngf=4, use_dropout=True)
    sd = G.state_dict()
    assert {k: v.shape for k, v in sd.items()} == {k: v.shape for k, v in ref.state_dict().items()}
    ref.load_state_dict(sd)
    x = torch.randn(2, 3, 64, 64, requires_grad=True)
    for mode in ('eval', 'train'):  # train mode: same dropout masks from the same seed
        getattr(G, mode)(); getattr(ref, mode)()
        torch.manual_seed(1); y = G(x)
        torch.manual_seed(1); y_ref = ref(x)
        torch.testing.assert_close(y, y_ref)
        g, = torch.autograd.grad(y.sum(), x)
        g_ref, = torch.autograd.grad(y_ref.sum(), x)
        torch.testing.assert_close(g, g_ref)

# --- ResNet generator (CycleGAN) -------------------------------------------------------------------

from gan_callbacks.nets.networks import ResnetGenerator, ResnetBlock
import torch.nn.functional as F

def test_resnet_param_counts():
    assert n_params(ResnetGenerator()) == 11_378_179                  # resnet_9blocks, instance norm
    assert n_params(ResnetGenerator(norm='batch')) == 11_383_427
    assert n_params(ResnetGenerator(n_blocks=6)) == 7_837_699          # resnet_6blocks
    assert n_params(ResnetGenerator(use_dropout=True, padding='zero')) == 11_378_179  # neither adds parameters
    assert n_params(PatchDiscriminator(in_ch=3, norm='instance')) == 2_764_737

def _ref_keys(n_blocks, norm='instance', dropout=False, padding='reflect'):
    "The reference ResnetGenerator's state_dict keys, written out from its layer list"
    bias, bn = norm != 'batch', norm == 'batch'
    def conv(i, b=True): return [f'{i}.weight'] + ([f'{i}.bias'] if b else [])
    def nrm(i): return [f'{i}.{k}' for k in ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')] if bn else []
    # 0 pad, 1 conv, 2 norm, 3 relu; (4, 5, 6) and (7, 8, 9) the downs; then the blocks; ups; pad, conv, tanh
    keys = conv(1, bias) + nrm(2) + conv(4, bias) + nrm(5) + conv(7, bias) + nrm(8)
    pad = 0 if padding == 'zero' else 1      # a padding layer before each block conv
    c1 = pad; n1 = c1 + 1; c2 = n1 + 2 + dropout + pad; n2 = c2 + 1
    for b in range(n_blocks):
        p = f'{10+b}.conv_block.'
        keys += [p+k for k in conv(c1, bias) + nrm(n1) + conv(c2, bias) + nrm(n2)]
    u = 10 + n_blocks
    keys += conv(u, bias) + nrm(u+1) + conv(u+3, bias) + nrm(u+4) + conv(u+7)
    return sorted('model.' + k for k in keys)

@pytest.mark.parametrize('n_blocks,norm,dropout,padding', [(9, 'instance', False, 'reflect'), (6, 'batch', True, 'reflect'),
                                                            (2, 'instance', True, 'zero'), (3, 'none', False, 'replicate')])
def test_resnet_reference_keys(n_blocks, norm, dropout, padding):
    G = ResnetGenerator(ngf=4, n_blocks=n_blocks, norm=norm, use_dropout=dropout, padding=padding)
    assert sorted(G.state_dict()) == _ref_keys(n_blocks, norm, dropout, padding)

def test_resnet_shapes_and_structure():
    G = ResnetGenerator(in_ch=1, out_ch=2, ngf=8, n_blocks=3)
    assert (G.in_ch, G.out_ch, G.n_blocks, G.multiple) == (1, 2, 3, 4)
    feats = []
    for b in G.modules():
        if isinstance(b, ResnetBlock): b.register_forward_hook(lambda m, i, o: feats.append(tuple(o.shape[1:])))
    y = G(torch.randn(2, 1, 48, 36))
    assert y.shape == (2, 2, 48, 36) and y.abs().max() <= 1
    assert feats == [(32, 12, 9)] * 3                           # 4*ngf channels at a quarter of the size
    assert isinstance(G.model[0], nn.ReflectionPad2d) and G.model[0].padding == (3, 3, 3, 3)
    assert isinstance(G.model[-1], nn.Tanh) and G.model[-2].kernel_size == (7, 7)
    ups = [c for c in G.modules() if isinstance(c, nn.ConvTranspose2d)]
    assert [(c.kernel_size, c.stride, c.output_padding) for c in ups] == [((3, 3), (2, 2), (1, 1))] * 2
    inorms = [m for m in G.modules() if isinstance(m, nn.InstanceNorm2d)]
    assert len(inorms) == 5 + 2*3 and all(not m.affine and not m.track_running_stats for m in inorms)
    assert all(c.bias is not None for c in convs(G))             # instance norm: convs keep their bias
    Gb = ResnetGenerator(ngf=4, n_blocks=1, norm='batch')
    assert [c.bias is not None for c in convs(Gb)] == [False] * (len(convs(Gb)) - 1) + [True]  # only the last conv

def _functional_resnet(sd, x, n_blocks, pad_mode):
    "The reference's forward with instance norm written with torch.nn.functional on a state dict"
    def conv(x, i, **kw): return F.conv2d(x, sd[f'{i}.weight'], sd[f'{i}.bias'], **kw)
    def blk_conv(x, b, i):
        if pad_mode == 'zero': j = {1: 0, 5: 3}[i]; return F.conv2d(x, sd[f'{b}.conv_block.{j}.weight'], sd[f'{b}.conv_block.{j}.bias'], padding=1)
        return F.conv2d(F.pad(x, (1,)*4, mode=pad_mode), sd[f'{b}.conv_block.{i}.weight'], sd[f'{b}.conv_block.{i}.bias'])
    r = F.relu
    x = r(F.instance_norm(conv(F.pad(x, (3,)*4, mode='reflect'), 1)))
    x = r(F.instance_norm(conv(x, 4, stride=2, padding=1)))
    x = r(F.instance_norm(conv(x, 7, stride=2, padding=1)))
    for b in range(10, 10 + n_blocks):
        h = r(F.instance_norm(blk_conv(x, b, 1)))
        x = x + F.instance_norm(blk_conv(h, b, 5))
    u = 10 + n_blocks
    for i in (u, u+3):
        x = r(F.instance_norm(F.conv_transpose2d(x, sd[f'{i}.weight'], sd[f'{i}.bias'], stride=2, padding=1, output_padding=1)))
    return torch.tanh(conv(F.pad(x, (3,)*4, mode='reflect'), u+7))

@pytest.mark.parametrize('padding,mode', [('reflect', 'reflect'), ('replicate', 'replicate'), ('zero', 'zero')])
def test_resnet_padding_modes_match_functional(padding, mode):
    torch.manual_seed(0)
    G = ResnetGenerator(ngf=4, n_blocks=2, padding=padding)
    for p in G.parameters(): nn.init.normal_(p, 0, 0.3)        # make the biases matter too
    sd = {k[len('model.'):]: v for k, v in G.state_dict().items()}
    x = torch.randn(2, 3, 16, 12)
    with torch.no_grad(): torch.testing.assert_close(G(x), _functional_resnet(sd, x, 2, mode))
    pads = [type(m) for m in G.model[10].conv_block if isinstance(m, (nn.ReflectionPad2d, nn.ReplicationPad2d))]
    assert pads == {'reflect': [nn.ReflectionPad2d]*2, 'replicate': [nn.ReplicationPad2d]*2, 'zero': []}[padding]

def test_resnet_dropout_and_residual():
    G = ResnetGenerator(ngf=4, n_blocks=2, use_dropout=True)
    assert sum(isinstance(m, nn.Dropout) for m in G.modules()) == 2
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert not torch.equal(G(x), G(x))
        G.eval(); assert torch.equal(G(x), G(x))
    blk = ResnetBlock(4)
    nn.init.zeros_(blk.conv_block[-2].weight); nn.init.zeros_(blk.conv_block[-2].bias)
    h = torch.randn(1, 4, 8, 8)
    torch.testing.assert_close(blk(h), h)                        # a block that adds nothing passes its input on

def test_resnet_bad_args():
    with pytest.raises(ValueError, match="padding must be one of 'reflect', 'replicate', 'zero', got 'circular'"):
        ResnetGenerator(padding='circular')
    with pytest.raises(ValueError, match="'batch', 'instance', 'none'"): ResnetGenerator(norm='group')
    with pytest.raises(ValueError, match='n_blocks must be at least 0'): ResnetGenerator(n_blocks=-1)
    G = ResnetGenerator(ngf=2, n_blocks=0)
    with pytest.raises(ValueError, match='ResnetGenerator expected 3 input channels, got 1'): G(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match='multiples of 4, got 18x16'): G(torch.randn(1, 3, 18, 16))


def test_learner_functions_take_the_generators_sizing_options():
    "`pix2pix_learner(dls, ngf=8)` as `pix2pixhd_learner(dls, ngf=8)`: the options of the generator they build; refused beside a given one"
    from helpers import flipped_dls, unpaired_dls, batches
    from gan_callbacks.gans.pix2pix import pix2pix_learner
    from gan_callbacks.gans.cyclegan import cyclegan_learner
    from gan_callbacks.gans.cut import cut_learner
    n = lambda m: sum(p.numel() for p in m.parameters())
    dls, udls = flipped_dls(), unpaired_dls([batches(n=2)])
    l = pix2pix_learner(dls, ngf=8, num_downs=5)
    assert n(l.model) == n(UnetGenerator(3, 3, num_downs=5, ngf=8))
    c = cyclegan_learner(udls, ngf=8, n_blocks=2)
    assert n(c.model.g_a) == n(c.model.g_b) == n(ResnetGenerator(2, 2, ngf=8, n_blocks=2))   # the toy domains: 2 channels
    u = cut_learner(udls, ngf=8, n_blocks=2)
    assert n(u.model) == n(ResnetGenerator(2, 2, ngf=8, n_blocks=2, antialias=True, antialias_up=True))
    with pytest.raises(ValueError, match='ngf build the generator when none is given: pass them to its class'):
        pix2pix_learner(dls, UnetGenerator(num_downs=5), ngf=8)
