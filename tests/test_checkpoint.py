"GANCheckpoint: exact resume, safe writes, non-finite stops, and clear errors."
import os, warnings
from pathlib import Path
from copy import deepcopy
import pytest, torch
from fastai.basics import Learner, DataLoaders, Callback, L1LossFlat, set_seed, L
from fastai.optimizer import Adam
import fastai.callback.progress  # Learner.no_bar
import fastai.callback.schedule  # Learner.fit_one_cycle
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.trainer.nonfinite import NonFiniteError
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.callback.checkpoint import GANCheckpoint, load_checkpoint, find_checkpoint
from gan_callbacks.atomic import CheckpointError, atomic_save


from helpers import flipped_dls as make_dls, make_learner, quiet_fit as run, state as sd, assert_same, Interrupt, RandFlip, default_signals, wait_for

class InjectNaN(Callback):
    "NaN in the input (or target) of the training iterations `its` (counted with `learn.train_iter`)"
    order = -5   # before the trainer reads the batch
    def __init__(self, its, target=False): self.its, self.target = set(its), target
    def before_batch(self):
        if not self.training or self.learn.train_iter not in self.its: return
        if self.target: self.learn.yb = (self.yb[0] * float('nan'),)
        else: self.learn.xb = (self.xb[0] * float('nan'),)

def assert_same_run(learn, ref):
    t, t0 = learn.pix2pix_trainer, ref.pix2pix_trainer
    assert_same(sd(learn.model), sd(ref.model))
    assert_same(sd(t.discriminator), sd(t0.discriminator))
    assert_same(learn.opt.state_dict(), ref.opt.state_dict())
    assert_same(t.d_opt.state_dict(), t0.d_opt.state_dict())
    assert_same([list(v) for v in learn.recorder.values], [list(v) for v in ref.recorder.values])
    assert_same(learn.recorder.losses, ref.recorder.losses)
    assert_same(learn.recorder.iters, ref.recorder.iters)
    assert_same(t.hist, t0.hist)
    assert learn.train_iter == ref.train_iter


# --- (1) interrupted and resumed == uninterrupted

def test_interrupt_and_resume_is_bitwise_identical(tmp_path):
    ref = make_learner(tmp_path/'ref', given_d=False)
    run(ref)
    learn = make_learner(tmp_path, given_d=False, cbs=[GANCheckpoint(), Interrupt(epoch=2, batch=1)])
    with pytest.raises(KeyboardInterrupt): run(learn)
    models = tmp_path/'models'
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth', 'gan_epoch1.pth', 'gan_interrupted.pth']
    part = torch.load(models/'gan_interrupted.pth', weights_only=True)
    assert part['interrupted']['epoch'] == 2 and part['interrupted']['batch'] == 1 and part['epoch'] == 1
    assert 'KeyboardInterrupt' in part['interrupted']['error']
    # a new process: another seed (other initial weights, other loader seeds), D built lazily again
    resumed = make_learner(tmp_path, seed=1234, given_d=False, cbs=GANCheckpoint(resume=True))
    assert not torch.equal(next(resumed.model.parameters()), next(ref.model.parameters()))
    run(resumed)
    assert resumed.gan_checkpoint.resumed_from == models/'gan_epoch1.pth'
    assert_same_run(resumed, ref)
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch2.pth', 'gan_epoch3.pth']


def test_one_cycle_resume_lands_on_the_same_schedule(tmp_path):
    lrs = {}
    class RecLR(Callback):
        order = 70
        def __init__(self, key): self.key = key
        def after_batch(self):
            if self.training: lrs.setdefault(self.key, []).append((self.epoch, self.opt.hypers[-1]['lr'], self.opt.hypers[-1]['mom']))
    ref = make_learner(tmp_path/'ref', cbs=RecLR('ref'))
    run(ref, one_cycle=True)
    learn = make_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=2, batch=2)])
    with pytest.raises(KeyboardInterrupt): run(learn, one_cycle=True)
    resumed = make_learner(tmp_path, seed=7, cbs=[GANCheckpoint(resume=True), RecLR('res')])
    run(resumed, one_cycle=True)
    assert lrs['res'] == [o for o in lrs['ref'] if o[0] >= 2]   # the resumed epochs, batch for batch
    assert resumed.recorder.lrs == ref.recorder.lrs
    assert resumed.recorder.hps == ref.recorder.hps
    assert_same_run(resumed, ref)


