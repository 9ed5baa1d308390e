"GeneratorEMA: the update is StyleGAN2-ADA's formula, validation and prediction see the average, the training is bitwise what it is without it, and its state carries over."
import pickle
import pytest, torch
import torch.nn.functional as F
from fastai.basics import Callback, Learner
from fastai.callback.tracker import SaveModelCallback
from gan_callbacks.stabilizers.ema import GeneratorEMA, ema_beta, ema_update
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.gans.cyclegan import CycleGANTrainer
from helpers import batches, paired_dls as make_dls, pix2pix_nets as nets, fit, state

class Steps(Callback):
    "The generator's weights after each training batch (once every callback before it ran) and those validation sees"
    order = 30
    def before_fit(self): self.after, self.seen = [], []
    def after_batch(self):
        if self.training: self.after.append(state_params(self.learn.model))
    def before_validate(self): self.seen.append(state_params(self.learn.model))

def state_params(m): return [p.detach().clone() for p in m.parameters()]

def pix2pix(cbs=(), valid=None):
    G, D = nets()
    data = batches(n=3, bs=2)
    return Learner(make_dls(data, valid), G, loss_func=F.l1_loss, opt_func=pix2pix_adam, cbs=[Pix2pixTrainer(D), *cbs])

def test_beta_is_the_half_life_form():
    assert ema_beta(32, 10.) == 0.5 ** (32 / 10_000)
    assert ema_beta(32, 10., cur_nimg=1000, ema_rampup=0.05) == 0.5 ** (32 / 50)
    assert ema_beta(32, 10., cur_nimg=10**6, ema_rampup=0.05) == 0.5 ** (32 / 10_000)
    assert ema_beta(32, 0.) == 0.5 ** (32 / 1e-8) == 0.

def test_update_equals_formula_and_training_is_unchanged():
    plain = pix2pix()
    fit(plain, 2, 2e-4)
    ema, steps = GeneratorEMA(ema_kimg=0.01, ema_rampup=0.5), Steps()
    learn = pix2pix([ema, steps])
    init = state_params(learn.model)
    fit(learn, 2, 2e-4)
    # training: bitwise the same weights, discriminator and training losses
    for a, b in zip(state(plain.model).values(), state(learn.model).values()): assert torch.equal(a, b)
    for a, b in zip(state(plain.pix2pix_trainer.discriminator).values(), state(learn.pix2pix_trainer.discriminator).values()):
        assert torch.equal(a, b)
    assert [v[0] for v in plain.recorder.values] == [v[0] for v in learn.recorder.values]   # train loss
    # the average: p.lerp(p_ema, beta) after every generator step, beta from the images seen before it
    avg, nimg = init, 0
    for ps in steps.after:
        beta = ema_beta(2, 0.01, nimg, 0.5)
        avg = [p.lerp(e, beta) for p, e in zip(ps, avg)]; nimg += 2
    for a, e in zip(avg, ema.averages): assert torch.equal(a, e)
    assert ema.cur_nimg == 2 * 6
    # validation saw the average, the model holds the training weights again
    for a, e in zip(steps.seen[-1], ema.averages): assert torch.equal(a, e)
    assert not all(torch.equal(a, p) for a, p in zip(steps.seen[-1], learn.model.parameters()))
    assert plain.recorder.values[-1][1] != learn.recorder.values[-1][1]

def test_validation_loss_is_the_averages():
    ema = GeneratorEMA(ema_kimg=0.01)
    learn = pix2pix([ema])
    fit(learn, 1, 2e-4)
    x, y = (torch.stack(t) for t in zip(*learn.dls.valid_ds))
    with ema.applied() as G:
        G.eval()
        with torch.no_grad(): want = F.l1_loss(G(x), y).item()
    assert abs(learn.recorder.values[-1][1] - want) < 1e-6
    assert abs(learn.validate()[0] - want) < 1e-6
    preds, _ = learn.get_preds()
    with ema.applied() as G, torch.no_grad(): torch.testing.assert_close(preds, G(x))

def test_skip_keeps_the_average():
    ema = GeneratorEMA(ema_kimg=0.01)
    learn = pix2pix([ema])
    fit(learn, 1, 2e-4)
    before = [e.clone() for e in ema.averages]
    with torch.no_grad():
        for p in learn.model.parameters(): p.add_(1.)
    ema.update(2, skip=torch.tensor(True))
    for a, b in zip(before, ema.averages): assert torch.equal(a, b)
    ema.update(2, skip=torch.tensor(False))
    beta = ema_beta(2, 0.01, ema.cur_nimg - 2)
    for a, b, p in zip(before, ema.averages, learn.model.parameters()): assert torch.equal(b, p.detach().lerp(a, beta))

