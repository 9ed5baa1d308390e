"`gan_callbacks.v1`: every v1 name with its v1 behaviour, and fastai v2 left as it was for v2 code."
import pickle, warnings
import pytest, torch
from torch import nn
import fastai.torch_core
from fastai.basics import Learner, DataLoaders, MSELossFlat, SGD, Adam, RMSProp, OptimWrapper, Optimizer, Recorder, set_seed, mae
from fastai.callback.core import Callback as V2Callback
import fastai.callback.progress  # Learner.no_bar
import fastai.callback.schedule  # fit_one_cycle
from functools import partial
from gan_callbacks.v1.bridge import StateDictCallback
from gan_callbacks.v1 import (Callback, LearnerCallback, SmoothenValue, add_metrics, requires_grad, flatten_model,
                              V1Optimizer, V1OptimWrapper, V1Recorder, v1_learner)


from helpers import synth_learner, synth_fit as fit

def clone(m): return [p.detach().clone() for p in m.parameters()]
def changed(m, before): return any(not torch.equal(p, b) for p, b in zip(m.parameters(), before))


# ---- imports and v2 left alone

def test_star_import_brings_v1_names_over_fastai():
    ns = {}
    exec('from gan_callbacks.v1 import *', ns)
    assert ns['Callback'] is StateDictCallback and ns['requires_grad'] is requires_grad
    for n in ('Learner', 'nn', 'F', 'torch', 'optim', 'OptimWrapper', 'partial', 'flatten_model', 'LearnerCallback',
              'SmoothenValue', 'add_metrics', 'DataLoaders', 'Adam', 'ifnone', 'List', 'Callable'):
        assert n in ns, n
    # the library's `all` keeps fastai's Callback: v1 is opted into explicitly
    ns2 = {}
    exec('from gan_callbacks.all import *', ns2)
    assert 'LearnerCallback' not in ns2 and ns2.get('Callback', V2Callback) is not StateDictCallback


class Noop(LearnerCallback):
    def on_batch_end(self, **kwargs): pass

def test_fastai_v2_unchanged_for_v2_code():
    learn1 = synth_learner(cbs=Noop(), metrics=mae); fit(learn1, 2)
    learn2 = synth_learner(metrics=mae); fit(learn2, 2)
    # the class-level objects are fastai's own, without the v1 surface
    for name in ('lr', 'mom', 'wd', 'beta', 'new'): assert not hasattr(Optimizer, name) and not hasattr(OptimWrapper, name)
    assert not hasattr(Recorder, 'add_metric_names')
    with pytest.raises(TypeError): fastai.torch_core.requires_grad(nn.Linear(1, 1), True)
    assert fastai.torch_core.requires_grad(nn.Linear(1, 1)) is True
    # a Learner without v1 callbacks keeps plain objects
    assert type(learn2.opt) is Optimizer and type(learn2.recorder) is Recorder
    # one with them gets the subclasses, and records exactly the same
    assert type(learn1.opt) is V1Optimizer and type(learn1.recorder) is V1Recorder
    assert learn1.recorder.metric_names == learn2.recorder.metric_names
    assert learn1.recorder.values == learn2.recorder.values
    # fastai's Callback still warns about shadowing; a LearnerCallback, like v1, does not
    class V2(V2Callback):
        def before_fit(self): self.model = None
    with pytest.warns(UserWarning, match='shadowing'): fit(synth_learner(cbs=V2()), 1)
    class V1(LearnerCallback):
        def on_train_begin(self, **kw): self.weight = 1   # `learn.weight` exists (falls through to the model)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        l = synth_learner(cbs=V1()); fit(l, 1)
    assert l.v1.weight == 1 and isinstance(l.model.weight, nn.Parameter)


# ---- the small names

