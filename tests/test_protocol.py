"A trainer writes its iteration and nothing else: augmentation, R1/R2, statistics, skip flags and the end of the iteration are the base's."
import inspect
from helpers import tiny_learner
from fastai.callback.core import Callback
from gan_callbacks.v1.bridge import StateDictCallback
import pytest, torch
from torch import nn
from fastai.basics import Learner, DataLoaders, MSELossFlat, set_seed
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.nets.losses import GANLoss
from gan_callbacks.trainer.base import AdversarialTrainer
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.stabilizers import recipes
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.gans.cyclegan import CycleGANTrainer
from gan_callbacks.gans.cut import CUTTrainer
from gan_callbacks.gans.pix2pixhd import Pix2pixHDTrainer

class Minimal(AdversarialTrainer):
    "The guide's smallest trainer: D's update, then G's, the losses by name; no protocol call"
    d_names, g_cols, d_cols = ('discriminator',), ('g',), ('d',)
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.discriminator, self.gan_loss = None, GANLoss('lsgan')
    def make_discriminator(self, name, in_ch): return nn.Conv2d(in_ch, 1, 3)
    def on_batch_end(self, last_target, last_output, **kwargs):
        D = self.setup_discriminators({'discriminator': last_target.shape[1]})['discriminator']
        self.d_requires_grad(True); self.d_zero_grad()
        with self.autocast(): d = self.gan_loss(D(last_target), True) + self.gan_loss(D(last_output.detach()), False)
        self.step_d(d)
        self.d_requires_grad(False)
        with self.autocast(): g = self.gan_loss(D(last_output), True, for_discriminator=False)
        self.step_g(g)
        self.log_losses(g=g, d=d)

def learner(trainer, n=16):
    set_seed(0)
    x = torch.rand(n, 3, 16, 16) * 2 - 1
    items = list(zip(x, x.flip(-1)))
    dls = DataLoaders.from_dsets(items, items[:4], bs=4, device='cpu')
    return Learner(dls, nn.Conv2d(3, 3, 3, padding=1), loss_func=MSELossFlat(), opt_func=pix2pix_adam, cbs=trainer)

def fit(learn, epochs=1):
    with learn.no_bar(), learn.no_logging(): learn.fit(epochs, 1e-3)
    return learn

class Spy:
    "Records what D's forward receives, after the trainer's hooks"
    def __init__(self): self.seen = []
    def __call__(self, module, args): self.seen.append(args[0].detach().clone())

def test_diffaugment_reaches_d_without_a_call():
    spy, t = Spy(), Minimal(diffaugment='cutout')
    learn = learner(t)
    t.discriminator = nn.Conv2d(3, 1, 3)
    t.discriminator.register_forward_pre_hook(spy)
    fit(learn)
    assert len(spy.seen) == 3 * 4   # D's real, D's fake, G's fake in each of 4 iterations
    holes = [(x == 0).all(1).flatten(1).any(1).all() for x in spy.seen]   # cutout: a zeroed square in every image
    assert all(holes)
    spy2, t2 = Spy(), Minimal()
    learn2 = learner(t2)
    t2.discriminator = nn.Conv2d(3, 1, 3)
    t2.discriminator.register_forward_pre_hook(spy2)
    fit(learn2)
    assert not any((x == 0).all(1).flatten(1).any(1).all() for x in spy2.seen)   # off: D sees the images as they are
    spy.seen.clear(); learn.validate()
    assert spy.seen == []   # validation runs no iteration

def test_lazy_r1_steps_at_the_interval(monkeypatch):
    calls = []
    real_r1 = recipes.r1_penalty
    def r1(D, x, cond=None, gamma=10.):
        calls.append(x.detach().clone()); return real_r1(D, x, cond, gamma)
    monkeypatch.setattr(recipes, 'r1_penalty', r1)
    t = Minimal(r1_gamma=1., reg_interval=2)
    learn = fit(learner(t), epochs=2)   # 8 D steps
    assert t.stabilizers.state_dict()['lazy_reg']['n_steps'] == 8
    assert len(calls) == 4   # one penalty step every 2 D steps
    x = learn.dls.train_ds[0][1]
    assert any(c.shape[1:] == x.shape for c in calls)   # at the reals D judged

def test_r1_needs_what_d_judged():
    class Blind(Minimal):
        def on_batch_end(self, last_target, last_output, **kwargs):
            D = self.setup_discriminators({'discriminator': last_target.shape[1]})['discriminator']
            self.d_requires_grad(True); self.d_zero_grad()
            d = (D(last_target) - 1).pow(2).mean() + D(last_output.detach()).pow(2).mean()   # not through `self.gan_loss`
            self.step_d(d)
            self.log_losses(g=d, d=d)
    with pytest.raises(ValueError, match='gan_loss'): fit(learner(Blind(r1_gamma=1., reg_interval=1)))