def test_plain_learner_without_trainer(tmp_path):
    ref = make_learner(tmp_path/'ref', trainer=False)
    run(ref, n=3)
    learn = make_learner(tmp_path, trainer=False, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=1)])
    with pytest.raises(KeyboardInterrupt): run(learn, n=3)
    ck = torch.load(tmp_path/'models'/'gan_epoch0.pth', weights_only=True)
    assert ck['trainer'] is None and ck['epoch'] == 0
    resumed = make_learner(tmp_path, seed=3, trainer=False, cbs=GANCheckpoint(resume=True))
    run(resumed, n=3)
    assert_same(sd(resumed.model), sd(ref.model))
    assert_same(resumed.opt.state_dict(), ref.opt.state_dict())
    assert_same([list(v) for v in resumed.recorder.values], [list(v) for v in ref.recorder.values])


def test_every_keep_and_resume_from_a_named_file(tmp_path):
    learn = make_learner(tmp_path, cbs=GANCheckpoint(every=2, keep=2))
    run(learn, n=5)
    models = tmp_path/'models'
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch3.pth', 'gan_epoch4.pth']   # every 2nd, and the last
    assert find_checkpoint(learn) == models/'gan_epoch4.pth'
    # an explicit file: the fit continues from it
    resumed = make_learner(tmp_path, seed=2, cbs=GANCheckpoint(every=2, resume='gan_epoch3'))
    run(resumed, n=5)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_epoch3.pth' and resumed.train_iter == 20
    assert len(resumed.recorder.values) == 5
    # even a partial epoch, when asked, with a warning that this is not an exact continuation
    run_ = make_learner(tmp_path/'b', cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)])
    with pytest.raises(KeyboardInterrupt): run(run_, n=2)
    resumed = make_learner(tmp_path/'b', cbs=GANCheckpoint(resume='gan_interrupted'))
    with resumed.no_bar(), resumed.no_logging(), pytest.warns(UserWarning, match='middle of epoch 1'): resumed.fit(2, 1e-3)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_interrupted.pth'
    assert sorted(p.name for p in (tmp_path/'b'/'models').iterdir()) == ['gan_epoch0.pth', 'gan_epoch1.pth']
    with pytest.raises(CheckpointError, match='No checkpoint nope'): run(make_learner(tmp_path, cbs=GANCheckpoint(resume='nope')))


def test_fresh_fit_warns_and_replaces_an_earlier_series(tmp_path):
    run(make_learner(tmp_path, cbs=GANCheckpoint()), n=3)
    learn = make_learner(tmp_path, cbs=GANCheckpoint())
    with learn.no_bar(), learn.no_logging(), pytest.warns(UserWarning, match='earlier fit'): learn.fit(1, 1e-3)
    assert sorted(p.name for p in (tmp_path/'models').iterdir()) == ['gan_epoch0.pth']
    # resume=True without any checkpoint starts from scratch
    other = make_learner(tmp_path/'other', cbs=GANCheckpoint(resume=True))
    run(other, n=1)
    assert other.gan_checkpoint.resumed_from is None and other.train_iter == 4


def test_validate_and_get_preds_leave_checkpoints_alone(tmp_path):
    learn = make_learner(tmp_path, cbs=GANCheckpoint(resume=True))
    run(learn, n=2)
    run(learn, n=2)   # the same call again: it resumes from its own last epoch, nothing left to train
    models = tmp_path/'models'
    files = {p.name: p.stat().st_mtime_ns for p in models.iterdir()}
    w = sd(learn.model)
    with learn.no_bar():
        learn.validate(); learn.get_preds()   # both send `before_fit`: no resume, no save
    assert {p.name: p.stat().st_mtime_ns for p in models.iterdir()} == files
    assert_same(sd(learn.model), w)
    assert learn.gan_checkpoint.resumed_from.name == 'gan_epoch1.pth'

