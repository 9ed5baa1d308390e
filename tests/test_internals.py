"One test per reach into fastai, fasttransform/plum, PyTorch and Accelerate internals (`gan_callbacks.internals`): each fails when the behaviour relied on changes."
import os, pickle, random
import pytest, torch
from torch import nn
from fastai.basics import Learner, DataLoaders, Callback, MSELossFlat, CancelEpochException, TfmdDL, Transform
from fastai.callback.progress import CSVLogger, ProgressCallback
from fastai.optimizer import Adam
from fastcore.basics import store_attr
import fastai.callback.schedule   # Learner.lr_find
from gan_callbacks import internals as I


def tiny_learner(cbs=None, n=8):
    items = [(torch.ones(2) * i, torch.zeros(1)) for i in range(n)]
    dls = DataLoaders.from_dsets(items, items[:4], bs=4, device='cpu')
    return Learner(dls, nn.Linear(2, 1), loss_func=MSELossFlat(), cbs=cbs)


# --- PyTorch

def test_layer_base_classes():
    for m in (nn.BatchNorm1d(2), nn.BatchNorm2d(2), nn.SyncBatchNorm(2)): assert isinstance(m, I.BatchNormBase) and isinstance(m, I.NormBase)
    assert isinstance(nn.InstanceNorm2d(2), I.NormBase) and not isinstance(nn.InstanceNorm2d(2), I.BatchNormBase)
    for m in (nn.Dropout(), nn.Dropout2d()): assert isinstance(m, I.DropoutBase)
    for m in (nn.Conv2d(1, 1, 1), nn.ConvTranspose2d(1, 1, 1)): assert isinstance(m, I.ConvBase)

def test_is_compiled():
    m = nn.Linear(2, 2)
    assert not I.is_compiled(m)
    m.compile()   # in place, compiled lazily at the first call
    assert I.is_compiled(m)

def test_compiled_graphs_counts_compilations_and_recompilations():
    m, n = nn.Linear(2, 2), I.compiled_graphs()
    m.compile(backend='eager', dynamic=False)
    m(torch.ones(1, 2)); m(torch.ones(1, 2))
    assert I.compiled_graphs() == n + 1   # compiled once, then reused
    m(torch.ones(3, 2))                   # another shape: a recompilation
    assert I.compiled_graphs() == n + 2

@pytest.mark.parametrize('bad', [False, True])
def test_fused_adam_skips_on_found_inf(bad):
    p = nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=0.1, fused=True)
    p.grad = torch.ones(3)
    assert I.step_unless_found_inf(opt, torch.tensor(bad))
    assert torch.equal(p.detach(), torch.ones(3)) == bad
    assert not hasattr(opt, 'found_inf')
    assert not I.step_unless_found_inf(torch.optim.SGD([p], lr=0.1), torch.tensor(False))   # no in-kernel skipping: the caller syncs

def test_copy_into():
    ts = [torch.zeros(2), torch.zeros(3)]
    I.copy_into(ts, [torch.ones(2), torch.full((3,), 2.)])
    assert ts[0].tolist() == [1, 1] and ts[1].tolist() == [2, 2, 2]


def test_unwinding_leaves_what_validation_context_entered_when_before_fit_raises():
    "fastai's `validation_context` keeps `learn.lock` held and the added callbacks in after a failing `before_fit`; `unwinding` leaves both"
    class Refuse(Callback):
        def before_fit(self): raise ValueError('refused')
    for wrap in (False, True):
        learn, extra = tiny_learner(cbs=Refuse()), Callback()
        cms = learn.validation_context(cbs=[extra])
        if wrap: cms = I.unwinding(cms)
        with pytest.raises(ValueError, match='refused'):
            with cms: pass
        assert learn.lock.locked() != wrap and (extra in learn.cbs) != wrap
        if learn.lock.locked(): learn.lock.release()

def test_numpy_scalar_globals_read_numpy_floats_weights_only(tmp_path):
    "The numpy scalars fastai's schedulers leave in an optimizer's hyper-parameters: refused by default, read with these allowed"
    import numpy as np
    torch.save({'lr': np.float64(1e-3), 'mom': np.float32(0.9), 'n': np.int64(3)}, tmp_path/'x.pth')
    with pytest.raises(pickle.UnpicklingError): torch.load(tmp_path/'x.pth', weights_only=True)
    with torch.serialization.safe_globals(I.numpy_scalar_globals()): d = torch.load(tmp_path/'x.pth', weights_only=True)
    assert d == {'lr': 1e-3, 'mom': np.float32(0.9), 'n': 3} and type(d['lr']) is np.float64

