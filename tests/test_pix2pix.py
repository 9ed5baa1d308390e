"Pix2pixTrainer against a plain PyTorch pix2pix loop, and the trainer's contract with fastai."
import contextlib, io
from functools import partial
from copy import deepcopy
import pytest, torch
from torch import nn
import torch.nn.functional as F
from fastai.basics import Learner, DataLoaders, Callback, L1LossFlat, set_seed
import fastai.callback.progress  # Learner.no_bar
from fastai.callback.fp16 import MixedPrecision
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.trainer.nonfinite import NonFiniteGuard
from gan_callbacks.trainer.precision import maybe_autocast
from gan_callbacks.gans.pix2pix import Pix2pixTrainer, pix2pix_learner
from gan_callbacks.trainer.optim import pix2pix_adam, linear_decay_schedule
from gan_callbacks.trainer.test_mode import paper_test_mode
from gan_callbacks.trainer.nonfinite import NonFiniteError
from gan_callbacks.trainer.progress import SyncFreeProgressCallback
from helpers import batches, paired_dls as make_dls, pix2pix_nets as nets, fit, state, assert_close as assert_states_close, HostReads

assert_close = partial(assert_states_close, dtype=torch.float)   # mixed-precision states too


def gan_ref(mode, pred, real, for_d=True):
    "The GAN objectives written out from the pix2pix reference"
    if mode == 'vanilla': return F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, float(real)))
    if mode == 'lsgan': return F.mse_loss(pred, torch.full_like(pred, float(real)))
    if mode == 'hinge':
        if not for_d: return -pred.mean()
        return F.relu(1 - pred).mean() if real else F.relu(1 + pred).mean()

def plain_pix2pix(G, D, data, lr, mode='vanilla', lambda_l1=100., amp=None):
    "DESIGN §5, step by step, in plain PyTorch"
    G, D = deepcopy(G).train(), deepcopy(D).train()
    opt_g = torch.optim.Adam(G.parameters(), lr=lr, betas=(0.5, 0.999), eps=1e-8, fused=True)
    opt_d = torch.optim.Adam(D.parameters(), lr=lr, betas=(0.5, 0.999), eps=1e-8, fused=True)
    ac = lambda: maybe_autocast('cpu', amp)   # as the trainers autocast (bfloat16 on the CPU: with `MatmulConvs`)
    for A, B in data:
        with ac(): fake = G(A)
        fake = fake.float()
        D.requires_grad_(True); opt_d.zero_grad()
        with ac():
            l_fake = gan_ref(mode, D(torch.cat([A, fake.detach()], 1)).float(), False)
            l_real = gan_ref(mode, D(torch.cat([A, B], 1)).float(), True)
        (0.5*(l_fake + l_real)).backward(); opt_d.step()
        D.requires_grad_(False); opt_g.zero_grad()
        with ac(): l_g = gan_ref(mode, D(torch.cat([A, fake], 1)).float(), True, for_d=False) + lambda_l1*F.l1_loss(fake, B)
        l_g.backward(); opt_g.step()
    return G, D


@pytest.mark.parametrize('mode,amp,atol', [('vanilla', None, 1e-5), ('lsgan', None, 1e-5), ('hinge', None, 1e-5),
                                           ('vanilla', torch.bfloat16, 2e-3)])
def test_trainer_matches_plain_loop(mode, amp, atol):
    data = batches(n=3)
    G, D = nets()
    G_ref, D_ref = plain_pix2pix(G, D, data, 1e-3, mode, amp=amp)
    learn = Learner(make_dls(data), deepcopy(G), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Pix2pixTrainer(deepcopy(D), gan_mode=mode))
    if amp is not None: learn.to_bf16()
    fit(learn, 1, 1e-3)
    assert_close(state(learn.model), state(G_ref), atol)
    assert_close(state(learn.pix2pix_trainer.discriminator), state(D_ref), atol)
    # and the run really moved the weights
    k = next(iter(G.state_dict()))
    assert not torch.allclose(state(learn.model)[k], G.state_dict()[k])


