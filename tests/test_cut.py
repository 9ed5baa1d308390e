"CUT's networks against the reference's layout, CUTTrainer against a plain PyTorch CUT loop, exact resume, bf16, export and bad input."
import warnings, pickle
from copy import deepcopy
import numpy as np
import pytest, torch
import torch.nn.functional as F
from torch import nn
from fastai.basics import Learner, DataLoaders, Callback, set_seed
from fastai.optimizer import SGD
import fastai.callback.progress  # Learner.no_bar
import fastai.callback.schedule  # Learner.lr_find
from gan_callbacks.nets.networks import ResnetGenerator, PatchDiscriminator, PatchSampleF, init_weights
from gan_callbacks.nets.losses import PatchNCELoss
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.trainer.base import AdversarialTrainer
from gan_callbacks.gans.cut import CUTTrainer, cut_learner, cut_modes
from gan_callbacks.callback.checkpoint import GANCheckpoint
from helpers import Unpaired, unpaired_resume_dls, batches as rand_batches, unpaired_dls as make_dls, state, assert_close, run_cli as cli


def n_params(m): return sum(p.numel() for p in m.parameters())


# --- the networks, key for key the reference's

def ref_cut_g_keys(in_ch=3, out_ch=3, ngf=64, n_blocks=9):
    "The state dict layout (name -> shape) of the reference's anti-aliased `resnet_9blocks` with instance norm, written out"
    ks = {'model.1.weight': (ngf, in_ch, 7, 7), 'model.1.bias': (ngf,)}
    i, c = 4, ngf
    for _ in range(2):   # conv 3x3 stride 1, norm, ReLU, Downsample
        ks.update({f'model.{i}.weight': (2*c, c, 3, 3), f'model.{i}.bias': (2*c,), f'model.{i+3}.filt': (2*c, 1, 3, 3)})
        i, c = i + 4, 2*c
    for _ in range(n_blocks):   # pad, conv, norm, ReLU, pad, conv, norm
        for j in (1, 5): ks.update({f'model.{i}.conv_block.{j}.weight': (c, c, 3, 3), f'model.{i}.conv_block.{j}.bias': (c,)})
        i += 1
    for _ in range(2):   # Upsample, conv 3x3, norm, ReLU
        ks.update({f'model.{i}.filt': (c, 1, 4, 4), f'model.{i+1}.weight': (c//2, c, 3, 3), f'model.{i+1}.bias': (c//2,)})
        i, c = i + 4, c//2
    ks.update({f'model.{i+1}.weight': (out_ch, ngf, 7, 7), f'model.{i+1}.bias': (out_ch,)})   # pad, conv 7x7, Tanh
    return ks

def ref_cut_d_keys(in_ch=3, ndf=64):
    "The reference's anti-aliased `basic` PatchGAN (n_layers 3, instance norm)"
    return {'model.0.weight': (ndf, in_ch, 4, 4), 'model.0.bias': (ndf,), 'model.2.filt': (ndf, 1, 3, 3),
            'model.3.weight': (2*ndf, ndf, 4, 4), 'model.3.bias': (2*ndf,), 'model.6.filt': (2*ndf, 1, 3, 3),
            'model.7.weight': (4*ndf, 2*ndf, 4, 4), 'model.7.bias': (4*ndf,), 'model.10.filt': (4*ndf, 1, 3, 3),
            'model.11.weight': (8*ndf, 4*ndf, 4, 4), 'model.11.bias': (8*ndf,), 'model.14.weight': (1, 8*ndf, 4, 4), 'model.14.bias': (1,)}

def fake_reference_file(keys, path):
    "A `latest_net_G.pth` as the reference saves it: a plain state dict, here of random tensors of the reference's shapes"
    g = torch.Generator().manual_seed(0)
    sd = {k: torch.randn(s, generator=g) * 0.05 for k, s in keys.items()}
    torch.save(sd, path)
    return sd

def test_cut_generator_is_the_references_and_loads_its_files_strictly(tmp_path):
    G = ResnetGenerator(antialias=True, antialias_up=True)
    assert n_params(G) == 11_378_179 == n_params(ResnetGenerator())
    ref = ref_cut_g_keys()
    assert {k: tuple(v.shape) for k, v in G.state_dict().items()} == ref   # same names, same order of indices, same shapes
    sd = fake_reference_file(ref, tmp_path/'latest_net_G.pth')
    G.load_state_dict(torch.load(tmp_path/'latest_net_G.pth', weights_only=True), strict=True)
    assert all(torch.equal(G.state_dict()[k], sd[k]) for k in sd)
    with torch.no_grad(): y = G.eval()(torch.rand(1, 3, 64, 64) * 2 - 1)
    assert y.shape == (1, 3, 64, 64) and y.isfinite().all() and y.abs().max() <= 1
    # CycleGAN's generator is unchanged, and its files do not load into CUT's
    assert 'model.7.filt' not in ResnetGenerator().state_dict()
    with pytest.raises(RuntimeError): ResnetGenerator().load_state_dict(sd)

def test_cut_discriminator_and_sampler_are_the_references(tmp_path):
    D = PatchDiscriminator(3, norm='instance', antialias=True)
    assert n_params(D) == 2_764_737
    assert {k: tuple(v.shape) for k, v in D.state_dict().items()} == ref_cut_d_keys()
    D.load_state_dict(fake_reference_file(ref_cut_d_keys(), tmp_path/'latest_net_D.pth'), strict=True)
    assert D(torch.randn(1, 3, 256, 256)).shape == (1, 1, 30, 30)
    # F for resnet_9blocks' nce_layers 0,4,8,12,16: inputs of 3, 128, 256, 256, 256 channels
    chs = [3, 128, 256, 256, 256]
    ref = {f'mlp_{i}.{j}.{w}': ((256, c) if j == 0 and w == 'weight' else (256, 256) if w == 'weight' else (256,))
           for i, c in enumerate(chs) for j in (0, 2) for w in ('weight', 'bias')}
    f = PatchSampleF().create_mlp(chs)
    assert {k: tuple(v.shape) for k, v in f.state_dict().items()} == ref
    sd = fake_reference_file(ref, tmp_path/'latest_net_F.pth')
    f2 = PatchSampleF()
    f2.load_state_dict(torch.load(tmp_path/'latest_net_F.pth', weights_only=True), strict=True)
    assert f2.channels == chs and all(torch.equal(f2.state_dict()[k], sd[k]) for k in sd)

def test_features_are_the_sequentials_outputs():
    G = ResnetGenerator(ngf=4, n_blocks=5, antialias=True, antialias_up=True).requires_grad_(False)
    x = torch.randn(2, 3, 16, 16)
    outs, h = [], x
    for m in G.model: h = m(h); outs.append(h)
    feats = G(x, (0, 4, 8, 12, 16), encode_only=True)
    assert all(torch.equal(f, outs[i]) for f, i in zip(feats, (0, 4, 8, 12, 16)))
    y, feats2 = G(x, [2, 20])
    assert torch.equal(y, outs[-1]) and torch.equal(feats2[0], outs[2]) and torch.equal(feats2[1], outs[20])


# --- parity with a plain PyTorch CUT loop (DESIGN §11)

def batches(n=3, bs=2, size=16, seed=0): return rand_batches(n, bs, size, seed=seed)

LAYERS = (0, 4, 8, 12)   # G with one residual block: the padded input, both 3x3 convolutions, the block

def nets(seed=1):
    torch.manual_seed(seed)
    G = init_weights(ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True), 'xavier', 0.5)
    D = init_weights(PatchDiscriminator(3, ndf=8, n_layers=2, norm='instance', antialias=True), 'xavier', 0.5)
    Fs = PatchSampleF(nc=16, gain=1.).create_mlp([3, 8, 16, 16])
    return G, D, Fs

def plain_cut(G, D, Fs, data, lr, opt, nce_idt, lambda_nce, lambda_gan=1., nce_t=0.07):
    "CUT as DESIGN §11 states it, every patch location used (16x16 images: at most 484 per layer)"
    G, D, Fs = (deepcopy(m).train() for m in (G, D, Fs))
    def mk(m):
        if opt == 'adam': return torch.optim.Adam(m.parameters(), lr=lr, betas=(0.5, 0.999), eps=1e-8, fused=True)
        return torch.optim.SGD(m.parameters(), lr=lr)
    opt_g, opt_d, opt_f = mk(G), mk(D), mk(Fs)
    gan = lambda p, real: F.mse_loss(p, torch.full_like(p, float(real)))   # lsgan
    def features(x):
        out = []
        for i, m in enumerate(G.model):
            x = m(x)
            if i in LAYERS: out.append(x)
            if i == LAYERS[-1]: return out
    def project(feats):
        res = []
        for i, f in enumerate(feats):
            x = getattr(Fs, f'mlp_{i}')(f.permute(0, 2, 3, 1).flatten(0, 2))   # every location, image by image
            res.append(x / (torch.linalg.vector_norm(x, dim=1, keepdim=True) + 1e-7))
        return res
    def patchnce(q, k, bs):
        k = k.detach()
        pos = (q * k).sum(1, keepdim=True)
        qb, kb = q.view(bs, -1, q.shape[1]), k.view(bs, -1, k.shape[1])
        neg = qb @ kb.transpose(1, 2)
        neg = neg.masked_fill(torch.eye(neg.shape[1], dtype=torch.bool)[None], -10.).flatten(0, 1)
        logits = torch.cat([pos, neg], 1) / nce_t
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long), reduction='none')
    def nce(src, tgt):
        qs, ks = project(features(tgt)), project(features(src))
        return sum((patchnce(q, k, len(src)) * lambda_nce).mean() for q, k in zip(qs, ks)) / len(LAYERS)
    for real_A, real_B in data:
        fake = G(torch.cat([real_A, real_B]) if nce_idt else real_A)
        fake_B, idt_B = fake[:len(real_A)], fake[len(real_A):]
        D.requires_grad_(True); opt_d.zero_grad()
        (0.5 * (gan(D(fake_B.detach()), False) + gan(D(real_B), True))).backward()
        opt_d.step()
        D.requires_grad_(False); opt_g.zero_grad(); opt_f.zero_grad()
        loss_nce = nce(real_A, fake_B)
        if nce_idt: loss_nce = 0.5 * (loss_nce + nce(real_B, idt_B))
        (lambda_gan * gan(D(fake_B), True) + loss_nce).backward()
        opt_g.step(); opt_f.step()
    return G, D, Fs