def test_validate_after_a_one_epoch_fit_saves_nothing(tmp_path):
    "`validate` and `get_preds` send `after_epoch` as epoch 0 of the fit's `n_epoch`: after a fit of one epoch, that is its last"
    learn = make_learner(tmp_path, cbs=GANCheckpoint(every=5))
    run(learn, n=1)
    models = tmp_path/'models'
    files = {p.name: p.stat().st_mtime_ns for p in models.iterdir()}
    assert list(files) == ['gan_epoch0.pth']
    with learn.no_bar():
        learn.validate(); learn.get_preds()
    assert {p.name: p.stat().st_mtime_ns for p in models.iterdir()} == files


# --- (2) a save that dies half-way

def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    learn = make_learner(tmp_path, cbs=GANCheckpoint(keep=1))
    run(learn, n=1)
    models = tmp_path/'models'
    good = (models/'gan_epoch0.pth').read_bytes()
    def half_save(obj, f, *args, **kwargs):
        Path(f).write_bytes(b'PK\x03\x04' + b'\0' * 1000)   # a few bytes of a zip, then the disk is full
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(torch, 'save', half_save)
    learn2 = make_learner(tmp_path, cbs=GANCheckpoint(keep=1, resume=True))
    with pytest.raises(OSError, match='No space left'): run(learn2, n=3)
    monkeypatch.undo()
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth']   # no partial file, no temporary left
    assert (models/'gan_epoch0.pth').read_bytes() == good
    assert load_checkpoint(make_learner(tmp_path), 'gan_epoch0')['epoch'] == 0


def test_failed_rename_and_killed_save_leave_loadable_checkpoints(tmp_path, monkeypatch):
    learn = make_learner(tmp_path, cbs=GANCheckpoint())
    run(learn, n=2)
    models = tmp_path/'models'
    def no_replace(src, dst): raise OSError(5, 'Input/output error')
    monkeypatch.setattr(os, 'replace', no_replace)
    with pytest.raises(OSError, match='Input/output'): atomic_save({'x': 1}, models/'gan_epoch1.pth')
    monkeypatch.undo()
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth', 'gan_epoch1.pth']
    # a process killed while writing leaves a hidden temporary file: no loader looks at it
    (models/'.gan_epoch2.pth.x1y2.tmp').write_bytes((models/'gan_epoch1.pth').read_bytes()[:3000])
    resumed = make_learner(tmp_path, seed=5, cbs=GANCheckpoint(resume=True))
    run(resumed, n=3)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_epoch1.pth'
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch1.pth', 'gan_epoch2.pth']   # and the next save cleans it


def test_resume_skips_an_unreadable_newest_checkpoint(tmp_path):
    run(make_learner(tmp_path, cbs=GANCheckpoint()), n=2)
    newest = tmp_path/'models'/'gan_epoch1.pth'
    newest.write_bytes(newest.read_bytes()[:4000])   # damaged afterwards, by something else
    resumed = make_learner(tmp_path, cbs=GANCheckpoint(resume=True))
    with resumed.no_bar(), resumed.no_logging(), pytest.warns(UserWarning, match='gan_epoch1.pth.*truncated or corrupt'):
        resumed.fit(2, 1e-3)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_epoch0.pth'


# --- (3) non-finite losses