def test_checkpoint_resume_is_exact(tmp_path):
    "Interrupted and resumed from a `GANCheckpoint`: the same average as without the interruption"
    from helpers import make_learner, quiet_fit as run, Interrupt
    from gan_callbacks.callback.checkpoint import GANCheckpoint
    ref = make_learner(tmp_path/'ref', cbs=[ref_ema := GeneratorEMA(ema_kimg=0.02, ema_rampup=0.5)])
    run(ref)
    learn = make_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=2, batch=1), GeneratorEMA(ema_kimg=0.02, ema_rampup=0.5)])
    with pytest.raises(KeyboardInterrupt): run(learn)
    resumed = make_learner(tmp_path, seed=1234, cbs=[GANCheckpoint(resume=True), ema := GeneratorEMA(ema_kimg=0.02, ema_rampup=0.5)])
    run(resumed)
    assert ema.cur_nimg == ref_ema.cur_nimg == 4 * 16
    for a, b in zip(ema.averages, ref_ema.averages): assert torch.equal(a, b)
    for a, b in zip(resumed.model.parameters(), ref.model.parameters()): assert torch.equal(a, b)
    assert [v[1:] for v in resumed.recorder.values] == [v[1:] for v in ref.recorder.values]   # validation of the averages
    sd = pickle.loads(pickle.dumps(ema.state_dict()))
    make_learner(tmp_path/'other', ngf=4, cbs=[o := GeneratorEMA()])
    with pytest.raises(ValueError, match='does not fit this model'): o.load_state_dict(sd)

def test_lr_find_leaves_the_average():
    ema = GeneratorEMA(ema_kimg=0.01)
    learn = pix2pix([ema]); fit(learn, 1, 2e-4)
    before, n = [e.clone() for e in ema.averages], ema.cur_nimg
    with learn.no_bar(), learn.no_logging(): learn.lr_find(num_it=3, show_plot=False)
    assert ema.cur_nimg == n and all(torch.equal(a, b) for a, b in zip(before, ema.averages))

def test_crash_in_validation_puts_weights_back_at_next_fit():
    class Crash(Callback):
        order = 30
        def before_validate(self): raise RuntimeError('boom')
    ema = GeneratorEMA(ema_kimg=0.01)
    learn = pix2pix([ema, crash := Crash()])
    with pytest.raises(RuntimeError, match='boom'): fit(learn, 1, 2e-4)
    trained = ema._backup
    assert trained is not None   # the average is in the model, the training weights aside...
    learn.remove_cb(crash)
    ema.restore()
    for a, p in zip(trained, learn.model.parameters()): assert torch.equal(a, p)   # ...and back

def test_cyclegan_both_generators_averaged(tmp_path):
    from helpers import cyclegan_resume_learner as resume_learner
    learn = resume_learner(tmp_path, cbs=[ema := GeneratorEMA(ema_kimg=0.01)])
    fit(learn, 1, 2e-4)
    assert len(ema.averages) == len(list(learn.model.parameters()))
    assert {n.split('.')[0] for n in ema.names} == {n.split('.')[0] for n, _ in learn.model.named_parameters()}
    assert len({n.split('.')[0] for n in ema.names}) == 2   # G_A and G_B

def test_under_gradient_accumulation_the_average_steps_with_the_generator():
    "With fastai's `GradientAccumulation`, G steps once per sum of batches: the average steps then, over the sum's images"
    from fastai.callback.training import GradientAccumulation
    G, D = nets()
    data = batches(n=4, bs=2)
    ema, steps = GeneratorEMA(ema_kimg=0.01, ema_rampup=0.5), Steps()
    learn = Learner(make_dls(data), G, loss_func=F.l1_loss, opt_func=pix2pix_adam,
                    cbs=[Pix2pixTrainer(D), GradientAccumulation(n_acc=4), ema, steps])
    init = state_params(learn.model)
    fit(learn, 1, 2e-4)
    moved = [not all(torch.equal(a, b) for a, b in zip(x, y)) for x, y in zip([init] + steps.after, steps.after)]
    assert moved == [False, True, False, True]   # G steps at every second batch
    avg, nimg = init, 0
    for ps in steps.after[1::2]:   # after each generator step: one step of the average, over 4 images
        beta = ema_beta(4, 0.01, nimg, 0.5)
        avg = [p.lerp(e, beta) for p, e in zip(ps, avg)]; nimg += 4
    for a, e in zip(avg, ema.averages): assert torch.equal(a, e)
    assert ema.cur_nimg == 8
