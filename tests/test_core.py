"The fastai-v1 state_dict contract of `StateDictCallback`, event by event and key by key."
import warnings, pickle
from functools import partial
import pytest, torch
from torch import nn
from fastai.basics import Learner, DataLoaders, MSELossFlat, SGD, Adam, Callback, set_seed, load_learner, mae
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.v1.bridge import StateDictCallback, StateDictControl, V1_KEYS, V1_EVENTS, skip_update


from helpers import synth_learner as synth_regression, synth_fit as fit

synth_learner = partial(synth_regression, opt_func=SGD)

def weights(learn): return [p.detach().clone() for p in learn.model.parameters()]


class Recorder1(StateDictCallback):
    "Record every v1 call: event name, the keys it got and a few values"
    def __init__(self, **returns): self.calls, self.returns = [], returns
    def _rec(self, name, kwargs):
        self.calls.append((name, dict(kwargs)))
        r = self.returns.get(name)
        return r(kwargs) if callable(r) else r
    def on_train_begin(self, **kw):    return self._rec('on_train_begin', kw)
    def on_epoch_begin(self, **kw):    return self._rec('on_epoch_begin', kw)
    def on_batch_begin(self, **kw):    return self._rec('on_batch_begin', kw)
    def on_loss_begin(self, **kw):     return self._rec('on_loss_begin', kw)
    def on_backward_begin(self, **kw): return self._rec('on_backward_begin', kw)
    def on_backward_end(self, **kw):   return self._rec('on_backward_end', kw)
    def on_step_end(self, **kw):       return self._rec('on_step_end', kw)
    def on_batch_end(self, **kw):      return self._rec('on_batch_end', kw)
    def on_epoch_end(self, **kw):      return self._rec('on_epoch_end', kw)
    def on_train_end(self, **kw):      return self._rec('on_train_end', kw)
    def of(self, name): return [kw for n, kw in self.calls if n == name]


def test_every_event_gets_every_key():
    learn = synth_learner(cbs=Recorder1())
    fit(learn, 1)
    calls = learn.recorder1.calls
    assert {n for n, _ in calls} == set(V1_EVENTS.values())
    for name, kw in calls:
        extra = {'on_train_end': {'exception'}, 'on_train_begin': {'metrics_names'}}.get(name, set())
        assert set(kw) == set(V1_KEYS) | extra, name
    # v1 order of events for one training batch
    names = [n for n, _ in calls]
    i = names.index('on_batch_begin')
    assert names[i:i+6] == ['on_batch_begin', 'on_loss_begin', 'on_backward_begin', 'on_backward_end',
                            'on_step_end', 'on_batch_end']
    assert names[0] == 'on_train_begin' and names[-1] == 'on_train_end'


def test_train_begin_and_epoch_begin_state():
    learn = synth_learner(cbs=Recorder1(), metrics=mae)
    fit(learn, 2)
    tb = learn.recorder1.of('on_train_begin')[0]
    assert tb['n_epochs'] == 2 and tb['epoch'] == 0 and tb['iteration'] == 0
    assert list(tb['metrics']) == list(learn.metrics)
    eb = learn.recorder1.of('on_epoch_begin')
    assert [e['epoch'] for e in eb] == [0, 1]
    assert all(e['num_batch'] == 0 and e['stop_training'] is False for e in eb)


def test_batch_end_agrees_with_learner():
    seen = []
    class Check(StateDictCallback):
        def on_batch_end(self, last_input, last_target, last_output, last_loss, train, iteration, num_batch, **kw):
            l = self.learn
            assert last_input is l.x and last_target is l.y and last_output is l.pred
            assert torch.equal(last_loss, l.loss) and not last_loss.requires_grad
            assert train == l.training
            seen.append((train, iteration, num_batch))
    learn = synth_learner(cbs=Check())
    fit(learn, 2)
    assert seen == [(True, 0, 0), (True, 1, 1), (False, 2, 2), (False, 2, 2),
                    (True, 2, 0), (True, 3, 1), (False, 4, 2), (False, 4, 2)]