@pytest.mark.parametrize('target,opt_func', [(False, pix2pix_adam), (True, pix2pix_adam), (False, Adam)])
def test_nonfinite_iterations_are_skipped_and_counted(tmp_path, target, opt_func):
    bad = {1, 5, 6}   # never three in a row
    seen = []
    class Watch(Callback):
        order = 100
        def before_batch(self):
            if not self.training: return
            t = self.pix2pix_trainer
            self.before = (sd(self.model), t.discriminator and sd(t.discriminator), deepcopy(self.opt.state_dict()),
                           t.d_opt and deepcopy(t.d_opt.state_dict()))
        def after_batch(self):
            if not self.training or self.train_iter - 1 not in bad: return
            t, (g, d, og, od) = self.pix2pix_trainer, self.before
            assert_same(sd(self.model), g)   # weights and BatchNorm statistics
            if d is not None: assert_same(sd(t.discriminator), d)
            assert_same(self.opt.state_dict(), og)   # moments and step counts
            if od is not None: assert_same(t.d_opt.state_dict(), od)
            seen.append(self.train_iter - 1)
    learn = make_learner(tmp_path, cbs=[InjectNaN(bad, target), Watch()], opt_func=opt_func)
    with learn.no_bar(), learn.no_logging(), pytest.warns(UserWarning, match=r'1 iteration\(s\) of epoch 0 skipped'):
        learn.fit(2, 1e-3)
    assert seen == sorted(bad)
    t = learn.pix2pix_trainer
    assert t.n_skipped == 3
    assert all(torch.isfinite(v).all() for v in learn.model.state_dict().values() if v.is_floating_point())
    assert all(torch.isfinite(torch.tensor(v[:2])).all() for v in learn.recorder.values)   # fastai's loss columns too
    assert torch.isfinite(torch.stack(t.hist)).all()
    if opt_func is pix2pix_adam:   # the other updates did happen: 8 iterations, 3 skipped
        assert {int(s['step']) for s in t.d_opt.opt.state.values()} == {5}


def test_nonfinite_in_a_row_stops_and_keeps_the_checkpoint(tmp_path):
    learn = make_learner(tmp_path, cbs=[GANCheckpoint(), InjectNaN({9, 10, 11})])   # epoch 2, batches 1-3
    models = tmp_path/'models'
    with pytest.raises(NonFiniteError, match='3 training iterations in a row.*epoch 2, batch 3'): run(learn)
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth', 'gan_epoch1.pth']   # nothing saved after it
    ck = load_checkpoint(make_learner(tmp_path, seed=9), 'gan_epoch1')
    assert ck['epoch'] == 1 and ck['trainer']['n_skipped'] == 0
    # the stop is read with the others: every `check_every` batches, counting stays exact
    learn = make_learner(tmp_path/'b', cbs=InjectNaN({1, 2, 3}), max_nonfinite=3)
    learn.pix2pix_trainer.check_every = 2
    with pytest.raises(NonFiniteError, match='epoch 0, batch 3'): run(learn)
    learn = make_learner(tmp_path/'c', cbs=InjectNaN({1, 2, 3, 4, 5}), max_nonfinite=None)
    run(learn, n=2)
    assert learn.pix2pix_trainer.n_skipped == 5


# --- (4) errors

def test_mismatched_architecture_is_named(tmp_path):
    run(make_learner(tmp_path, cbs=GANCheckpoint()), n=1)
    wider = make_learner(tmp_path, ngf=16)
    with pytest.raises(CheckpointError, match=r'(?s)generator.*\(8, 3, 4, 4\) in the checkpoint, \(16, 3, 4, 4\) in the model'):
        load_checkpoint(wider, 'gan_epoch0')
    set_seed(0)
    deeper = Learner(make_dls(), UnetGenerator(num_downs=6, ngf=8, use_dropout=True), loss_func=L1LossFlat(),
                     cbs=Pix2pixTrainer(), path=tmp_path)
    with pytest.raises(CheckpointError, match="missing in the checkpoint"): load_checkpoint(deeper, 'gan_epoch0')
    other_d = make_learner(tmp_path)
    other_d.pix2pix_trainer.discriminator = PatchDiscriminator(ndf=4, n_layers=2)   # another width
    with pytest.raises(CheckpointError, match='fit the discriminator'): load_checkpoint(other_d, 'gan_epoch0')
    # and through resume, before any training
    learn = make_learner(tmp_path, ngf=16, cbs=GANCheckpoint(resume=True))
    w = sd(learn.model)
    with pytest.raises(CheckpointError, match='16, 3, 4, 4'): run(learn)
    assert_same(sd(learn.model), w)