def pre_norm_biases(m):
    "The state-dict keys of the convolution biases that an `InstanceNorm2d` follows directly"
    return {f'{n}.{i}.bias'.lstrip('.') for n, s in m.named_modules() if isinstance(s, nn.Sequential)
            for i, (c, nxt) in enumerate(zip(s, list(s)[1:])) if isinstance(c, nn.Conv2d) and c.bias is not None and isinstance(nxt, nn.InstanceNorm2d)}

@pytest.mark.parametrize('opt', ['sgd', 'adam'])
@pytest.mark.parametrize('mode', ['cut', 'fastcut'])
def test_trainer_matches_plain_loop(opt, mode):
    m = cut_modes[mode]
    data, lr = batches(n=3), (0.01 / m['lambda_nce'] if opt == 'sgd' else 1e-3)   # SGD steps scale with FastCUT's lambda_nce 10
    G, D, Fs = nets()
    ref = plain_cut(G, D, Fs, data, lr, opt, m['nce_idt'], m['lambda_nce'])
    learn = cut_learner(make_dls(data, shuffle=False), *(deepcopy(o) for o in (G, D, Fs)), mode=mode,
                        opt_func=pix2pix_adam if opt == 'adam' else SGD,
                        trainer_kwargs=dict(nce_layers=LAYERS, num_patches=512, flip_equivariance=False))
    np.random.seed(0)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, lr)
    t = learn.cut_trainer
    ours = (learn.model, t.discriminator, t.sampler)
    for a, b in zip(ours, ref):
        free = pre_norm_biases(a) if opt == 'adam' else set()
        assert_close({k: v for k, v in state(a).items() if k not in free}, {k: v for k, v in state(b).items() if k not in free}, 1e-5)
        # biases just before an instance norm have a zero gradient up to rounding, which Adam's normalised steps turn into
        # steps of about lr (at most 2 lr here): they differ by at most that, and cancel in the norm, so the networks compute the same
        for k in free: torch.testing.assert_close(state(a)[k], state(b)[k], atol=3 * 2 * lr, rtol=0)
    x = batches(n=1, seed=5)[0][0]
    with torch.no_grad():
        for a, b in zip(ours[:2], ref[:2]): torch.testing.assert_close(a.eval()(x), b.eval()(x), atol=5e-4, rtol=0)
    for ours, before in zip((learn.model, t.discriminator, t.sampler), (G, D, Fs)):   # all three trained
        assert any(not torch.equal(a, b) for a, b in zip(state(ours).values(), state(before).values()))
    cols = ['g_gan', 'nce', 'nce_y', 'd_real', 'd_fake'] if m['nce_idt'] else ['g_gan', 'nce', 'd_real', 'd_fake']
    assert learn.recorder.metric_names[3:-1] == cols
    assert all(isinstance(v, float) for v in learn.recorder.values[-1])
    assert all(h.device == torch.device('cpu') and h.dtype == torch.float32 for h in t.hist)