def test_onednn_bf16_native_is_the_cpus_bf16_flag():
    "oneDNN's answer agrees with the CPU's own flags where Linux lists them (AVX-512 BF16 or AMX bf16)"
    try: flags = next(l for l in open('/proc/cpuinfo') if l.startswith('flags')).split()
    except (OSError, StopIteration): pytest.skip('no /proc/cpuinfo flags on this system')
    assert isinstance(I.onednn_bf16_native(), bool)
    assert I.onednn_bf16_native() == bool({'avx512_bf16', 'amx_bf16'} & set(flags))


# --- fastai Learner, callbacks, Recorder

class Boom(Callback):
    def __init__(self, exc): self.exc = exc
    def after_batch(self):
        if self.training: raise self.exc

def test_wrap_epoch_events_sees_crashes_not_cancels():
    seen = []
    learn = tiny_learner(cbs=Boom(RuntimeError('x')))
    I.wrap_epoch_events(learn, seen.append)
    with pytest.raises(RuntimeError): learn.fit(1)
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError)
    learn = tiny_learner(cbs=Boom(CancelEpochException()))
    I.wrap_epoch_events(learn, seen.append)
    learn.fit(2)   # cancelled epochs: fastai handles them, no crash
    assert len(seen) == 1
    I.unwrap_epoch_events(learn)
    assert '_with_events' not in learn.__dict__

class Looks(Callback):
    "Notes each event name looked up on it: what `Callback.__call__` does for every event, handled or not"
    order = 5
    def __init__(self, seen): self.seen = seen
    def __getattribute__(self, k):
        if k in _events: object.__getattribute__(self, 'seen').append(k)
        return object.__getattribute__(self, k)
    def before_batch(self): pass
    def after_loss(self): pass

from fastai.callback.core import event
_events = {e for e in dir(event) if not e.startswith('_')}

def test_handlers_only_sends_what_fastai_sends():
    "fastai looks every event up on every callback in `order` (`noop` when it lacks it); `after_fit` reaches all: it resets `run`"
    stock, fast = [], []
    learn = tiny_learner(cbs=Looks(stock))
    stock.clear(); learn.fit(1)
    learn = tiny_learner(cbs=Looks(fast))
    I.handlers_only(learn)
    fast.clear(); learn.fit(1)
    assert {'before_epoch', 'after_pred', 'after_step'} <= set(stock), "fastai sends a callback the events it lacks"
    assert fast == [k for k in stock if k in ('before_batch', 'after_loss', 'after_fit')]
    cb = learn.cbs.filter(lambda c: isinstance(c, Looks))[0]
    cb.run = False; learn('after_fit'); assert cb.run
    I.handlers_only(learn); inner = learn._call_one
    I.handlers_only(learn)   # again, as after a fit that crashed before its end: replaced, not stacked
    assert learn._call_one is not inner and learn._call_one.__closure__ and inner not in [c.cell_contents for c in learn._call_one.__closure__]
    I.all_handlers(learn)
    assert '_call_one' not in learn.__dict__
    order = []
    class A(Callback):
        order = 1
        def before_fit(self): order.append('A')
    class B(Callback):
        order = 0
        def before_fit(self): order.append('B')
    learn = tiny_learner(cbs=[A(), B()]); I.handlers_only(learn); learn.fit(1)
    assert order == ['B', 'A']   # sorted by `order`, as fastai's `_call_one` does

class Seen(Callback):
    def before_fit(self): self.learn.seen = I.in_fit(self.learn)

def test_in_fit():
    learn = tiny_learner(cbs=Seen())
    learn.fit(1); assert learn.seen
    learn.validate(); assert not learn.seen
    learn.get_preds(); assert not learn.seen
    with learn.no_bar(): learn.lr_find(num_it=4, show_plot=False, suggest_funcs=())
    assert not learn.seen