def test_learners_own_step_does_not_move_G():
    "G moves at the trainer's step alone: from the Learner's backward to G's `before_step` (after D's update) its weights stay"
    class Watch(Callback):
        order = 20   # after the trainer and fastai's MixedPrecision
        def before_backward(self): self.w0 = state(self.learn.model)
        def before_step(self):
            assert_close(state(self.learn.model), self.w0, 0)
            self.steps = getattr(self, 'steps', 0) + 1
        def after_batch(self):
            if self.training: self.moved = not torch.equal(next(self.learn.model.parameters()), next(iter(self.w0.values())))
    data = batches()
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), cbs=[Pix2pixTrainer(D), Watch()])  # fastai Adam, wd 0.01
    fit(learn, 1, 1e-3)
    assert learn.watch.moved and learn.watch.steps == len(data)


def test_d_lr_follows_one_cycle():
    lrs = []
    class Rec(Callback):
        order = 20
        def after_batch(self):
            if self.training: lrs.append((self.opt.hypers[-1]['lr'], self.pix2pix_trainer.d_opt.hypers[0]['lr'],
                                          self.opt.hypers[-1]['mom'], self.pix2pix_trainer.d_opt.hypers[0]['mom']))
    data = batches(n=4)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=[Pix2pixTrainer(D, d_lr_mult=0.5), Rec()])
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(2, 1e-3)
    assert len(lrs) == 8 and len({round(g, 12) for g, *_ in lrs}) == 8
    for g, d, gm, dm in lrs: assert d == pytest.approx(0.5*g) and dm == pytest.approx(gm)


def test_fit_linear_decay_schedule():
    lrs = []
    class Rec(Callback):
        order = 20
        def after_batch(self):
            if self.training: lrs.append((self.epoch, self.opt.hypers[-1]['lr'], self.pix2pix_trainer.d_opt.hypers[0]['lr']))
    data = batches(n=2)
    G, D = nets()
    learn = pix2pix_learner(make_dls(data), generator=G, discriminator=D, cbs=Rec())
    with learn.no_bar(), learn.no_logging(): learn.fit_gan(2, 2, lr=1e-3)
    assert [round(l/1e-3, 6) for _, l, _ in lrs] == [1, 1, 1, 1, round(2/3, 6), round(2/3, 6), round(1/3, 6), round(1/3, 6)]
    assert all(d == g for _, g, d in lrs)


def test_validation_updates_nothing():
    data = batches()
    G, D = nets(dropout=True)
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D, test_mode='paper'))
    fit(learn, 1, 1e-3)
    t = learn.pix2pix_trainer
    g0, d0 = state(learn.model), state(t.discriminator)
    og = deepcopy(learn.opt.opt.state_dict()); od = deepcopy(t.d_opt.opt.state_dict())
    for mode in ('paper', 'eval'):
        t.test_mode = mode
        with learn.no_bar(): learn.validate()
    assert_close(state(learn.model), g0, 0); assert_close(state(t.discriminator), d0, 0)
    assert str(learn.opt.opt.state_dict()) == str(og) and str(t.d_opt.opt.state_dict()) == str(od)
    assert len(t.hist) == 3   # the fit's loss history stays


