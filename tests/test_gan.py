"The shared GAN trainer core: the default-optimizer warning, lr_find leaving the discriminators alone, the trainer interface."
import warnings
from copy import deepcopy
import pytest, torch
from fastai.basics import Learner, DataLoaders, L1LossFlat, set_seed
from fastai.optimizer import Adam
import fastai.callback.progress  # Learner.no_bar
import fastai.callback.schedule  # Learner.lr_find
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.trainer.base import AdversarialTrainer
from gan_callbacks.trainer.optim import pix2pix_adam, linear_decay_schedule
from gan_callbacks.gans.pix2pix import Pix2pixTrainer


from helpers import mirror_dls, fit, state as sd, assert_same

def make_dls(n=8, bs=4, size=32): return mirror_dls(n, bs, size)

def learner(opt_func=None, D=True, **kw):
    set_seed(0)
    G = UnetGenerator(num_downs=5, ngf=8)
    extra = {} if opt_func is None else dict(opt_func=opt_func)
    return Learner(make_dls(), G, loss_func=L1LossFlat(), cbs=Pix2pixTrainer(PatchDiscriminator(ndf=8, n_layers=2) if D else None, **kw), **extra)

def opt_warnings(rec): return [w for w in rec if 'pix2pix_adam' in str(w.message)]


def test_fastai_default_adam_warns_once_naming_the_fix():
    learn = learner()   # no opt_func: fastai's Adam
    with pytest.warns(UserWarning) as rec: fit(learn)
    (w,) = opt_warnings(rec)
    msg = str(w.message)
    assert 'generator and the discriminators' in msg and "opt_func=pix2pix_adam" in msg and 'mom 0.9' in msg
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter('always'); fit(learn)
    assert not opt_warnings(rec)   # once
    # the paper's optimizer: no warning; a D given fastai's Adam explicitly is named
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter('always'); fit(learner(pix2pix_adam))
    assert not opt_warnings(rec)
    with pytest.warns(UserWarning, match=r'the discriminators train with .*d_opt_func=pix2pix_adam'): fit(learner(pix2pix_adam, d_opt_func=Adam))


@pytest.mark.parametrize('opt_func', [pix2pix_adam, Adam])
def test_lr_find_leaves_the_discriminator_and_its_optimizer_bitwise_alone(tmp_path, opt_func):
    learn = learner(opt_func)
    learn.path = tmp_path
    with warnings.catch_warnings(): warnings.simplefilter('ignore'); fit(learn, 2)
    t = learn.pix2pix_trainer
    d0, o0, hist0, n0 = sd(t.discriminator), deepcopy(t.d_opt.state_dict()), [h.clone() for h in t.hist], t.n_skipped
    g0 = sd(learn.model)
    with learn.no_bar(), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.lr_find(num_it=10, end_lr=1e3, show_plot=False)   # up to diverging rates
    assert len(learn.recorder.lrs) > 2   # the range test did run
    assert_same(sd(learn.model), g0)   # fastai's own restore of G
    assert_same(sd(t.discriminator), d0)
    assert_same(t.d_opt.state_dict(), o0)
    assert_same(t.hist, hist0)
    assert t.n_skipped == n0

def test_lr_find_before_any_fit_leaves_no_discriminator_behind(tmp_path):
    learn = learner(pix2pix_adam, D=False)
    learn.path = tmp_path
    with learn.no_bar(): learn.lr_find(num_it=6, show_plot=False)
    t = learn.pix2pix_trainer
    assert t.discriminator is None and t.d_opt is None   # as before: the next fit builds a fresh D
    D = PatchDiscriminator(ndf=8, n_layers=2)
    learn.pix2pix_trainer.discriminator, w = D, sd(D)
    with learn.no_bar(): learn.lr_find(num_it=6, show_plot=False)
    assert t.discriminator is D and t.d_opt is None
    assert_same(sd(D), w)


def test_trainer_interface():
    learn = learner(pix2pix_adam)
    fit(learn)
    t = learn.pix2pix_trainer
    assert isinstance(t, AdversarialTrainer)
    assert t.discriminators == {'discriminator': t.discriminator}
    params = {id(p) for g in t.d_opt.opt.param_groups for p in g['params']}
    assert params == {id(p) for p in t.discriminator.parameters()}
    assert t.cols == ('g_gan', 'g_l1', 'd_real', 'd_fake')


def test_schedule_names():
    assert [round(linear_decay_schedule(1., 2, 3)(e/5), 6) for e in range(5)] == [1, 1, 0.75, 0.5, 0.25]