def test_sampler_made_at_first_batch_with_its_optimizer_on_the_schedule():
    lrs = []
    class Rec(Callback):
        order = 70
        def after_batch(self):
            if self.training: lrs.append((self.opt.hypers[-1]['lr'], self.cut_trainer.f_opt.hypers[0]['lr'], self.cut_trainer.d_opt.hypers[0]['lr']))
    G, D, _ = nets()
    learn = cut_learner(make_dls(batches(n=2)), G, D, cbs=Rec(), trainer_kwargs=dict(nce_layers=LAYERS, num_patches=32))
    t = learn.cut_trainer
    assert t.sampler.channels is None and t.f_opt is None
    with learn.no_bar(), learn.no_logging(): learn.fit_gan(1, 1, lr=1e-3)
    assert t.sampler.channels == [3, 8, 16, 16] and t.sampler.nc == 256
    assert {id(p) for g in t.f_opt.opt.param_groups for p in g['params']} == {id(p) for p in t.sampler.parameters()}
    assert isinstance(t.f_opt.opt, torch.optim.Adam) and t.f_opt.opt.param_groups[0]['betas'] == (0.5, 0.999)
    assert [round(g / 1e-3, 6) for g, _, _ in lrs] == [1, 1, 0.5, 0.5] and all(f == g == d for g, f, d in lrs)