class Where(Callback):
    "Notes, at each batch, whether the Learner is predicting and whether it runs `lr_find`"
    def before_batch(self): self.learn.where.append((I.predicting(self.learn), I.in_lr_find(self.learn)))

def test_predicting_and_in_lr_find():
    learn = tiny_learner(cbs=Where())
    learn.where = []; learn.fit(1); assert set(learn.where) == {(False, False)}
    learn.where = []; learn.validate(); assert set(learn.where) == {(False, False)}
    learn.where = []; learn.get_preds(); assert set(learn.where) == {(True, False)}
    learn.where = []
    with learn.no_bar(): learn.lr_find(num_it=4, show_plot=False, suggest_funcs=())
    assert set(learn.where) == {(False, True)}
    assert not I.predicting(learn) and not I.in_lr_find(learn)   # after them

def test_point_tracker():
    from fastai.callback.tracker import SaveModelCallback, EarlyStoppingCallback
    import numpy as np
    cb = EarlyStoppingCallback(monitor='g_l1', min_delta=0.5)   # a name without 'loss': fastai takes it for a score
    assert (cb.comp, cb.min_delta) == (np.greater, 0.5)
    I.point_tracker(cb, True); assert (cb.comp, cb.min_delta) == (np.less, -0.5)
    I.point_tracker(cb, True); assert (cb.comp, cb.min_delta) == (np.less, -0.5)
    assert (SaveModelCallback(monitor='valid_loss', min_delta=0.5).min_delta) == -0.5   # fastai's own sign for np.less
    # fastai's `TrackerCallback._monitor` keeps a value `v` as the new best when `comp(v - min_delta, best)`
    assert not cb.comp(0.8 - cb.min_delta, 1.) and cb.comp(0.4 - cb.min_delta, 1.)   # lower by more than 0.5

def test_is_tensorboard_callback():
    from fastai.callback.tensorboard import TensorBoardCallback
    assert I.is_tensorboard_callback(TensorBoardCallback(trace_model=False)) and not I.is_tensorboard_callback(Count())

class Count(Callback):
    n = 0
    def after_batch(self):
        self.n += 1
        if self.n == 1: I.off_for_this_fit(self)

def test_off_for_this_fit():
    cb = Count()
    learn = tiny_learner(cbs=cb)
    learn.fit(2); assert cb.n == 1 and cb.run
    learn.fit(1); assert cb.n == 1 + 3   # on again for the whole next fit: 2 training and 1 validation batch

def test_replaced_logger_chain(tmp_path):
    mine = []
    learn = tiny_learner(cbs=CSVLogger(fname='h.csv'))
    learn.path = tmp_path
    learn.logger = mine.append
    class Peek(Callback):
        order = 70
        def before_fit(self): self.learn.peek = I.replaced_logger(self.learn.csv_logger)
    learn.add_cb(Peek())
    class Swap(Callback):
        order = 71
        def before_fit(self): I.set_replaced_logger(self.learn.csv_logger, mine.append)
    learn.add_cb(Swap())
    with learn.no_bar(): learn.fit(1)
    assert learn.peek is not None and len(mine) == 1   # the row went through `old_logger`, which after_fit put back
    assert learn.logger == mine.append
    assert I.replaced_logger(nn.Linear(1, 1)) is None

def test_logger_chain_put_back_after_a_crash(tmp_path):
    mine = []
    learn = tiny_learner(cbs=[CSVLogger(fname='h.csv'), Boom(RuntimeError('x'))])
    learn.path = tmp_path
    learn.logger = mine.append
    chain = I.logger_chain(learn)
    with learn.no_bar(), pytest.raises(RuntimeError): learn.fit(1)
    learn.csv_logger.file.close()
    # fastai: `CSVLogger` replaced `learn.logger`, kept the old one in its `old_logger`, and the crashed fit put nothing back
    assert learn.logger != mine.append and learn.csv_logger.__dict__['old_logger'] == mine.append
    I.restore_logger_chain(learn, chain)
    assert learn.logger == mine.append and 'old_logger' not in learn.csv_logger.__dict__
    learn.remove_cb(learn.boom)
    with learn.no_bar(): learn.fit(1)   # the chain set up afresh, the epoch's row through it, and put back by `after_fit`
    assert learn.logger == mine.append and len(mine) == 1