def test_paper_test_mode_uses_batch_stats_and_dropout():
    torch.manual_seed(0)
    G = UnetGenerator(num_downs=6, ngf=4).eval()   # one dropout block
    x = torch.rand(2, 3, 64, 64)*2-1
    with paper_test_mode(G):
        a, b = G(x), G(x)
    assert not torch.equal(a, b)            # dropout is on
    assert not G.training and all(not m.training for m in G.modules())
    bns = [m for m in G.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(m.track_running_stats for m in bns)
    assert all(torch.equal(m.running_mean, torch.zeros_like(m.running_mean)) for m in bns)   # untouched


class Flaky(nn.BatchNorm2d):
    "A BatchNorm whose first switch to mode `cut`, once set, is cut short by a Ctrl-C"
    cut = None
    def train(self, mode=True):
        if mode == self.cut: self.cut = None; raise KeyboardInterrupt
        return super().train(mode)

@pytest.mark.parametrize('when', ['entering', 'leaving'])
def test_paper_test_mode_survives_a_ctrl_c(when):
    "A Ctrl-C while the test mode switches modules on or back leaves every module as it was"
    G = nn.Sequential(Flaky(3), nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Dropout()).eval()
    G[0].cut = when == 'entering'   # into training mode when entering, back to eval when leaving
    with pytest.raises(KeyboardInterrupt):
        with paper_test_mode(G): G(torch.rand(2, 3, 4, 4))
    assert all(m.track_running_stats for m in G.modules() if isinstance(m, nn.BatchNorm2d))
    assert not any(m.training for m in G.modules())

class CtrlC(Callback):
    "Ctrl-C in the middle of the first validation batch"
    def after_pred(self):
        if not self.training: raise KeyboardInterrupt

def test_ctrl_c_in_validation_leaves_no_mode_behind():
    "A fit, `validate` or `get_preds` stopped mid-batch leaves the paper's test mode and autocast, and the next fit is as usual"
    G, D = nets()
    learn = Learner(make_dls(batches()), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=[Pix2pixTrainer(D, test_mode='paper'), CtrlC()]).to_bf16()
    untouched = lambda: all(m.track_running_stats for m in G.modules() if isinstance(m, nn.BatchNorm2d)) and not torch.is_autocast_enabled('cpu')
    with pytest.raises(KeyboardInterrupt): fit(learn, 1, 1e-3)
    assert untouched()
    for run in (learn.validate, learn.get_preds):
        with pytest.raises(KeyboardInterrupt), learn.no_bar(): run()
        assert untouched(), run
    learn.remove_cb(CtrlC)
    fit(learn, 1, 1e-3)
    assert all(torch.isfinite(v).all() for v in learn.pix2pix_trainer.hist[-1:])

def test_bf16_on_cpu_runs_convolutions_in_bf16():
    seen = set()
    data = batches(n=1)
    G, D = nets()
    hook = lambda m, i, o: seen.add((type(m).__name__, o.dtype))
    for m in list(G.modules()) + list(D.modules()):
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)): m.register_forward_hook(hook)
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D)).to_bf16()
    fit(learn, 1, 1e-3)
    assert seen == {('Conv2d', torch.bfloat16), ('ConvTranspose2d', torch.bfloat16)}
    assert all(p.dtype == torch.float32 for p in learn.model.parameters())
    # fastai's MixedPrecision was switched off for the fit and is back afterwards
    assert learn.mixed_precision.run


def test_fp16_on_cpu_is_a_clear_error():
    data = batches(n=1)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), cbs=Pix2pixTrainer(D)).to_fp16()
    w0 = state(G)
    with pytest.raises(ValueError, match='fp16 mixed precision needs a CUDA device.*to_bf16'): fit(learn, 1, 1e-3)
    assert_close(state(learn.model), w0, 0)


def test_discriminator_inferred_from_data_or_used_as_given():
    data = batches(n=1, cin=1, cout=3)
    G, _ = nets(cin=1, cout=3)
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), cbs=Pix2pixTrainer())
    fit(learn, 1, 1e-3)
    D = learn.pix2pix_trainer.discriminator
    assert isinstance(D, PatchDiscriminator) and D.in_ch == 4
    assert next(D.parameters()).device == torch.device(learn.dls.device)
    # a given D is not re-initialised
    _, D2 = nets()
    w = D2.model[0].weight.detach().clone()
    t = Pix2pixTrainer(D2)
    assert t.discriminator is D2 and torch.equal(D2.model[0].weight, w)


