"fastai's `after_backward`, `before_step` and `after_step` reach the Learner's callbacks around G's own update, with G's gradients, on every trainer."
import contextlib, io, warnings
import pytest, torch
from fastai.basics import Callback, DataLoaders
from fastai.callback.core import CancelStepException
from fastai.callback.training import GradientAccumulation
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator, PatchDiscriminator, PatchSampleF
from gan_callbacks.nets.hd_networks import GlobalGenerator, MultiscaleDiscriminator
from gan_callbacks.data.label_maps import one_hot_labels
from gan_callbacks.gans.pix2pix import pix2pix_learner
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from gan_callbacks.trainer.base import find_trainer
from gan_callbacks.v1.bridge import StateDictCallback
from helpers import Unpaired

KINDS = ['pix2pix', 'cyclegan', 'cut', 'pix2pixhd']
N_BATCHES = 2   # training batches of one epoch

def tiny(kind, n=2 * N_BATCHES, bs=2, **kw):
    "A tiny learner of `kind` on `n` random items, in batches of `bs`"
    g = torch.Generator().manual_seed(0)
    size = {'pix2pix': 32, 'pix2pixhd': 16}.get(kind, 16)
    if kind == 'pix2pixhd':
        xs = [one_hot_labels(torch.randint(0, 4, (1, 1, size, size), generator=g), 4)[0] for _ in range(n)]
        items = [(x, torch.rand(3, size, size, generator=g)*2-1) for x in xs]
    else: items = [(torch.rand(3, size, size, generator=g)*2-1, torch.rand(3, size, size, generator=g)*2-1) for _ in range(n)]
    paired = kind in ('pix2pix', 'pix2pixhd')
    if not paired: items = Unpaired(items)
    dls = DataLoaders.from_dsets(items, items[:2] if paired else Unpaired(items[:2]), bs=bs, shuffle=False, device='cpu')
    torch.manual_seed(1)
    if kind == 'pix2pix':
        return pix2pix_learner(dls, UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2), **kw)
    if kind == 'cyclegan':
        G, D = lambda: ResnetGenerator(3, 3, ngf=4, n_blocks=1), lambda: PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance')
        return cyclegan_learner(dls, G(), G(), D(), D(), pool_size=0, **kw)
    if kind == 'cut':
        G = ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True)
        D = PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance', antialias=True)
        return cut_learner(dls, G, D, PatchSampleF(nc=16).create_mlp([3, 8, 16, 16]),
                           trainer_kwargs=dict(nce_layers=(0, 4, 8, 12), num_patches=64), **kw)
    G = GlobalGenerator(4, 3, ngf=4, n_downsampling=2, n_blocks=1)
    D = MultiscaleDiscriminator(7, ndf=4, n_layers=2, num_D=2, get_interm_feat=True)
    return pix2pixhd_learner(dls, G, D, trainer_kwargs=dict(vgg=False), **kw)

def quiet_fit(learn, n=1, lr=1e-3, **kw):
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit(n, lr, **kw)

def weights(m): return [p.detach().clone() for p in m.parameters()]
def same(a, b): return all(torch.equal(x, y) for x, y in zip(a, b))
def d_weights(learn): return [w for D in find_trainer(learn).discriminators.values() for w in weights(D)]

class GradSpy(Callback):
    "What `learn.model`'s parameters hold at fastai's events of the update; `scale`: G's gradients multiplied by it in `before_step`"
    order = 30   # after fastai's own training callbacks
    def __init__(self, scale=None): self.scale, self.seen = scale, []
    def after_backward(self): self.seen.append(('after_backward', [p.grad if p.grad is None else p.grad.clone() for p in self.model.parameters()]))
    def before_step(self):
        self.seen.append(('before_step', weights(self.model)))
        if self.scale is not None:
            for p in self.model.parameters(): p.grad.mul_(self.scale)
    def after_step(self): self.seen.append(('after_step', weights(self.model), [p.grad.clone() for p in self.model.parameters()]))
    def of(self, name): return [s[1:] for s in self.seen if s[0] == name]