def test_an_iteration_without_its_losses_says_so():
    class Quiet(Minimal):
        def on_batch_end(self, last_target, last_output, **kwargs): pass
    with pytest.raises(ValueError, match='log_losses'): fit(learner(Quiet()))
    class Half(Minimal):
        def on_batch_end(self, last_target, last_output, **kwargs): self.log_losses(g=torch.zeros(()))
    with pytest.raises(ValueError, match='lacks d'): fit(learner(Half()))

def test_a_skipped_update_skips_the_iteration():
    "A non-finite D loss: the iteration is counted as skipped without the trainer passing any flag, and D's statistics are put back"
    class Nan(Minimal):
        def make_discriminator(self, name, in_ch): return nn.Sequential(nn.Conv2d(in_ch, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 1, 1))
        def on_batch_end(self, last_target, last_output, **kwargs):
            D = self.setup_discriminators({'discriminator': last_target.shape[1]})['discriminator']
            self.d_requires_grad(True); self.d_zero_grad()
            d = self.gan_loss(D(last_target), True) * float('nan')
            self.step_d(d)
            self.log_losses(g=d.detach(), d=d.detach())
    t = Nan(max_nonfinite=None)
    learn = learner(t)
    fit(learn)
    bn = t.discriminator[1]
    assert t.n_skipped == 4 and int(bn.num_batches_tracked) == 0 and torch.equal(bn.running_mean, torch.zeros(4))

def test_no_trainer_makes_a_protocol_call():
    for cls in (Pix2pixTrainer, CycleGANTrainer, CUTTrainer, Pix2pixHDTrainer, Minimal):
        src = inspect.getsource(cls.on_batch_end)
        assert not [c for c in ('d_input(', 'd_regularize', 'norm_stats', 'leave_forward', 'end_iteration') if c in src], cls.__name__
        assert len(src.splitlines()) <= 30, (cls.__name__, len(src.splitlines()))


def test_a_trainer_given_to_a_second_learner_moves_there(tmp_path):
    from fastai.learner import Learner
    from gan_callbacks.trainer.base import find_trainer
    l1 = tiny_learner(tmp_path)
    t = find_trainer(l1)
    l2 = Learner(l1.dls, l1.model, loss_func=l1.loss_func, cbs=[t])   # a notebook cell run twice
    fit(l2, 1)
    assert t.learn is l2 and {'g_gan', 'd_real', 'd_fake'} <= set(l2.recorder.metric_names)
    with pytest.raises(Exception, match=r"this Learner's Pix2pixTrainer was given to another Learner since .* `Pix2pixTrainer\(\)` again"):
        fit(l1, 1)   # not a silent L1 regression


class SeenLoss(Callback):
    "What a callback of the default order reads as the batch's loss"
    def __init__(self): self.got = []
    def after_batch(self):
        if self.training: self.got.append(float(self.learn.loss))

class V1SeenLoss(StateDictCallback):
    def __init__(self): super().__init__(); self.got = []
    def on_batch_end(self, last_loss, train, **kwargs):
        if train: self.got.append(float(last_loss))

@pytest.mark.parametrize('model', ['cyclegan', 'cut'])
def test_callbacks_of_the_default_order_see_the_real_loss(tmp_path, model):
    from gan_callbacks.data.samples import sample_unpaired
    from gan_callbacks.data.folders import UnpairedDataLoaders
    from gan_callbacks.nets.networks import ResnetGenerator, PatchDiscriminator
    from gan_callbacks.gans.cyclegan import cyclegan_learner
    from gan_callbacks.gans.cut import cut_learner
    dls = UnpairedDataLoaders.from_folder(sample_unpaired(tmp_path/'u', n_train=4, n_test=2, size=32), load_size=32, crop_size=32, bs=2, device='cpu')
    g, d = lambda: ResnetGenerator(3, 3, ngf=4, n_blocks=1), lambda: PatchDiscriminator(3, ndf=8, n_layers=2, norm='instance')
    v2, v1, last = SeenLoss(), V1SeenLoss(), SeenLoss()
    last.order = 49   # just before the Recorder: the loss it logs
    cbs = [v2, v1, last]   # given before the trainer, which the learner function adds after them
    learn = cyclegan_learner(dls, g(), g(), d(), d(), pool_size=2, cbs=cbs) if model == 'cyclegan' else cut_learner(dls, g(), d(), cbs=cbs)
    fit(learn)
    assert len(v2.got) == 2 and v2.got == v1.got == last.got and min(v2.got) > 0.5