def test_batch_begin_replaces_input_and_target():
    "A returned `last_input`/`last_target` is what the model and the loss get"
    zeros = lambda kw: {'last_input': torch.zeros_like(kw['last_input']), 'last_target': torch.full_like(kw['last_target'], 3.)}
    learn = synth_learner(cbs=Recorder1(on_batch_begin=zeros))
    fit(learn, 1)
    for kw in learn.recorder1.of('on_loss_begin'):
        assert (kw['last_input'] == 0).all() and (kw['last_target'] == 3).all()
    be = learn.recorder1.of('on_batch_end')
    b = learn.model.bias.detach()
    # last validation batch: prediction is the bias alone, the loss is against 3
    assert torch.allclose(be[-1]['last_output'], b.expand_as(be[-1]['last_output']))
    assert torch.allclose(be[-1]['last_loss'], ((b - 3)**2).mean())


def test_skip_update_cancels_backward_and_step():
    "`skip_update()` from `on_backward_begin` leaves the weights alone; `skip_bwd` alone would not (fastai steps on zeroed gradients)"
    def learner(skip):
        on = []
        learn = synth_learner(cbs=Recorder1(on_backward_begin=lambda kw: skip if on else None), opt_func=Adam)
        fit(learn, 1)   # the parameters have gradients now: fastai zeroes them in place
        on.append(True)
        return learn
    learn = learner(skip_update())
    w0 = weights(learn); fit(learn, 1)
    assert all(torch.equal(a, b) for a, b in zip(w0, weights(learn)))
    learn = learner({'skip_bwd': True})
    w0 = weights(learn); fit(learn, 1)
    assert not any(torch.equal(a, b) for a, b in zip(w0, weights(learn)))   # Adam's momentum and weight decay

def test_loss_begin_replaces_output():
    learn = synth_learner(cbs=Recorder1(on_loss_begin=lambda kw: {'last_output': kw['last_output']*0 + kw['last_target'] + 1}))
    fit(learn, 1)
    ends = learn.recorder1.of('on_batch_end')
    assert len(ends) == 4   # 2 training and 2 validation batches, each with the replaced output's loss
    for kw in ends:
        assert torch.allclose(kw['last_loss'], torch.tensor(1.))


def test_backward_begin_replaces_loss_and_gets_smooth_loss():
    "`last_loss` returned from on_backward_begin is what gets backpropagated"
    learn = synth_learner(cbs=Recorder1(on_backward_begin=lambda kw: {'last_loss': kw['last_loss'] * 0}))
    w0 = weights(learn)
    fit(learn, 1)
    assert all(torch.equal(a, b) for a, b in zip(w0, weights(learn)))
    bb = learn.recorder1.of('on_backward_begin')
    assert all(kw['last_loss'].requires_grad for kw in bb)
    assert bb[1]['smooth_loss'] is not None


def test_skip_bwd():
    grads = []
    class G(StateDictCallback):
        def on_backward_begin(self, **kw): return {'skip_bwd': True}
        def on_backward_end(self, **kw): grads.append(self.learn.model.weight.grad)
    learn = synth_learner(cbs=G())
    w0 = weights(learn)
    fit(learn, 1)
    assert grads == [None, None]
    assert all(torch.equal(a, b) for a, b in zip(w0, weights(learn)))


def test_skip_step_really_cancels_the_step():
    "With Adam and weight decay, an uncancelled step with zero grads would still move the weights"
    class S(StateDictCallback):
        def on_backward_end(self, **kw): return {'skip_step': True}
    learn = synth_learner(cbs=S(), opt_func=Adam, wd=0.1)
    w0 = weights(learn)
    fit(learn, 2)
    assert all(torch.equal(a, b) for a, b in zip(w0, weights(learn)))
    assert learn.model.weight.grad is None or (learn.model.weight.grad == 0).all()
    # the same Learner without the callback does move
    learn2 = synth_learner(opt_func=Adam, wd=0.1)
    fit(learn2, 1)
    assert not torch.equal(w0[0], weights(learn2)[0])


def test_skip_zero_keeps_gradients():
    gs = []
    class Z(StateDictCallback):
        def on_batch_begin(self, train, **kw):
            if train: gs.append(None if self.learn.model.weight.grad is None else self.learn.model.weight.grad.clone())
        def on_step_end(self, **kw): return {'skip_zero': True}
    learn = synth_learner(cbs=Z())
    fit(learn, 1)
    assert gs[0] is None and gs[1] is not None and (gs[1] != 0).all()
    # without skip_zero fastai zeroes the gradients after the step
    gs2 = []
    class NZ(StateDictCallback):
        def on_batch_begin(self, train, **kw):
            if train and self.learn.model.weight.grad is not None: gs2.append(self.learn.model.weight.grad.clone())
    learn = synth_learner(cbs=NZ())
    fit(learn, 1)
    assert all((g == 0).all() for g in gs2) and len(gs2) == 1