@pytest.mark.parametrize('mode', ['lsgan', 'hinge', 'wgangp'])
def test_other_modes_and_options(mode):
    data = batches(n=2)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Pix2pixTrainer(D, gan_mode=mode, n_critic=2, clip_g=1., clip_d=1.))
    fit(learn, 1, 1e-3)
    t = learn.pix2pix_trainer
    assert torch.isfinite(torch.stack(t.hist)).all()
    steps = {int(s['step']) for s in t.d_opt.opt.state.values()}
    assert steps == {4}   # 2 batches x 2 D updates
    assert {int(s['step']) for s in learn.opt.opt.state.values()} == {2}


def test_loss_columns_without_host_sync(monkeypatch):
    data = batches(n=2)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D))
    t = learn.pix2pix_trainer
    orig, orig_check, orig_tolist, checks = Pix2pixTrainer.on_batch_end, NonFiniteGuard.check, torch.Tensor.tolist, []
    def guarded(self, *args, **kwargs):
        with monkeypatch.context() as m:
            def boom(*a, **k): raise AssertionError('host sync in the training step')
            m.setattr(torch.Tensor, 'item', boom); m.setattr(torch.Tensor, 'cpu', boom); m.setattr(torch.Tensor, 'tolist', boom)
            return orig(self, *args, **kwargs)
    def check(self, learn, epoch, upto):   # the one read of the non-finite flags, at the epoch's end
        checks.append(upto)
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, 'tolist', orig_tolist)
            return orig_check(self, learn, epoch, upto)
    monkeypatch.setattr(Pix2pixTrainer, 'on_batch_end', guarded)
    monkeypatch.setattr(NonFiniteGuard, 'check', check)
    with learn.no_bar(): learn.fit(2, 1e-3)
    assert checks == [2, 2]   # 2 batches per epoch
    names = list(learn.recorder.metric_names)
    assert names[1:3] == ['train_loss', 'valid_loss'] and names[3:7] == ['g_gan', 'g_l1', 'd_real', 'd_fake']
    last = learn.recorder.values[-1]
    assert len(last) == 6 and all(isinstance(v, float) for v in last)
    assert last[3] == pytest.approx(t.hist[-1][1].item())


def test_pix2pix_learner_defaults():
    data = batches(n=1, size=64)
    learn = pix2pix_learner(make_dls(data))
    assert learn.model.num_downs == 6     # 64 = 2**6
    fit(learn, 1, 2e-4)
    for opt in (learn.opt, learn.pix2pix_trainer.d_opt):
        h = opt.hypers[0]
        assert (h['mom'], h['sqr_mom'], h['eps'], h['wd']) == (0.5, 0.999, 1e-8, 0.)
    assert isinstance(learn.loss_func.func, nn.L1Loss)


def test_save_load_and_pickle_leave_D_out(tmp_path):
    import pickle
    data = batches(n=1)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D), path=tmp_path)
    fit(learn, 1, 1e-3)
    learn.save('g')
    w = state(learn.model)
    G2, D2 = nets()   # a plain Learner saves and loads D too (it becomes an `AdversarialLearner`): one of D's architecture to load into
    learn2 = Learner(make_dls(data), G2, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D2), path=tmp_path)
    learn2.load('g')
    assert_close(state(learn2.model), w, 0)
    assert_close(state(D2), state(learn.pix2pix_trainer.discriminator), 0)
    t = pickle.loads(pickle.dumps(learn.pix2pix_trainer))
    assert t.discriminator is None and t.d_opt is None and t.lambda_l1 == 100.
    t.export_discriminator = False
    learn.pix2pix_trainer.export_discriminator = True
    t2 = pickle.loads(pickle.dumps(learn.pix2pix_trainer))
    assert isinstance(t2.discriminator, PatchDiscriminator)


class NaNTarget(Callback):
    "NaN in the target of the training iterations `its`"
    order = -5
    def __init__(self, its): self.its = set(its)
    def before_batch(self):
        if self.training and self.learn.train_iter in self.its: self.learn.yb = (self.yb[0] * float('nan'),)

