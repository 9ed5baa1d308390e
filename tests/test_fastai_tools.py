"fastai's everyday tools on the GAN learners: predict, show_results, get_preds, loggers after a failed fit, summary, lr_find."
import contextlib, io, warnings
import pytest, torch
from fastai.basics import Learner, Callback, L1LossFlat
from fastai.callback.progress import CSVLogger
import fastai.callback.schedule  # Learner.lr_find
from gan_callbacks.models import UnetGenerator, PatchDiscriminator
from gan_callbacks.pix2pix import pix2pix_learner
from test_pix2pix import batches, make_dls


def tiny_pix2pix(n=2, **kw):
    torch.manual_seed(0)
    return pix2pix_learner(make_dls(batches(n=n)), UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2), **kw)

class Boom(Callback):
    "Raises in the first training batch"
    def __init__(self, exc=RuntimeError): self.exc = exc
    def after_batch(self):
        if self.training: raise self.exc('boom')

@pytest.mark.parametrize('exc', [RuntimeError, KeyboardInterrupt])
def test_failed_fit_leaves_the_loggers_as_they_were(tmp_path, exc):
    learn = tiny_pix2pix(path=tmp_path)
    before = learn.logger, [(cb, cb.__dict__.get('old_logger')) for cb in learn.cbs]
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(exc): learn.fit(1, 1e-3, cbs=[CSVLogger(), Boom(exc)])
    assert learn.logger is before[0]
    assert [(cb, cb.__dict__.get('old_logger')) for cb in learn.cbs] == before[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out): learn.fit(1, 1e-3, cbs=CSVLogger())   # a plain fit after it: rows once
    rows = [l for l in (tmp_path/'history.csv').read_text().splitlines() if l]
    assert len(rows) == 2 and rows[0].startswith('epoch')
    assert [l.split()[0] for l in out.getvalue().splitlines()] == ['epoch', '0']   # the table printed once