def test_validation_and_lr_find_leave_the_trainer_alone(tmp_path):
    G, D, _ = nets()
    learn = cut_learner(make_dls(batches(n=2)), G, D, path=tmp_path, trainer_kwargs=dict(nce_layers=LAYERS, num_patches=32))
    t = learn.cut_trainer
    with learn.no_bar(): learn.lr_find(num_it=4, end_lr=10, show_plot=False)   # before any fit: F is made and then dropped again
    assert t.sampler.channels is None and t.f_opt is None and t.discriminator is D
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    before, w = deepcopy(t.state_dict()), state(learn.model)
    np_state = np.random.get_state()[1].copy()
    with learn.no_bar():
        learn.validate()
        assert np.array_equal(np.random.get_state()[1], np_state)   # validation samples fixed places
        learn.lr_find(num_it=6, end_lr=10, show_plot=False)
    after = t.state_dict()
    assert_close(after['discriminators']['discriminator'], before['discriminators']['discriminator'], 0)
    assert_close(after['sampler'], before['sampler'], 0)
    assert str(after['f_opt']) == str(before['f_opt']) and str(after['d_opt']) == str(before['d_opt'])
    assert_close(state(learn.model), w, 0)


def test_bf16_runs_every_network_in_bf16():
    seen = set()
    G, D, Fs = nets()
    hook = lambda m, i, o: seen.add((type(m).__name__, o.dtype))
    for m in [*G.modules(), *D.modules()]:
        if isinstance(m, nn.Conv2d): m.register_forward_hook(hook)
    learn = cut_learner(make_dls(batches(n=2)), G, D, Fs, trainer_kwargs=dict(nce_layers=LAYERS, num_patches=32)).to_bf16()
    for m in Fs.modules():
        if isinstance(m, nn.Linear): m.register_forward_hook(hook)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert seen == {('Conv2d', torch.bfloat16), ('Linear', torch.bfloat16)}
    t = learn.cut_trainer
    assert all(p.dtype == torch.float32 and p.isfinite().all() for m in (G, D, Fs) for p in m.parameters())
    assert t.n_skipped == 0 and all(v.isfinite().all() for v in t.hist)
    assert learn.mixed_precision.run