def test_stop_epoch_ends_training_part_only():
    learn = synth_learner(cbs=Recorder1(on_batch_end=lambda kw: {'stop_epoch': True} if kw['train'] else None))
    fit(learn, 2)
    be = learn.recorder1.of('on_batch_end')
    assert [kw['train'] for kw in be] == [True, False, False, True, False, False]
    # the Recorder still saw the stopped batch and logged both epochs
    assert len(learn.recorder.values) == 2 and len(learn.recorder.losses) == 2


def test_stop_training_after_this_epoch():
    learn = synth_learner(cbs=Recorder1(on_epoch_end=lambda kw: {'stop_training': kw['epoch'] == 1}))
    fit(learn, 5)
    assert [kw['epoch'] for kw in learn.recorder1.of('on_epoch_end')] == [0, 1]
    assert len(learn.recorder.values) == 2
    assert learn.recorder1.of('on_train_end')[0]['exception'] is False


def test_skip_validate():
    learn = synth_learner(cbs=Recorder1(on_train_begin={'skip_validate': True}))
    fit(learn, 2)
    assert all(kw['train'] for kw in learn.recorder1.of('on_batch_end'))
    assert all(kw['last_metrics'] is None for kw in learn.recorder1.of('on_epoch_end'))


def test_train_begin_epoch_to_start_from():
    learn = synth_learner(cbs=Recorder1(on_train_begin={'epoch': 2}))
    fit(learn, 4)
    assert [kw['epoch'] for kw in learn.recorder1.of('on_epoch_begin')] == [2, 3]
    assert [kw['epoch'] for kw in learn.recorder1.of('on_epoch_end')] == [2, 3]


def test_epoch_end_last_metrics():
    learn = synth_learner(cbs=Recorder1(), metrics=mae)
    fit(learn, 2)
    ee = learn.recorder1.of('on_epoch_end')
    for kw, vals in zip(ee, learn.recorder.values):
        assert len(kw['last_metrics']) == 2
        assert kw['last_metrics'] == pytest.approx(vals[1:])   # valid_loss, mae


def test_unknown_key_is_an_error():
    learn = synth_learner(cbs=Recorder1(on_batch_end={'last_los': 0.}))
    with pytest.raises(KeyError, match="last_los isn't a valid key in the state of the callbacks."): fit(learn, 1)
    # nothing is left behind: the next fit works
    learn.remove_cb(learn.recorder1)
    fit(learn, 1)
    assert not any(isinstance(cb, StateDictControl) for cb in learn.cbs)


def test_shared_state_in_callback_order():
    "What one v1 callback returns is what the next one sees, even with a v2 callback in between"
    seen = []
    class A(StateDictCallback):
        order = 1
        def on_batch_begin(self, last_input, **kw): return {'last_input': last_input * 0 + 5}
        def on_batch_end(self, **kw): return {'stop_epoch': True}
    class V2(Callback):
        order = 2
        def before_batch(self): self.learn.xb = (self.learn.xb[0] + 1,)
    class B(StateDictCallback):
        order = 3
        def on_batch_begin(self, last_input, **kw): seen.append(('in', last_input))
        def on_batch_end(self, stop_epoch, train, **kw): seen.append(('stop', stop_epoch, train))
    learn = synth_learner(cbs=[B(), V2(), A()])
    fit(learn, 1)
    assert all((x == 6).all() for k, x, *_ in [s for s in seen if s[0] == 'in'])
    assert ('stop', True, True) in seen
    assert learn.a.cb_state is learn.b.cb_state


def test_keyboard_interrupt_calls_train_end_and_propagates():
    class Boom(StateDictCallback):
        def __init__(self): self.ended = None
        def on_batch_end(self, iteration, train, **kw):
            if train and iteration == 2: raise KeyboardInterrupt()
        def on_train_end(self, exception, **kw): self.ended = exception
    learn = synth_learner(cbs=Boom())
    with pytest.raises(KeyboardInterrupt): fit(learn, 3)
    assert isinstance(learn.boom.ended, KeyboardInterrupt)
    assert '_with_events' not in learn.__dict__
    assert not any(isinstance(cb, StateDictControl) for cb in learn.cbs)
    assert learn.boom.cb_state['last_input'] is None