def test_truncated_and_foreign_files(tmp_path):
    run(make_learner(tmp_path, cbs=GANCheckpoint()), n=1)
    models = tmp_path/'models'
    data = (models/'gan_epoch0.pth').read_bytes()
    learn = make_learner(tmp_path)
    for n in (0, 100, len(data)//2, len(data) - 10):
        (models/'cut.pth').write_bytes(data[:n])
        with pytest.raises(CheckpointError, match='cut.pth: it is truncated or corrupt'): load_checkpoint(learn, 'cut')
    torch.save({'model': {}}, models/'other.pth')
    with pytest.raises(CheckpointError, match='other.pth is not a checkpoint written by `GANCheckpoint`'): load_checkpoint(learn, 'other')
    with pytest.raises(CheckpointError, match='No checkpoint missing'): load_checkpoint(learn, 'missing')


# --- (5) interrupts, signals, full disks and file modes

SAVE_LOOP = r'''
import signal, sys, torch
from pathlib import Path
from gan_callbacks.atomic import atomic_save, stop_on_sigterm
obj = {f't{i}': torch.rand(1 << 20) for i in range(24)}   # ~100 MB: a save takes a while
fn = Path(sys.argv[1])
try:
    with stop_on_sigterm():
        while True:
            atomic_save(obj, fn); print('saved', flush=True)
except KeyboardInterrupt as e: print(type(e).__name__, flush=True); sys.exit(130 if type(e) is KeyboardInterrupt else 143)
except BaseException as e: print(type(e).__name__, e, flush=True); sys.exit(1)
'''

@pytest.mark.parametrize('sig,code,name', [('SIGINT', 130, 'KeyboardInterrupt'), ('SIGTERM', 143, 'Terminated')])
def test_a_signal_while_the_temporary_file_is_written(tmp_path, sig, code, name):
    "Ctrl-C or SIGTERM during `torch.save`: the interrupt itself reaches the caller (not torch's `unexpected pos`), the file stays whole"
    import signal, subprocess, sys
    fn = tmp_path/'x.pth'
    p = subprocess.Popen([sys.executable, '-c', SAVE_LOOP, str(fn)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=default_signals)
    try:
        assert p.stdout.readline().strip() == 'saved'   # one whole file; now the next save is under way
        wait_for(lambda: any(tmp_path.glob('.x.pth.*.tmp')), p)
        p.send_signal(getattr(signal, sig))
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None: p.kill()
    assert p.returncode == code, (out, err)
    assert out.strip().splitlines()[-1] == name
    assert [f.name for f in tmp_path.iterdir()] == ['x.pth']   # no temporary left
    assert len(torch.load(fn, weights_only=True)) == 24


def test_checkpoints_follow_the_umask(tmp_path):
    old = os.umask(0o002)
    try: atomic_save({'a': 1}, tmp_path/'group.pth')
    finally: os.umask(old)
    old = os.umask(0o077)
    try: atomic_save({'a': 1}, tmp_path/'private.pth')
    finally: os.umask(old)
    assert (tmp_path/'group.pth').stat().st_mode & 0o777 == 0o664
    assert (tmp_path/'private.pth').stat().st_mode & 0o777 == 0o600


def test_full_disk_names_the_file_the_space_and_the_last_good_checkpoint(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple
    from gan_callbacks import atomic as safety
    from gan_callbacks.atomic import CheckpointWriteError
    run(make_learner(tmp_path, cbs=GANCheckpoint()), n=1)
    models, usage = tmp_path/'models', namedtuple('usage', 'total used free')
    monkeypatch.setattr(safety.shutil, 'disk_usage', lambda d: usage(10**6, 10**6 - 5000, 5000))   # 5000 bytes left
    learn = make_learner(tmp_path, cbs=GANCheckpoint(resume=True))
    with pytest.raises(CheckpointWriteError) as e: run(learn, n=3)
    msg = str(e.value).splitlines()[-1].strip()   # below fastai's line naming the callback
    assert isinstance(e.value, OSError) and e.value.errno == 28
    assert msg.startswith(f"Cannot write {models/'gan_epoch1.pth'}: No space left on device (it needs about ")
    assert msg.endswith(f"MB, 0.0 MB free); the last good checkpoint is {models/'gan_epoch0.pth'}")
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth']   # no interrupted state tried, no temporary left
    # the disk fills up while torch writes (its own writer reports no errno): the same line
    free = iter([10**9, 5000])
    monkeypatch.setattr(safety.shutil, 'disk_usage', lambda d: usage(10**9, 0, next(free)))
    def fill(obj, f): Path(f).write_bytes(b'PK' * 1000); raise RuntimeError('[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598')
    monkeypatch.setattr(torch, 'save', fill)
    with pytest.raises(CheckpointWriteError, match=r'gan_epoch9.pth: No space left on device \(it needs about 0.0 MB, 0.0 MB free\)$'):
        atomic_save({'x': torch.zeros(10)}, models/'gan_epoch9.pth')
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth']


def test_resume_true_takes_a_partial_epoch_when_no_epoch_was_finished(tmp_path):
    learn = make_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=0, batch=2)])
    with pytest.raises(KeyboardInterrupt): run(learn, n=2)
    models = tmp_path/'models'
    assert [p.name for p in models.iterdir()] == ['gan_interrupted.pth']
    assert learn.gan_checkpoint.saved == models/'gan_interrupted.pth'
    assert find_checkpoint(learn, interrupted=True) == models/'gan_interrupted.pth' and find_checkpoint(learn) is None
    resumed = make_learner(tmp_path, seed=3, cbs=GANCheckpoint(resume=True))
    with resumed.no_bar(), resumed.no_logging(), pytest.warns(UserWarning, match='middle of epoch 0'):
        resumed.fit(2, 1e-3)
    assert resumed.gan_checkpoint.resumed_from == models/'gan_interrupted.pth'