def test_valid_metrics_and_smoothed_loss():
    from fastai.metrics import mae
    learn = tiny_learner()
    learn.metrics = [mae]
    with learn.no_bar(): learn.fit(1)
    assert [type(m).__name__ for m in I.valid_metrics(learn.recorder)] == ['AvgLoss', 'AvgMetric']   # the valid loss, then the metrics
    assert len(learn.recorder.log) == 1 + 1 + 2 + 1 and I.valid_metrics(object()) is None   # epoch, train loss, those, time
    rec = learn.recorder
    assert torch.allclose(I.smoothed_loss(rec) / (1 - rec.smooth_loss.beta ** rec.smooth_loss.count), rec.smooth_loss.value)

def test_recorder_history_round_trip():
    learn = tiny_learner()
    with learn.no_bar(): learn.fit(2)
    h = I.recorder_history(learn.recorder)
    other = tiny_learner()
    with other.no_bar(): other.fit(1)
    I.set_recorder_history(other.recorder, h)
    r = other.recorder
    assert [list(v) for v in r.values] == [list(v) for v in learn.recorder.values]
    assert r.lrs == learn.recorder.lrs and r.iters == learn.recorder.iters and len(r.losses) == 4
    assert (r.smooth_loss.count, float(r.smooth_loss.val)) == (learn.recorder.smooth_loss.count, float(learn.recorder.smooth_loss.val))
    with other.no_bar(): other.fit(1)   # and it goes on from there
    assert len(other.recorder.values) == 1 and len(other.recorder.losses) == 2

class OnDevice(Callback):
    "Smooths on the device as the trainer does, noting the Recorder's smoothing class at each training batch"
    order = 45   # before `Recorder`
    def before_fit(self): self.kinds = []; I.smooth_on_device(self.recorder)
    def after_batch(self):
        if self.training: self.kinds.append(type(self.recorder.smooth_loss).__name__)
    def after_train(self): I.history_to_host(self.recorder)
    def after_fit(self): I.history_to_host(self.recorder, back=True)

def test_smooth_on_device_is_fastais_smoothing(monkeypatch):
    "`Recorder` accumulates `smooth_loss` and appends its `value` per batch: on the device, the same numbers, no copy to the host"
    from fastai.torch_core import set_seed
    gathers, orig = [], I.maybe_gather
    monkeypatch.setattr(I, 'maybe_gather', lambda x: gathers.append(x.device) or orig(x))   # averaged over processes, as fastai does
    recs = []
    for cbs in (None, OnDevice()):
        set_seed(0); learn = tiny_learner(cbs=cbs)
        with learn.no_bar(): learn.fit(2, 0.1)
        recs.append(learn.recorder)
    assert len(gathers) == 4 and learn.on_device.kinds == ['DeviceSmoothLoss'] * 4
    a, b = recs
    assert type(b.smooth_loss) is type(a.smooth_loss) and b.smooth_loss.count == a.smooth_loss.count == 4
    assert all(l.device.type == 'cpu' for l in b.losses) and torch.equal(torch.stack(b.losses), torch.stack(a.losses))
    assert torch.equal(b.smooth_loss.val, a.smooth_loss.val) and [list(v) for v in b.values] == [list(v) for v in a.values]

def test_become():
    p = nn.Parameter(torch.ones(2))
    opt = Adam([p], lr=0.1)
    class MyAdam(type(opt)):
        def lr(self): return self.hypers[0]['lr']
    I.become(opt, MyAdam)
    assert isinstance(opt, MyAdam) and opt.lr() == 0.1
    p.grad = torch.ones(2); opt.step()
    assert not torch.equal(p.detach(), torch.ones(2))


# --- fastai loaders, fasttransform

class Draw(Transform):
    "A batch transform drawing a random number"
    def encodes(self, x:torch.Tensor): return x + random.random()

def test_first_use_pass_draws_as_fastai_does():
    "A fresh `TfmdDL` makes one pass through its batch transforms when first asked for `n_inp` (the Learner asks at its first batch)"
    def make(): return TfmdDL([torch.zeros(1)] * 4, bs=2, after_batch=Draw())
    random.seed(0); seeded = random.getstate()
    make().n_inp; first_use = random.getstate()
    assert first_use != seeded   # that pass drew random numbers
    random.seed(0); dl = make(); I.first_use_pass(dl)
    assert random.getstate() == first_use   # the same draws
    dl.n_inp; I.first_use_pass(dl)
    assert random.getstate() == first_use   # and no pass any more