def test_interrupt_at_an_epochs_end_calls_train_end():
    "A Ctrl-C in an `after_epoch` (where checkpoints and grids are written) reaches `on_train_end` too"
    class Late(Callback):
        order = 60
        def after_epoch(self):
            if self.epoch == 1: raise KeyboardInterrupt()
    class Ender(StateDictCallback):
        def __init__(self): self.ended = None
        def on_train_end(self, exception, **kw): self.ended = exception
    learn = synth_learner(cbs=[Ender(), Late()])
    with pytest.raises(KeyboardInterrupt): fit(learn, 3)
    assert isinstance(learn.ender.ended, KeyboardInterrupt) and learn.epoch == 1
    assert '_with_events' not in learn.__dict__


def test_v2_callbacks_and_model_state_dict_untouched():
    class V2(Callback):
        def __init__(self): self.n = 0
        def after_batch(self): self.n += 1
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        learn = synth_learner(cbs=[Recorder1(), V2()])
        fit(learn, 1)
    assert learn.v2.n == 4
    assert 'weight' in learn.model.state_dict() and 'state_dict' not in learn.__dict__
    assert not hasattr(learn.model, 'cb_state')
    # the v2 callback is left as it was: no v1 state, its own events
    assert 'cb_state' not in learn.v2.__dict__ and 'after_batch' not in learn.v2.__dict__
    # the model's `state_dict` is its own: nn.Module's method, its parameters and nothing else
    assert 'state_dict' not in learn.model.__dict__ and type(learn.model).state_dict is nn.Module.state_dict
    sd = learn.model.state_dict()
    assert list(sd) == ['weight', 'bias'] and all(torch.equal(sd[k], p) for k, p in learn.model.named_parameters())


def test_pbar_is_fastai_master_bar():
    learn = synth_learner(cbs=Recorder1())
    learn.fit(1, 0.1)
    assert learn.recorder1.of('on_epoch_begin')[0]['pbar'] is not None


def test_pickling_leaves_the_state_out():
    "`learn.export` pickles callbacks: the shared state (tensors, progress bar) stays out"
    learn = synth_learner(cbs=Recorder1())
    fit(learn, 1)
    learn.recorder1.cb_state['last_input'] = torch.ones(1)
    cb = pickle.loads(pickle.dumps(learn.recorder1))
    assert 'cb_state' not in cb.__dict__ and '_ctl' not in cb.__dict__


def test_order_from_v1_underscore_order():
    "A v1 class attribute `_order` sorts the callback, among v2 callbacks too (the Recorder is at 50)"
    class Early(StateDictCallback): _order = -20
    class Late(Early): pass
    class Explicit(StateDictCallback): _order, order = 5, 7
    learn = synth_learner(cbs=[Early(), Explicit()])
    assert learn.early.order == -20 and Late.order == -20 and learn.explicit.order == 7
    assert StateDictCallback.order == 0 and Callback.order == 0
    fit(learn, 1)
    names = [type(cb).__name__ for cb in sorted(learn.cbs, key=lambda cb: cb.order)]
    assert names.index('Early') < names.index('TrainEvalCallback') < names.index('Recorder')


def test_train_begin_gets_metrics_names():
    learn = synth_learner(cbs=Recorder1(), metrics=[mae])
    fit(learn, 1)
    assert learn.recorder1.of('on_train_begin')[0]['metrics_names'] == ['mae']


def test_last_metrics_added_by_one_callback_reach_the_next():
    "v1 set `last_metrics` once per epoch: what an earlier callback returns is what a later one gets"
    class Adds(StateDictCallback):
        order = 1
        def on_epoch_end(self, last_metrics, **kw): return {'last_metrics': last_metrics + [42.]}
    class Reads(StateDictCallback):
        order = 2
        def __init__(self): self.seen = []
        def on_epoch_end(self, last_metrics, **kw): self.seen.append(last_metrics)
    learn = synth_learner(cbs=[Reads(), Adds()], metrics=mae)
    fit(learn, 2)
    for seen, vals in zip(learn.reads.seen, learn.recorder.values):
        assert seen[:2] == pytest.approx(vals[1:]) and seen[2] == 42.


def test_private_state_skips_fastais_shadowing_check():
    "fastai warns when a callback sets a name the Learner has; a v1 callback's private per-batch state skips that look-up"
    cb = StateDictCallback()
    learn = synth_learner(cbs=cb)
    learn._state = 0
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        cb._state = 1   # no look-up on the Learner, no warning
    assert cb._state == 1 and learn._state == 0
    with pytest.warns(UserWarning, match='shadowing'): cb.model = None   # public names: fastai's check as before