def test_requires_grad_v1():
    m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    assert requires_grad(m, False) is None
    assert [p.requires_grad for p in m.parameters()] == [False]*4 and requires_grad(m) is False
    requires_grad(m[1], True)
    assert requires_grad(m[0]) is False and requires_grad(m[1]) is True
    assert requires_grad(nn.ReLU()) is None and requires_grad(nn.ReLU(), True) is None


def test_smoothen_value_is_a_debiased_ema():
    vals, beta = [3., -1., 4., 1., 5.], 0.7
    s = SmoothenValue(beta)
    for n, v in enumerate(vals, 1):
        s.add_value(v)
        w = [beta**(n-1-i) for i in range(n)]
        assert s.smooth == pytest.approx(sum(wi*vi for wi, vi in zip(w, vals)) / sum(w))
    t = SmoothenValue(0.98); t.add_value(torch.tensor(2.))
    assert torch.is_tensor(t.smooth) and t.smooth.item() == pytest.approx(2.)


def test_add_metrics():
    assert add_metrics([1., 2.], 3.) == {'last_metrics': [1., 2., 3.]}
    assert add_metrics([1.], (3., 4.)) == {'last_metrics': [1., 3., 4.]}
    assert add_metrics(None, [5.]) == {'last_metrics': [5.]}
    t = torch.tensor(1.)
    assert add_metrics([None], t)['last_metrics'][1] is t