def test_raw_batches_as_fastai_iterates():
    dl = TfmdDL(list(range(10)), bs=4, shuffle=True)
    dl.rng.seed(1); fastai = [b.tolist() for b in dl]
    dl.rng.seed(1); dl.randomize(); dl.before_iter()
    ours = [dl.after_batch(b).tolist() for b in I.raw_batches(dl)]
    dl.after_iter()
    assert ours == fastai

def test_kept_iterator_left_alone_in_forked_children():
    "A persistent-worker iterator inherited by a forked process is marked shut down there (its workers are the parent's), and only there"
    dl = torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=1, persistent_workers=True)
    it = I.kept_iterator(iter(dl))
    assert [b.tolist() for b in it] == [[0, 1], [2, 3]]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0: os.write(w, b'1' if it._shutdown else b'0'); os._exit(0)
    os.close(w); got = os.read(r, 1); os.waitpid(pid, 0); os.close(r)
    assert got == b'1' and not it._shutdown
    assert [b.tolist() for b in iter(dl)] == [[0, 1], [2, 3]]   # the parent's workers still serve the next epoch

def double(x): return x * 2
def halve(x): return x / 2

def test_transforms_of_functions_pickle():
    I.pickle_transforms_by_function()
    t = Transform(double, halve)
    u = pickle.loads(pickle.dumps(t))
    assert u(3) == 6 and u.decode(6) == 3


# --- fastai DistributedTrainer, Accelerate

def test_wrap_loaders_with():
    from fastai.distributed import DistributedTrainer
    dt = DistributedTrainer.__new__(DistributedTrainer)   # no process group: only the wrapping is looked at
    I.wrap_loaders_with(dt, lambda self, dl: ('wrapped', dl))
    assert dt._wrap_dl('dl') == ('wrapped', 'dl')
    assert DistributedTrainer._wrap_dl is not dt._wrap_dl   # the class is left alone

def test_distributed_dl_broadcasts_through_broadcast():
    from fastai.data.load import DataLoader
    seen = []
    class Recorded(I.BroadcastingDistributedDL):
        def broadcast(self, t, rank): seen.append((list(t), rank)); return list(t)[::-1]
    dl = Recorded(DataLoader(list(range(6)), bs=2), rank=0, world_size=1)   # no process group: only the broadcast is looked at
    assert dl.get_idxs() == [5, 4, 3, 2, 1, 0]   # fastai: `get_idxs` shares rank 0's indices through `_broadcast`, and uses what it returns
    assert seen == [([0, 1, 2, 3, 4, 5], 0)]

def test_reset_accelerator_state():
    from accelerate.state import AcceleratorState, PartialState
    PartialState(cpu=True)
    assert PartialState._shared_state
    I.reset_accelerator_state()
    assert not PartialState._shared_state and not AcceleratorState._shared_state


# --- fastai's WandbCallback

class _Scaled(Callback):
    def __init__(self, k=2): store_attr()

def test_mend_wandb_config():
    pytest.importorskip('wandb')
    from pathlib import Path
    from fastai.callback.wandb import _format_config
    learn = tiny_learner(cbs=_Scaled(k=3))
    I.mend_wandb_config()
    cfg = _format_config({**learn.gather_args(), 'path': Path('data'), 'device': 'cpu'})   # what `WandbCallback.before_fit` logs
    assert cfg['path'] == Path('data') and cfg['device'] == 'cpu' and cfg['batch size'] == 4 and cfg['n_inp'] == 1
    assert cfg['_Scaled'] == {'k': 3}   # a callback's arguments, as fastai records them


# --- fastai names the library overrides where it uses them (`internals.fastai_overrides`)

def test_fastai_overrides_are_the_listed_ones():
    from fastai.callback.progress import ProgressCallback
    from fastai.data.load import DataLoader
    from fastai.torch_core import TensorImageBase
    from fastai.vision.core import PILImage
    from fastai.learner import Learner
    owners = dict(ProgressCallback=ProgressCallback, DataLoader=DataLoader, TensorImageBase=TensorImageBase, PILImage=PILImage, Learner=Learner)
    for name in I.fastai_overrides:
        cls, attr = name.split('.')
        assert attr in owners[cls].__dict__, name