def test_export_keeps_the_generator_only_and_translates(tmp_path):
    G, D, Fs = nets()
    learn = cut_learner(make_dls(batches(n=1)), G, D, Fs, path=tmp_path, trainer_kwargs=dict(nce_layers=LAYERS, num_patches=32))
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    x = batches(n=1)[0][0]
    learn.export(tmp_path/'cut.pkl')
    from fastai.learner import load_learner
    l2 = load_learner(tmp_path/'cut.pkl')
    t2 = l2.cut_trainer
    assert t2.discriminator is None and t2.d_opt is None and t2.f_opt is None and t2.sampler.channels is None
    assert list(t2.sampler.state_dict()) == []
    with torch.no_grad(): assert torch.equal(l2.model.eval()(x), G.eval()(x))
    preds, _ = learn.get_preds(dl=[(x,)])   # a batch of A images alone: translated
    with torch.no_grad(): assert torch.equal(preds, G(x))
    # with `export_discriminator`, D and F travel too
    learn.cut_trainer.export_discriminator = True
    t3 = pickle.loads(pickle.dumps(learn.cut_trainer))
    assert t3.discriminator is not None and t3.sampler.channels == [3, 8, 16, 16]


# --- modes and bad input

def test_modes_give_the_references_defaults_and_arguments_override():
    t = CUTTrainer()
    assert (t.lambda_nce, t.nce_idt, t.flip_equivariance, t.lambda_gan, t.num_patches, t.nce_layers, t.gan_mode) == \
           (1., True, False, 1., 256, (0, 4, 8, 12, 16), 'lsgan')
    t = CUTTrainer(mode='FastCUT')
    assert (t.lambda_nce, t.nce_idt, t.flip_equivariance) == (10., False, True)
    assert (cut_modes['cut']['n_epochs'], cut_modes['cut']['n_epochs_decay']) == (200, 200)
    assert (cut_modes['fastcut']['n_epochs'], cut_modes['fastcut']['n_epochs_decay']) == (150, 50)
    t = CUTTrainer(mode='fastcut', nce_idt=True, lambda_nce=0.5, flip_equivariance=False)
    assert (t.lambda_nce, t.nce_idt, t.flip_equivariance) == (0.5, True, False)
    with pytest.raises(ValueError, match="'cut' or 'fastcut'"): CUTTrainer(mode='cycle')
    learn = cut_learner(make_dls(batches(n=1, size=64)))
    G = learn.model
    assert isinstance(G, ResnetGenerator) and G.antialias and G.antialias_up and G.n_blocks == 9 and n_params(G) == 11_378_179
    assert learn.opt_func is pix2pix_adam and learn.cut_trainer.make_discriminator('discriminator', 3).antialias

