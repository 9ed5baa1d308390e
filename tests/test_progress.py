"The progress callback `pix2pix_learner` installs: every logging callback sees every epoch, and plain lines off a terminal."
import csv
import pytest, torch
from fastai.basics import Learner, DataLoaders, Callback, L1LossFlat
from fastai.callback.progress import CSVLogger, ProgressCallback
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer, pix2pix_learner
from gan_callbacks.trainer.progress import SyncFreeProgressCallback


def tiny_dls(n=4, bs=2, size=32):
    g = torch.Generator().manual_seed(0)
    items = [(torch.rand(3, size, size, generator=g)*2-1, torch.rand(3, size, size, generator=g)*2-1) for _ in range(n)]
    return DataLoaders.from_dsets(items, items[:2], bs=bs, shuffle=False, device='cpu')

def G(): return UnetGenerator(3, 3, num_downs=5, ngf=4)

def rows(fn): return list(csv.reader(open(fn)))


class Lines(Callback):
    "A logger in fastai's style (as `CSVLogger`): chains `learn.logger` and keeps what it is given"
    order = 60
    def before_fit(self): self.got, (self.old_logger, self.learn.logger) = [], (self.logger, self.log_line)
    def log_line(self, log): self.got.append(list(log)); self.old_logger(log)
    def after_fit(self): self.learn.logger = self.old_logger


def test_csv_logger_given_to_pix2pix_learner_sees_every_epoch(tmp_path, capsys):
    learn = pix2pix_learner(tiny_dls(), generator=G(), cbs=[CSVLogger(fname='h.csv')], path=tmp_path)
    learn.fit(2, 1e-3)
    r = rows(tmp_path/'h.csv')
    assert r[0][:3] == ['epoch', 'train_loss', 'valid_loss'] and [o[0] for o in r[1:]] == ['0', '1']
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ['epoch', 'train_loss', 'valid_loss']    # the table, once: no raw `print` of the rows
    assert [l.split()[0] for l in out[1:]] == ['0', '1'] and not any(l.startswith('[') for l in out)
    assert learn.logger is print    # the chain is undone after the fit
    learn.fit(1, 1e-3)              # and is set up again in the next one
    assert len(rows(tmp_path/'h.csv')) == 2


@pytest.mark.parametrize('first', [True, False])
def test_every_logger_in_any_order(tmp_path, capsys, first):
    "Loggers set up before the progress callback or after it, on the `Learner` or given to `fit`"
    a, b = Lines(), CSVLogger(fname='h.csv')
    learn = Learner(tiny_dls(), G(), loss_func=L1LossFlat(), cbs=[a, Pix2pixTrainer()] if first else [Pix2pixTrainer()], path=tmp_path)
    learn.remove_cb(ProgressCallback)
    learn.add_cb(SyncFreeProgressCallback(bars=False))
    if not first: learn.add_cb(a)
    learn.fit(2, 1e-3, cbs=[b])
    assert [o[0] for o in a.got] == [0, 1] and [o[0] for o in rows(tmp_path/'h.csv')[1:]] == ['0', '1']
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert learn.logger is print
    learn.fit(1, 1e-3, cbs=[b])   # a second fit chains the same way
    assert [o[0] for o in a.got] == [0] and len(rows(tmp_path/'h.csv')) == 2


def test_a_logger_function_gets_the_rows_too(capsys):
    got = []
    learn = pix2pix_learner(tiny_dls(), generator=G())
    learn.logger = got.append
    learn.fit(2, 1e-3)
    assert [o[0] for o in got] == [0, 1]
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert learn.logger == got.append


@pytest.mark.slow
def test_off_a_terminal_one_line_per_epoch(capsys):
    learn = pix2pix_learner(tiny_dls(), generator=G())
    assert learn.progress.bars is None    # decided at each fit: pytest's stdout is not a terminal
    learn.fit(3, 1e-3)
    out = capsys.readouterr().out
    assert '\r' not in out
    lines = out.splitlines()
    assert len(lines) == 4 and lines[0].split() == ['epoch', 'train_loss', 'valid_loss', 'g_gan', 'g_l1', 'd_real', 'd_fake', 'time']
    assert [l.split()[0] for l in lines[1:]] == ['0', '1', '2']
    # the columns line up with the header's
    assert all(l.index(l.split()[2]) == lines[0].index('valid_loss') for l in lines[1:])


def test_bars_when_asked():
    learn = pix2pix_learner(tiny_dls(), generator=G())
    learn.progress.bars = True
    with learn.no_logging(): learn.fit(1, 1e-3)
    assert learn.progress.show and hasattr(learn.progress, 'pbar')


def test_show_graph_off_a_terminal(capsys):
    "fastai's `ShowGraphCallback` trains along (the graph itself needs a notebook, as with fastprogress on a console)"
    from fastai.callback.progress import ShowGraphCallback
    learn = pix2pix_learner(tiny_dls(), generator=G(), cbs=ShowGraphCallback())
    learn.fit(2, 1e-3)
    assert [l.split()[0] for l in capsys.readouterr().out.splitlines()[1:]] == ['0', '1']
    assert len(learn.recorder.losses) == 4 and all(l.device.type == 'cpu' for l in learn.recorder.losses)