@pytest.mark.parametrize('kind', KINDS)
def test_a_callback_sees_and_scales_gs_gradients(kind):
    "Once per training batch, around G's own update: `after_backward` with every gradient of `learn.model` in place, `before_step` before G moves, `after_step` after"
    learn, spy = tiny(kind), GradSpy()
    quiet_fit(learn, cbs=spy)
    assert [s[0] for s in spy.seen] == ['after_backward', 'before_step', 'after_step'] * N_BATCHES
    for (grads,), (w0,), (w1, stepped) in zip(spy.of('after_backward'), spy.of('before_step'), spy.of('after_step')):
        assert all(g is not None for g in grads)   # CycleGAN: both generators'
        assert sum(float(g.norm()) for g in grads) > 0
        assert same(grads, stepped)                # the gradients G's optimizer stepped on
        assert not same(w0, w1)                    # G moved between before_step and after_step
    if kind == 'cyclegan':
        m, (grads,) = learn.model, spy.of('after_backward')[0]
        ids = [id(p) for p in m.parameters()]
        for g in (m.g_a, m.g_b): assert any(grads[ids.index(id(p))].abs().sum() > 0 for p in g.parameters())
    # gradients multiplied by 0 in `before_step`: G does not move at all (Adam without weight decay), while D trains
    learn, spy = tiny(kind), GradSpy(scale=0.)
    g0 = weights(learn.model)
    quiet_fit(learn, cbs=spy)
    d0 = d_weights(tiny(kind))
    assert same(weights(learn.model), g0) and not same(d_weights(learn), d0)

class Cancel(Callback):
    "Cancels G's step; notes `after_cancel_step` and `after_step`"
    order = 30
    def __init__(self): self.seen = []
    def before_step(self): raise CancelStepException()
    def after_cancel_step(self): self.seen.append('after_cancel_step')
    def after_step(self): self.seen.append('after_step')

@pytest.mark.parametrize('kind', ['pix2pix', 'cyclegan'])
def test_a_cancelled_step_leaves_g_where_it_was(kind):
    learn, cb = tiny(kind), Cancel()
    g0, d0 = weights(learn.model), d_weights(tiny(kind))
    quiet_fit(learn, cbs=cb)
    assert cb.seen == ['after_cancel_step', 'after_step'] * N_BATCHES
    assert same(weights(learn.model), g0) and not same(d_weights(learn), d0)
    quiet_fit(learn)   # the next fit steps again
    assert not same(weights(learn.model), g0)

def test_with_gradient_accumulation_the_events_come_with_each_update():
    "`GradientAccumulation(4)` on batches of 2: G steps every second batch, and its events come then, on the summed gradients"
    learn, spy = tiny('pix2pix', n=8), GradSpy()
    quiet_fit(learn, cbs=[GradientAccumulation(4), spy])
    assert [s[0] for s in spy.seen] == ['after_backward', 'before_step', 'after_step'] * 2
    assert all(g is not None for (grads,) in spy.of('after_backward') for g in grads)

class V1Spy(StateDictCallback):
    "A v1 callback beside a trainer: G's weights at `on_backward_end` and `on_step_end`"
    def __init__(self): self.seen = []
    def on_backward_end(self, **kwargs): self.seen.append(('on_backward_end', weights(self.learn.model)))
    def on_step_end(self, **kwargs): self.seen.append(('on_step_end', weights(self.learn.model)))

def test_v1_callbacks_get_backward_end_and_step_end_once_around_gs_step():
    learn, v1, spy = tiny('pix2pix'), V1Spy(), GradSpy()
    quiet_fit(learn, cbs=[v1, spy])
    assert [n for n, _ in v1.seen] == ['on_backward_end', 'on_step_end'] * N_BATCHES
    for (_, w0), (_, w1) in zip(v1.seen[::2], v1.seen[1::2]): assert not same(w0, w1)   # G stepped in between
    assert len(spy.seen) == 3 * N_BATCHES

class Boom(Callback):
    def after_batch(self):
        if self.training: raise RuntimeError('boom')

def test_the_learner_gets_its_own_update_back_after_a_fit():
    "Ended or crashed, a fit leaves the Learner's backward and step its own: without the trainer, the Learner trains G on its loss"
    learn = tiny('pix2pix')
    quiet_fit(learn)
    assert '_do_grad_opt' not in learn.__dict__
    with pytest.raises(RuntimeError, match='boom'): quiet_fit(learn, cbs=Boom())
    assert '_do_grad_opt' not in learn.__dict__
    learn.remove_cb(find_trainer(learn))
    spy, g0 = GradSpy(), weights(learn.model)
    quiet_fit(learn, cbs=spy)
    assert [s[0] for s in spy.seen] == ['after_backward', 'before_step', 'after_step'] * N_BATCHES and not same(weights(learn.model), g0)