def test_nonfinite_updates_are_skipped_with_clipping_and_critics():
    data = batches(n=3)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=[Pix2pixTrainer(D, gan_mode='lsgan', n_critic=2, clip_g=1., clip_d=1.), NaNTarget({1})])
    snaps = []
    class Snap(Callback):
        order = 100
        def before_batch(self):
            if self.training: snaps.append((state(self.learn.model), state(self.pix2pix_trainer.discriminator)))
    learn.add_cb(Snap())
    with learn.no_bar(), learn.no_logging(), pytest.warns(UserWarning, match='1 iteration'): learn.fit(1, 1e-3)
    t = learn.pix2pix_trainer
    (g1, d1), (g2, d2) = snaps[1], snaps[2]
    assert_close(g2, g1, 0); assert_close(d2, d1, 0)   # iteration 1 left no trace, BatchNorm statistics included
    assert t.n_skipped == 1 and torch.isfinite(torch.stack(t.hist)).all()
    assert {int(s['step']) for s in t.d_opt.opt.state.values()} == {4}   # 2 good batches x 2 D updates
    assert {int(s['step']) for s in learn.opt.opt.state.values()} == {2}


def test_nonfinite_in_a_row_stops_training():
    data = batches(n=3)
    G, D = nets()
    learn = Learner(make_dls(data), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=[Pix2pixTrainer(D, max_nonfinite=2), NaNTarget({4, 5})])
    with pytest.raises(NonFiniteError, match='2 training iterations in a row.*epoch 1, batch 2'): fit(learn, 3, 1e-3)
    assert all(torch.isfinite(p).all() for p in learn.model.parameters())


class _NaNGrad(torch.autograd.Function):
    "Identity forward; NaN gradients backward: a finite loss with non-finite gradients"
    @staticmethod
    def forward(ctx, x): return x.view_as(x)
    @staticmethod
    def backward(ctx, g): return g * float('nan')

class NaNGradAt(nn.Module):
    "Wraps G: its gradients are NaN in the training iterations `its` (counted in forward calls while training)"
    def __init__(self, G, its): super().__init__(); self.G, self.its, self.n = G, set(its), 0
    def forward(self, x):
        y = self.G(x)
        if self.training:
            self.n += 1
            if self.n - 1 in self.its: y = _NaNGrad.apply(y)
        return y

@pytest.mark.parametrize('check', [True, False])
def test_nonfinite_gradients_with_a_finite_loss(check):
    G, D = nets()
    learn = Learner(make_dls(batches(n=3)), NaNGradAt(G, {1}), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Pix2pixTrainer(D, check_grads=check, max_nonfinite=None))
    if check:
        with learn.no_bar(), learn.no_logging(), pytest.warns(UserWarning, match='1 iteration'): learn.fit(1, 1e-3)
        assert learn.pix2pix_trainer.n_skipped == 1
        assert all(torch.isfinite(p).all() for p in learn.model.parameters())
    else:   # unchecked, the NaN gradients reach the weights
        with learn.no_bar(), learn.no_logging(), pytest.warns(UserWarning): learn.fit(1, 1e-3)
        assert not all(torch.isfinite(p).all() for p in learn.model.parameters())


def _fit_with(**kw):
    G, D = nets()
    learn = Learner(make_dls(batches(n=2)), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D, **kw))
    set_seed(0); fit(learn, 1, 1e-3)
    return learn

def test_channels_last_option_same_training():
    ref, cl = _fit_with(), _fit_with(channels_last=True)
    conv = lambda m: next(c for c in m.modules() if isinstance(c, nn.Conv2d))
    for m in (cl.model, cl.pix2pix_trainer.discriminator):
        assert conv(m).weight.is_contiguous(memory_format=torch.channels_last)
    assert not conv(ref.model).weight.is_contiguous(memory_format=torch.channels_last)
    assert_close(state(cl.model), state(ref.model), atol=1e-4)
    assert_close(state(cl.pix2pix_trainer.discriminator), state(ref.pix2pix_trainer.discriminator), atol=1e-4)