def test_flatten_model_lists_layers_and_lone_parameters():
    class WithParam(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale, self.lin = nn.Parameter(torch.ones(1)), nn.Linear(1, 1)
    inner = WithParam()
    m = nn.Sequential(nn.Conv2d(1, 1, 1), nn.Sequential(nn.ReLU(), inner))
    flat = flatten_model(m)
    assert flat[:3] == [m[0], m[1][0], inner.lin] and len(flat) == 4
    assert flat[3].val is inner.scale   # a lone parameter becomes a module, as in v1


# ---- LearnerCallback

class UsesLearnInInit(LearnerCallback):
    def __init__(self, learn, k=1):
        super().__init__(learn)
        self.k, self.n_params = k, len(list(self.learn.model.parameters()))
    def on_train_begin(self, **kw): self.began = True

def test_learner_callback_built_by_fastai_from_the_class():
    learn = synth_learner(cbs=[UsesLearnInInit])
    cb = learn.uses_learn_in_init
    assert cb.learn is learn and cb.n_params == 2 and cb.k == 1
    fit(learn, 1)
    assert cb.began and cb.model is learn.model   # attributes fall through to the Learner


def test_learner_callback_with_arguments_but_no_learner():
    learn = synth_learner(cbs=UsesLearnInInit(k=5))
    assert learn.uses_learn_in_init.k == 5 and learn.uses_learn_in_init.n_params == 2


def test_learner_callback_v1_style():
    learn = synth_learner()
    cb = UsesLearnInInit(learn, 3)
    assert cb.learn is learn and learn.uses_learn_in_init is cb and cb.k == 3   # v1: an attribute of the Learner
    fit(learn, 1, cbs=cb)
    assert cb.began and cb not in learn.cbs and not hasattr(learn, 'uses_learn_in_init')


def test_learner_callback_bad_learner():
    with pytest.raises(TypeError, match='`learn` must be a fastai `Learner`, got str'): Noop('learner')


def test_order_puts_a_learner_callback_before_the_recorder():
    class Early(LearnerCallback): _order = -20
    learn = synth_learner(cbs=Early())
    order = sorted(learn.cbs, key=lambda cb: cb.order)
    assert order.index(learn.early) < order.index(learn.train_eval) < order.index(learn.recorder)


# ---- extra columns

class Column(LearnerCallback):
    _order = -20
    def __init__(self, learn, name, value): super().__init__(learn); self.name_, self.value = name, value
    def on_train_begin(self, metrics_names, **kw):
        self.metrics_names = metrics_names
        self.recorder.add_metric_names([self.name_])
    def on_epoch_end(self, last_metrics, epoch, **kw):
        self.seen = last_metrics
        return add_metrics(last_metrics, torch.tensor(self.value + epoch))

def test_columns_in_table_and_recorder():
    learn = synth_learner(cbs=[Column(name='a', value=10.), Column(name='b', value=20.)], metrics=mae)
    logged = []
    learn.logger = logged.append
    fit(learn, 2); fit(learn, 1)   # a second fit does not duplicate the columns
    assert learn.recorder.metric_names == ['epoch', 'train_loss', 'valid_loss', 'mae', 'a', 'b', 'time']
    assert learn.recorder.values[-1][-2:] == [10., 20.]
    assert [row[4:6] for row in logged[:2]] == [[10., 20.], [11., 21.]]
    a, b = sorted([cb for cb in learn.cbs if isinstance(cb, Column)], key=lambda cb: cb.name_)
    assert a.metrics_names == ['mae']
    assert len(b.seen) == 3 and b.seen[2].item() == 10.   # the second callback saw what the first added


def test_columns_stay_aligned_without_validation():
    "A v1 flag that skips validation leaves `#na#` in v1's table: here `None`, with the columns in place"
    class Skip(Column):
        def on_train_begin(self, **kw):
            super().on_train_begin(**kw)
            return {'skip_validate': True}
    learn = synth_learner(cbs=Skip(name='a', value=1.), metrics=mae)
    fit(learn, 1)
    assert learn.recorder.values[-1] == [learn.recorder.values[-1][0], None, None, 1.]
    learn = synth_learner(cbs=Column(name='a', value=1.), valid=False)   # an empty validation set (v1's `split_none`)
    fit(learn, 1)
    assert learn.recorder.values[-1][1:] == [None, 1.]


def test_v1_recorder_pickles():
    learn = synth_learner(cbs=Noop()); fit(learn, 1)
    rec = pickle.loads(pickle.dumps(learn.recorder))
    assert type(rec) is V1Recorder


# ---- the optimizer surface

def two_groups(m): return [list(m[0].parameters()), list(m[1].parameters())]

def opt_learner(opt_func, **kwargs):
    model = nn.Sequential(nn.Linear(1, 4), nn.Linear(4, 1))
    learn = synth_learner(model=model, cbs=Noop(), opt_func=opt_func, splitter=two_groups, **kwargs)
    learn.create_opt(); v1_learner(learn)
    return learn

@pytest.mark.parametrize('opt_func,mom,beta', [
    (Adam, 0.9, 0.99), (partial(OptimWrapper, opt=torch.optim.Adam, betas=(0.5, 0.999)), 0.5, 0.999),
    (partial(RMSProp, mom=0.8), 0.8, 0.99), (partial(OptimWrapper, opt=torch.optim.RMSprop, alpha=0.95), 0., 0.95)])
def test_hyper_parameters(opt_func, mom, beta):
    learn = opt_learner(opt_func, lr=1e-3)
    opt = learn.opt
    assert isinstance(opt, (V1Optimizer, V1OptimWrapper))
    assert (opt.lr, opt.mom, opt.beta) == (1e-3, mom, beta)
    opt.lr = 0.5
    assert [h['lr'] for h in opt.hypers] == [0.5, 0.5]
    opt.lr = [0.1, 0.2]                       # one value per layer group; reading gives the last one (v1)
    assert [h['lr'] for h in opt.hypers] == [0.1, 0.2] and opt.lr == 0.2
    opt.mom, opt.beta, opt.wd = 0.3, 0.9, 0.05
    assert all((h['mom'], h['sqr_mom'], h['wd']) == (0.3, 0.9, 0.05) for h in opt.hypers)


def test_missing_hyper_parameter_reads_none_and_ignores_set():
    learn = opt_learner(partial(OptimWrapper, opt=torch.optim.SGD, momentum=0.9))
    assert learn.opt.mom == 0.9 and learn.opt.beta is None
    learn.opt.beta = 0.5
    assert learn.opt.beta is None and 'sqr_mom' not in learn.opt.hypers[-1]


@pytest.mark.parametrize('opt_func', [Adam, partial(OptimWrapper, opt=torch.optim.Adam, betas=(0.5, 0.999))])
def test_new_and_swap(opt_func):
    learn = opt_learner(opt_func, lr=0.01)
    m0, m1 = learn.model[0], learn.model[1]
    learn.opt.mom = 0.6
    m1.bias.requires_grad_(False)   # v1's `new` takes the trainable parameters only
    new = learn.opt.new([m1])
    assert type(new) is type(learn.opt)
    if isinstance(new, V1OptimWrapper): assert type(new.opt) is torch.optim.Adam
    assert (new.lr, new.mom, new.beta, new.wd) == (learn.opt.lr, 0.6, learn.opt.beta, learn.opt.wd)
    assert [[id(p) for p in ps] for ps in new.param_lists] == [[id(m1.weight)]]
    with pytest.raises(ValueError, match='hold no trainable parameters'): learn.opt.new([nn.ReLU()])
    m1.bias.requires_grad_(True)
    # the Learner now steps only `new`'s parameters, with `new`'s hyper-parameters and state
    learn.opt.opt = new.opt
    w0, w1 = clone(m0), clone(m1)
    fit(learn, 1, 0.01)
    assert not changed(m0, w0) and changed(m1, w1) and torch.equal(m1.bias, w1[1])
    assert new.lr == 0.01
    learn.opt.lr = 0.123
    assert new.lr == 0.123


def test_native_opt_swap_needs_a_fastai_optimizer():
    learn = opt_learner(Adam)
    assert learn.opt.opt is learn.opt
    with pytest.raises(TypeError, match='fastai `Optimizer`'): learn.opt.opt = torch.optim.SGD(learn.model.parameters(), lr=0.1)


def test_new_keeps_weight_decay_exemptions():
    "fastai v2 exempts norm and bias parameters from weight decay (`wd_bn_bias=False`); `new` keeps that"
    model = nn.Sequential(nn.Linear(1, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    learn = synth_learner(model=model, cbs=Noop(), opt_func=Adam); learn.create_opt(); v1_learner(learn)
    new = learn.opt.new([model[1], model[2]])
    assert new.state[model[1].weight]['do_wd'] is False and new.state[model[2].bias]['do_wd'] is False
    assert 'do_wd' not in new.state[model[2].weight]
    plain = learn.opt.new([model[2]], split_no_wd=False)
    assert 'do_wd' not in plain.state[model[2].bias]


# ---- a v1 GAN callback on fastai's own optimizer, under a one-cycle schedule

class TwoNets(nn.Module):
    def __init__(self):
        super().__init__()
        self.G, self.D = nn.Linear(1, 1), nn.Linear(1, 1)
    def forward(self, x): return self.G(x)

class GANish(LearnerCallback):
    "v1 style: the Learner trains G (its `opt` pointed at G), `on_batch_end` trains D with a copy of G's hypers"
    _order = -20
    def on_train_begin(self, **kwargs):
        self.G, self.D = self.learn.model.G, self.learn.model.D
        if not getattr(self, 'opt_G', None):
            self.opt_G = self.learn.opt.new([nn.Sequential(*flatten_model(self.G))])
            self.opt_D = self.learn.opt.new([nn.Sequential(*flatten_model(self.D))])
        self.learn.opt.opt = self.opt_G.opt
        self.smoother, self.lrs = SmoothenValue(0.9), []
        self.recorder.add_metric_names(['d_loss'])
    def on_batch_end(self, last_input, last_output, train, **kwargs):
        if not train: return
        requires_grad(self.G, False); requires_grad(self.D, True)
        self.opt_D.lr, self.opt_D.mom = self.learn.opt.lr, self.learn.opt.mom
        self.lrs.append(self.opt_D.lr)
        self.D.zero_grad()
        loss = (self.D(last_output.detach()) - self.D(last_input)).pow(2).mean()
        loss.backward(); self.opt_D.step()
        self.smoother.add_value(loss.detach())
        requires_grad(self.G, True); requires_grad(self.D, False)
    def on_epoch_end(self, last_metrics, **kwargs): return add_metrics(last_metrics, self.smoother.smooth)

def test_v1_gan_callback_on_fastai_adam_with_one_cycle():
    model = TwoNets()
    learn = synth_learner(model=model, cbs=[GANish], opt_func=Adam)
    g0, d0 = clone(model.G), clone(model.D)
    with learn.no_bar(): learn.fit_one_cycle(2, 0.01)
    assert changed(model.G, g0) and changed(model.D, d0)
    cb = next(cb for cb in learn.cbs if isinstance(cb, GANish))
    # D followed the schedule the Learner's optimizer (shared with opt_G) went through
    assert cb.lrs == pytest.approx(learn.recorder.lrs)
    assert cb.opt_G.lr == learn.opt.lr and cb.opt_G.hypers is learn.opt.hypers
    assert learn.recorder.metric_names[-2] == 'd_loss' and learn.recorder.values[-1][-1] == pytest.approx(cb.smoother.smooth.item())
    # a second fit reuses the optimizers
    opt_D = cb.opt_D
    fit(learn, 1, 0.01)
    assert cb.opt_D is opt_D and learn.recorder.metric_names.count('d_loss') == 1


def test_a_ported_gradient_clipping_clips_the_generator_beside_a_trainer(tmp_path):
    "v1's `on_backward_end` beside `Pix2pixTrainer` runs on G's gradients, between G's backward and G's step, as in a v1 fit"
    from torch import nn
    from gan_callbacks.v1.bridge import StateDictCallback
    from helpers import tiny_learner, fit
    class GradientClipping(StateDictCallback):   # fastai v1's, as ported
        def __init__(self, clip): super().__init__(); self.clip, self.calls = clip, 0
        def on_backward_end(self, **kwargs):
            self.calls += 1
            nn.utils.clip_grad_norm_(self.learn.model.parameters(), self.clip)
    def g_norms(clip):
        learn, norms = tiny_learner(tmp_path, cbs=[] if clip is None else [GradientClipping(clip)]), []
        g0 = next(learn.model.parameters())
        def seen(opt, *args):   # G's gradient norm when its optimizer steps
            ps = [p for grp in opt.param_groups for p in grp['params']]
            if any(p is g0 for p in ps): norms.append(float(nn.utils.get_total_norm([p.grad for p in ps if p.grad is not None])))
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        h = register_optimizer_step_pre_hook(seen)
        try: fit(learn, 1, warn=False)
        finally: h.remove()
        return norms, learn
    plain, _ = g_norms(None)
    clipped, learn = g_norms(0.01)
    cb = next(c for c in learn.cbs if isinstance(c, GradientClipping))
    assert len(clipped) == len(plain) == cb.calls == 2   # once per training batch: at G's step, not at fastai's cancelled backward
    assert min(plain) > 0.1 and max(clipped) <= 0.01 * (1 + 1e-5)


def test_a_v1_tracker_says_what_replaces_it():
    "v1's trackers read `recorder.val_losses`: one message naming fastai v2's callbacks, not the model's missing attribute"
    class Tracker(LearnerCallback):   # the start of v1's `TrackerCallback.get_monitor_value`
        def on_epoch_end(self, **kwargs): self.learn.recorder.val_losses[-1]
    learn = synth_learner(cbs=[Tracker()])
    with pytest.raises(NotImplementedError, match="fastai v2's SaveModelCallback and EarlyStoppingCallback do those jobs"): fit(learn, 1)