def test_progress_writes_rows_through_write_stats_and_launches_bars():
    class Seen(ProgressCallback):
        def before_fit(self): self.rows, self.bars = [], 0; super().before_fit()
        def _write_stats(self, log): self.rows.append(list(log))
        def _launch_pbar(self): self.bars += 1; super()._launch_pbar()
    learn = tiny_learner()
    learn.remove_cb(ProgressCallback); learn.add_cb(seen := Seen())
    learn.fit(2)
    assert seen.bars == 4   # before_train and before_validate, each epoch
    assert seen.rows[0] == list(learn.recorder.metric_names) and len(seen.rows) == 3   # the header, then one row per epoch

def test_dataloader_iter_steps():
    from fastai.data.load import DataLoader
    calls = []
    class Seen(DataLoader):
        def randomize(self): calls.append('randomize'); super().randomize()
        def before_iter(self): calls.append('before_iter'); super().before_iter()
        def after_batch(self, b): calls.append('after_batch'); return b
        def after_iter(self): calls.append('after_iter'); super().after_iter()
    dl = Seen(list(range(6)), bs=3)
    assert [b.tolist() for b in dl] == [[0, 1, 2], [3, 4, 5]]
    assert calls == ['randomize', 'before_iter', 'after_batch', 'after_batch', 'after_iter'] and not hasattr(dl, 'it')

def test_show_args_reach_show_image():
    import matplotlib; matplotlib.use('Agg')
    from fastai.torch_core import TensorImageBW
    class Gray(TensorImageBW): _show_args = {'cmap': 'gray', 'vmin': 0, 'vmax': 255}
    ax = Gray(torch.zeros(1, 4, 4)).show()
    im = ax.get_images()[0]
    assert im.get_cmap().name == 'gray' and im.get_clim() == (0, 255)
    ax = Gray(torch.zeros(1, 4, 4)).show(vmax=9)   # the caller's wins
    assert ax.get_images()[0].get_clim() == (0, 9)

def test_tensor_class_is_what_ToTensor_makes():
    from PIL import Image
    from fastai.vision.core import PILImage, PILImageBW, ToTensor, TensorImage, TensorImageBW
    for cls, mode in ((PILImage, 'RGB'), (PILImageBW, 'L')):
        im = cls.create(Image.new(mode, (3, 2)))
        assert type(ToTensor()(im)) is I.tensor_class(cls)
    assert (I.tensor_class(PILImage), I.tensor_class(PILImageBW)) == (TensorImage, TensorImageBW)

def test_unwrap_loader_finds_what_distributed_dl_wraps():
    "A distributed fit's `DistributedDL` draws each epoch's order from the loader it wraps, kept in `.dl`"
    from fastai.distributed import DistributedDL
    dl = TfmdDL(list(range(8)), bs=2, shuffle=True)
    ddl = DistributedDL(dl, rank=0, world_size=2, device='cpu')
    assert I.unwrap_loader(ddl) is dl and I.unwrap_loader(dl) is dl
    dl.rng.seed(3); a = list(dl.get_idxs())   # what `DistributedDL.get_idxs` takes, on every rank, before it splits them
    dl.rng.seed(3); assert list(dl.get_idxs()) == a and a != list(range(8))

def test_a_training_batch_backward_and_step_go_through_do_grad_opt():
    "`replace_grad_opt`: what a training batch calls for its backward and step (validation batches call nothing); `own_grad_opt` is fastai's"
    learn = tiny_learner()
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ not in ('TrainEvalCallback', 'Recorder')])
    calls = []
    class Counted:
        def __call__(self): calls.append(learn.training); I.own_grad_opt(learn)
    I.replace_grad_opt(learn, Counted())
    w = next(learn.model.parameters()).detach().clone()
    learn.fit(1)
    assert calls and all(calls) and len(calls) == len(learn.dls.train)
    assert not torch.equal(w, next(learn.model.parameters()))   # fastai's own update ran through it
    I.restore_grad_opt(learn, Counted)
    assert '_do_grad_opt' not in learn.__dict__