def test_fastcut_flips_half_of_the_batches_with_numpys_generator():
    G, D, Fs = nets()
    learn = cut_learner(make_dls(batches(n=3)), G, D, Fs, mode='fastcut', trainer_kwargs=dict(nce_layers=LAYERS, num_patches=32))
    flips = []
    class Rec(Callback):
        order = 1
        def after_batch(self):
            if self.training: flips.append(self.cut_trainer._flipped)
    learn.add_cb(Rec())
    np.random.seed(3)
    expect = []
    for _ in range(3):   # per batch: one draw for the flip, then F's draws (4 layers, both NCE calls... one: no identity)
        expect.append(np.random.random() < 0.5)
        for hw in (22*22, 16*16, 8*8, 4*4): np.random.permutation(hw)
    np.random.seed(3)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert flips == expect

def test_bad_batches_and_a_foreign_loss_are_clear_errors():
    data = batches(n=1)
    items = list((a, b) for A, B in data for a, b in zip(A, B))   # n_inp=1: (input, target) pairs
    G, D, Fs = nets()
    learn = cut_learner(DataLoaders.from_dsets(items, items, bs=2, device='cpu'), G, D, Fs)
    with pytest.raises(ValueError, match=r'two model inputs.*n_inp=2'), learn.no_bar(): learn.fit(1, 1e-3)
    learn = Learner(make_dls(data), G, loss_func=F.l1_loss, cbs=CUTTrainer(D, Fs))
    with pytest.raises(ValueError, match='loss_func=trainer.generator_loss'), learn.no_bar(): learn.fit(1, 1e-3)
    g = torch.Generator().manual_seed(0)
    grey = Unpaired(zip(torch.rand(2, 1, 16, 16, generator=g), torch.rand(2, 3, 16, 16, generator=g)))
    with pytest.raises(ValueError, match='same number of channels, got 1 and 3'):
        cut_learner(DataLoaders.from_dsets(grey, grey, bs=2, device='cpu'))


# --- exact resume

def resume_learner(path, seed=0, cbs=None):
    set_seed(seed)
    dls = unpaired_resume_dls()
    G, D, _ = nets(seed)   # F made at the first batch: its MLPs come from the random state
    # flips and patch draws from numpy's generator: the resumed fit must draw the same
    return cut_learner(dls, G, D, mode='fastcut', cbs=cbs, path=path, trainer_kwargs=dict(nce_layers=LAYERS, num_patches=32))

from helpers import Interrupt, run_gan as run

def test_interrupt_and_resume_is_bitwise_identical(tmp_path):
    ref = resume_learner(tmp_path/'ref')
    run(ref)
    learn = resume_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)])
    with pytest.raises(KeyboardInterrupt): run(learn)
    ck = torch.load(tmp_path/'models'/'gan_epoch0.pth', weights_only=True)
    assert 'mlp_3.2.weight' in ck['trainer']['sampler'] and ck['trainer']['f_opt'] is not None
    resumed = resume_learner(tmp_path, seed=1234, cbs=GANCheckpoint(resume=True))
    assert resumed.cut_trainer.sampler.channels is None
    run(resumed)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_epoch0.pth'
    t, t0 = resumed.cut_trainer, ref.cut_trainer
    assert_close(state(resumed.model), state(ref.model), 0)
    assert_close(state(t.discriminator), state(t0.discriminator), 0)
    assert_close(state(t.sampler), state(t0.sampler), 0)
    for a, b in ((resumed.opt, ref.opt), (t.d_opt, t0.d_opt), (t.f_opt, t0.f_opt)): assert str(a.state_dict()) == str(b.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(t.hist, t0.hist)) and len(t.hist) == len(t0.hist) == 12
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]


# --- the command line

CUT_TINY = ['--epochs', 1, '--epochs-decay', 1, '--bs', 2, '--load-size', 36, '--crop-size', 32, '--ngf', 4,
            '--n-blocks', 1, '--n-samples', 2, '--num-patches', 64, '--lr', 1e-3, '--seed', 0]