class InterruptAfterSave(Callback):
    "A Ctrl-C after epoch `epoch`'s checkpoint is complete: in a later callback's `after_epoch`, or as the next epoch begins"
    order = 60
    def __init__(self, epoch=1, where='after_epoch'): self.epoch_, self.where = epoch, where
    def after_epoch(self):
        if self.where == 'after_epoch' and self.epoch == self.epoch_: raise KeyboardInterrupt
    def before_epoch(self):
        if self.where == 'before_epoch' and self.epoch == self.epoch_ + 1: raise KeyboardInterrupt

@pytest.mark.parametrize('where', ['after_epoch', 'before_epoch', 'in_save'])
def test_an_interrupt_at_an_epoch_boundary_leaves_that_epoch_s_checkpoint(tmp_path, where, monkeypatch):
    "Ctrl-C once an epoch is done (even while its checkpoint is written): the epoch's checkpoint, complete, is where to resume"
    ref = make_learner(tmp_path/'ref', given_d=False)
    run(ref)
    if where == 'in_save':
        save, calls = torch.save, []
        def cut(obj, f):   # the second epoch's save is interrupted half-way
            calls.append(f)
            if len(calls) == 2: Path(f).write_bytes(b'PK' * 100); raise KeyboardInterrupt
            return save(obj, f)
        monkeypatch.setattr(torch, 'save', cut)
    learn = make_learner(tmp_path, given_d=False, cbs=[GANCheckpoint()] + ([] if where == 'in_save' else [InterruptAfterSave(1, where)]))
    with pytest.raises(KeyboardInterrupt): run(learn)
    monkeypatch.undo()
    models = tmp_path/'models'
    assert sorted(p.name for p in models.iterdir()) == ['gan_epoch0.pth', 'gan_epoch1.pth']   # no partial epoch, no temporary
    assert learn.gan_checkpoint.saved == models/'gan_epoch1.pth'
    resumed = make_learner(tmp_path, seed=1234, given_d=False, cbs=GANCheckpoint(resume=True))
    run(resumed)
    assert resumed.gan_checkpoint.resumed_from == models/'gan_epoch1.pth'
    assert_same_run(resumed, ref)