@pytest.mark.slow
def test_compile_option_same_training_and_pickling():
    import pickle
    ref, comp = _fit_with(), _fit_with(compile=True)
    assert comp.model._compiled_call_impl is not None and comp.pix2pix_trainer.discriminator._compiled_call_impl is not None
    assert_close(state(comp.model), state(ref.model), atol=1e-4)
    G = pickle.loads(pickle.dumps(comp.model))   # what `learn.export` stores: the weights, not the compiled forward
    assert G._compiled_call_impl is None
    assert_close(state(G), state(comp.model), atol=0)


def _host_reads(n_batches, learner):
    G, D = nets()
    learn = learner(make_dls(batches(n=n_batches)), G, D)
    with HostReads() as h, contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
    assert learn.pix2pix_trainer.n_skipped == 0 and len(learn.pix2pix_trainer.hist) == n_batches
    return h.n

def test_host_reads_per_batch():
    "Nothing reads from the device per batch, fastai's Recorder included (its smoothed loss stays on the device)"
    ours = lambda dls, G, D: pix2pix_learner(dls, generator=G, discriminator=D)
    assert type(ours(make_dls(batches(n=1)), *nets()).progress) is SyncFreeProgressCallback
    r8, r4 = _host_reads(8, ours), _host_reads(4, ours)
    assert r8['library'] == r4['library'] > 0          # per fit (the trainer's once-per-epoch reads), not per batch
    assert r8['other'] == r4['other']                  # fastai's `AvgSmoothLoss` alone would move each loss to the CPU
    # fastai's own progress bar reads the smoothed loss after every batch
    theirs = lambda dls, G, D: Learner(dls, G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D))
    t8, t4 = _host_reads(8, theirs), _host_reads(4, theirs)
    assert t8['other'] - t4['other'] == 4 and t8['library'] == t4['library']

def test_learner_functions_state_no_trainer_default(tmp_path):
    "Each learner function states none of its trainer's options: they reach the trainer at its defaults, or as given by keyword"
    import inspect
    from gan_callbacks.gans.cyclegan import cyclegan_learner, CycleGANTrainer
    from gan_callbacks.gans.cut import cut_learner, CUTTrainer
    from gan_callbacks.trainer.base import find_trainer
    # the networks a learner function passes on as given; `recipe`, which it turns into the trainer's options and callbacks
    nets_ = {'discriminator', 'd_a', 'd_b', 'sampler', 'kwargs', 'recipe'}
    for fn, cls in ((pix2pix_learner, Pix2pixTrainer), (cyclegan_learner, CycleGANTrainer), (cut_learner, CUTTrainer)):
        assert not (set(inspect.signature(fn).parameters) & set(inspect.signature(cls).parameters)) - nets_, fn.__name__
    G, D = nets()
    learn = pix2pix_learner(make_dls(batches(n=1)), G, D, gan_mode='lsgan', lambda_l1=7., path=tmp_path)
    t, default = find_trainer(learn), Pix2pixTrainer()
    assert (t.gan_mode, t.lambda_l1, learn.path) == ('lsgan', 7., tmp_path)
    assert find_trainer(pix2pix_learner(make_dls(batches(n=1)), G, D)).lambda_l1 == default.lambda_l1


def test_a_unet_too_deep_for_the_crops_is_refused_at_the_fits_start(tmp_path):
    "`UnetGenerator()` (depth 8) on 32-pixel crops: one line before any batch, naming the depth that fits"
    from gan_callbacks.data.samples import sample_pairs
    from gan_callbacks.data.folders import Pix2pixDataLoaders
    from gan_callbacks.gans.pix2pix import pix2pix_learner
    from helpers import fit
    dls = Pix2pixDataLoaders.from_folder(sample_pairs(tmp_path/'s', n_train=4, n_valid=2, size=32), load_size=36, crop_size=32, bs=2, device='cpu')
    learn = pix2pix_learner(dls, UnetGenerator())
    with pytest.raises(ValueError, match=r"UnetGenerator needs sides that are multiples of 256, but the data's crops are 32: UnetGenerator\(num_downs=5\) takes them"):
        fit(learn, 1, warn=False)
    assert learn.train_iter == 0   # refused before the first batch