@pytest.mark.parametrize('model', ['cut', 'fastcut'])
def test_cli_trains_cut_and_its_generator_translates(model, tmp_path):
    from gan_callbacks.data.samples import sample_unpaired
    from gan_callbacks.deploy.interop import load_generator
    from PIL import Image
    data = sample_unpaired(tmp_path/'unpaired', n_train=4, n_test=2, size=32)
    out = tmp_path/'o'
    assert cli(['train', '--model', model, '--data', data, '--out', out, *CUT_TINY]) == 0
    assert {'generator.pkl', 'generator', 'history.csv', 'summary.json', 'checkpoints'} <= {f.name for f in out.iterdir()}
    s = __import__('json').loads((out/'summary.json').read_text())
    assert len(s['true_l1']) == 2 and {'mean_b_l1', 'final_true_psnr', 'mean_b_psnr'} <= set(s)
    cols = open(out/'history.csv').readline().strip().split(',')
    assert {'g_gan', 'nce', 'd_real', 'd_fake', 'true_l1'} <= set(cols) and (('nce_y' in cols) == (model == 'cut'))
    G = load_generator(out/'generator.pkl', device='cpu', trust_pickle=True)
    assert isinstance(G, ResnetGenerator) and G.antialias and G.antialias_up
    torch.save(G.state_dict(), tmp_path/'latest_net_G.pth')   # a reference-layout file: recognised from its keys
    assert cli(['translate', '--model', tmp_path/'latest_net_G.pth', '--input', data/'testA', '--output', tmp_path/'t', '--test-mode', 'eval']) == 0
    assert sorted(f.name for f in (tmp_path/'t').iterdir()) == sorted(f.name for f in (data/'testA').iterdir())
    assert cli(['export', '--model', out/'generator.pkl', '--trust-pickle', '--format', 'reference', '--out', tmp_path/'g.pth']) == 0
    assert set(torch.load(tmp_path/'g.pth', weights_only=True)) == set(G.state_dict())

def test_cli_refuses_other_models_options(tmp_path, capsys):
    assert cli(['train', '--sample', '--model', 'cut', '--lambda-a', '5', '--out', tmp_path/'o']) != 0
    assert '--lambda-a is an option of --model cyclegan' in capsys.readouterr().err
    assert cli(['train', '--sample', '--model', 'cyclegan', '--lambda-nce', '5', '--out', tmp_path/'o']) != 0
    assert '--lambda-nce is an option of --model cut' in capsys.readouterr().err

@pytest.mark.parametrize('model,schedule', [('pix2pix', (100, 100)), ('cyclegan', (100, 100)), ('cut', (200, 200)), ('fastcut', (150, 50))])
def test_cli_schedule_defaults_to_the_models_own(model, schedule, tmp_path, monkeypatch):
    "Without --epochs/--epochs-decay a run gets its reference's schedule (CUT's and FastCUT's from `cut_modes`); given ones win"
    import gan_callbacks.cli.runs as runs
    from gan_callbacks.data.samples import sample_pairs, sample_unpaired
    class Fitted(Exception): pass
    seen = []
    def fit(learn, ckpt, fit, epochs, epochs_decay, **kw): seen.append((epochs, epochs_decay)); raise Fitted()
    monkeypatch.setattr(runs, 'fit_interruptible', fit)
    data = (sample_pairs(tmp_path/'p', n_train=2, n_valid=1, size=32) if model == 'pix2pix'
            else sample_unpaired(tmp_path/'u', n_train=2, n_test=1, size=32))
    tiny = ['--bs', 1, '--load-size', 32, '--crop-size', 32, '--ngf', 4, '--n-samples', 1]
    for extra in ([], ['--epochs-decay', 7]):
        with pytest.raises(Fitted): cli(['train', '--model', model, '--data', data, '--out', tmp_path/f'o{len(extra)}', *tiny, *extra])
    assert seen == [schedule, (schedule[0], 7)]