def test_a_second_interrupt_does_not_cut_the_saving_of_the_first(tmp_path, monkeypatch):
    import signal
    save = torch.save
    def save_and_ctrl_c(obj, f):
        if obj.get('interrupted'): os.kill(os.getpid(), signal.SIGINT)   # while the interrupted state is written
        return save(obj, f)
    monkeypatch.setattr(torch, 'save', save_and_ctrl_c)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a foreground process, however the tests were started
    try:
        learn = make_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=1)])
        with pytest.raises(KeyboardInterrupt): run(learn, n=2)
    finally: signal.signal(signal.SIGINT, old)
    monkeypatch.undo()
    assert load_checkpoint(make_learner(tmp_path), 'gan_interrupted')['interrupted']['epoch'] == 1


def test_random_bytes_are_named_without_torch_s_advice(tmp_path):
    learn = make_learner(tmp_path)
    (tmp_path/'random.pth').write_bytes(os.urandom(5000))
    with pytest.raises(CheckpointError) as e: load_checkpoint(learn, tmp_path/'random.pth')
    assert 'random.pth: it is truncated or corrupt' in str(e.value) and 'weights_only' not in str(e.value)


def test_keep_best_and_early_stop_resume_as_uninterrupted(tmp_path):
    "The best weights and the patience count survive an interrupt, whether the best is the checkpoint's own epoch or an earlier one"
    import numpy as np
    from fastai.metrics import ValueMetric
    from gan_callbacks.callback.loggers import KeepBest, EarlyStop
    scores = [0.5, 0.3, 0.6, 0.4]   # best at epoch 1; epochs 2 and 3 do not improve
    def fit(path, interrupt=None, resume=False):
        learn = make_learner(path)
        learn.metrics = [ValueMetric(lambda: scores[learn.epoch], 'score')]
        keep, stop = KeepBest('score', comp=np.less), EarlyStop('score', comp=np.less, patience=3)
        cbs = [GANCheckpoint(resume=resume), keep, stop] + ([Interrupt(epoch=interrupt, batch=1)] if interrupt is not None else [])
        run(learn, cbs=cbs)
        return keep, stop
    keep0, stop0 = fit(tmp_path/'ref')
    assert keep0.best_epoch == 1 and keep0.best == 0.3 and stop0.wait == 2
    for at in (2, 3):   # resumed from epoch 1 (the best: the checkpoint's own weights), from epoch 2 (the best kept apart)
        with pytest.raises(KeyboardInterrupt): fit(tmp_path/str(at), interrupt=at)
        keep, stop = fit(tmp_path/str(at), resume=True)
        assert (keep.best_epoch, keep.best, stop.best, stop.wait) == (1, 0.3, 0.3, 2)
        assert_same(keep.best_state, keep0.best_state)


def test_a_path_names_the_checkpoints_and_learn_load_points_at_load_checkpoint(tmp_path):
    "`GANCheckpoint(Path('ck'))` as `GANCheckpoint('ck')`; `learn.load` of a checkpoint says how to load or resume it"
    from pathlib import Path
    from helpers import tiny_learner, fit
    from gan_callbacks.callback.checkpoint import GANCheckpoint, load_checkpoint
    learn = tiny_learner(tmp_path)
    fit(learn, 1, cbs=[GANCheckpoint(Path('ck'))], warn=False)
    fn = tmp_path/'models'/'ck_epoch0.pth'
    assert sorted(p.name for p in fn.parent.iterdir()) == ['ck_epoch0.pth']
    with pytest.raises(ValueError, match=r"is a checkpoint of GANCheckpoint, not a `learn.save` file: load it with `load_checkpoint\(learn"):
        learn.load('ck_epoch0')
    load_checkpoint(learn, fn)   # what it points at works
