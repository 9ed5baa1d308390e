"CycleGANTrainer against a plain PyTorch CycleGAN loop, the image pool, exact resume with full pools, and bad input."
import itertools, random, warnings, pickle
from copy import deepcopy
import pytest, torch
import torch.nn.functional as F
from fastai.basics import Learner, DataLoaders, Callback, set_seed, L
from fastai.optimizer import SGD
import fastai.callback.progress  # Learner.no_bar
import fastai.callback.schedule  # Learner.lr_find
from gan_callbacks.nets.networks import ResnetGenerator, PatchDiscriminator
from gan_callbacks.trainer.base import AdversarialTrainer
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.trainer.image_pool import ImagePool
from gan_callbacks.gans.cyclegan import CycleGANTrainer, CycleGANModel, cyclegan_learner
from gan_callbacks.callback.checkpoint import GANCheckpoint
from helpers import Unpaired, unpaired_resume_dls, batches as rand_batches, unpaired_dls as make_dls, cyclegan_nets as nets, \
    state, assert_close, cyclegan_resume_learner as resume_learner


def batches(n=3, bs=2, size=16, seed=0, ch=(3, 3)): return rand_batches(n, bs, size, *ch, seed=seed)


# --- the image pool

class RefPool:
    "The reference's ImagePool, written out"
    def __init__(self, size): self.size, self.n, self.images = size, 0, []
    def query(self, images):
        if self.size == 0: return images
        res = []
        for im in images:
            im = im.detach()[None]
            if self.n < self.size: self.n += 1; self.images.append(im); res.append(im)
            elif random.uniform(0, 1) > 0.5:
                i = random.randint(0, self.size - 1)
                res.append(self.images[i].clone()); self.images[i] = im
            else: res.append(im)
        return torch.cat(res)

def test_pool_fills_then_swaps_half_the_time_like_the_reference():
    ours, ref = ImagePool(5), RefPool(5)
    xs = [torch.arange(i*2, i*2+2.).view(2, 1, 1, 1) for i in range(200)]
    random.seed(3); out = [ours.query(x) for x in xs]
    random.seed(3); exp = [ref.query(x) for x in xs]
    for o, e in zip(out, exp): assert torch.equal(o, e)
    assert all(torch.equal(o, x) for o, x in zip(out[:2], xs[:2])) and len(ours) == 5   # filling: the new images
    assert torch.equal(torch.cat(ours.images), torch.cat(ref.images))
    swapped = sum(int(not torch.equal(o[k], x[k])) for o, x in zip(out[3:], xs[3:]) for k in range(2))
    assert 0.4 < swapped / (2 * 197) < 0.6   # a stored image half of the time
    assert torch.equal(ImagePool(0).query(xs[0]), xs[0]) and len(ImagePool(0)) == 0

def test_pool_state_and_nonfinite_fakes():
    p = ImagePool(3)
    random.seed(0); p.query(torch.rand(2, 3, 4, 4))
    q = ImagePool(3); q.load_state_dict(p.state_dict())
    assert len(q) == 2 and all(torch.equal(a, b) for a, b in zip(p.images, q.images))
    with pytest.raises(ValueError, match='size 3.*size 4'): ImagePool(4).load_state_dict(p.state_dict())
    p.query(torch.full((1, 3, 4, 4), float('nan')))   # fills the last place: never with a NaN image
    assert all(im.isfinite().all() for im in p.images)


# --- parity with a plain PyTorch CycleGAN (DESIGN §9)

def plain_cyclegan(GA, GB, DA, DB, data, lr, opt, pool_size, lambda_a=10., lambda_b=10., lambda_idt=0.5):
    GA, GB, DA, DB = (deepcopy(m).train() for m in (GA, GB, DA, DB))
    def mk(ps):
        if opt == 'adam': return torch.optim.Adam(ps, lr=lr, betas=(0.5, 0.999), eps=1e-8, fused=True)
        return torch.optim.SGD(ps, lr=lr)
    opt_g, opt_d = mk(itertools.chain(GA.parameters(), GB.parameters())), mk(itertools.chain(DA.parameters(), DB.parameters()))
    pool_A, pool_B = RefPool(pool_size), RefPool(pool_size)
    gan = lambda p, real: F.mse_loss(p, torch.full_like(p, float(real)))   # lsgan
    for real_A, real_B in data:
        fake_B = GA(real_A); rec_A = GB(fake_B); fake_A = GB(real_B); rec_B = GA(fake_A)
        DA.requires_grad_(False); DB.requires_grad_(False); opt_g.zero_grad()
        loss_idt_A = F.l1_loss(GA(real_B), real_B) * lambda_b * lambda_idt
        loss_idt_B = F.l1_loss(GB(real_A), real_A) * lambda_a * lambda_idt
        loss_G = (gan(DA(fake_B), True) + gan(DB(fake_A), True) + F.l1_loss(rec_A, real_A) * lambda_a
                  + F.l1_loss(rec_B, real_B) * lambda_b + loss_idt_A + loss_idt_B)
        loss_G.backward(); opt_g.step()
        DA.requires_grad_(True); DB.requires_grad_(True); opt_d.zero_grad()
        fB = pool_B.query(fake_B)
        (0.5 * (gan(DA(real_B), True) + gan(DA(fB.detach()), False))).backward()
        fA = pool_A.query(fake_A)
        (0.5 * (gan(DB(real_A), True) + gan(DB(fA.detach()), False))).backward()
        opt_d.step()
    return GA, GB, DA, DB

@pytest.mark.parametrize('opt', ['sgd', 'adam'])
def test_trainer_matches_plain_loop(opt):
    data, lr = batches(n=3), (0.05 if opt == 'sgd' else 1e-3)
    GA, GB, DA, DB = nets()
    random.seed(0)
    ref = plain_cyclegan(GA, GB, DA, DB, data, lr, opt, pool_size=2)   # batch 1 fills the pools, 2 and 3 swap
    learn = cyclegan_learner(make_dls(data, shuffle=False), *(deepcopy(m) for m in (GA, GB, DA, DB)), pool_size=2,
                             opt_func=pix2pix_adam if opt == 'adam' else SGD)
    random.seed(0)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, lr)
    t = learn.cycle_gan_trainer
    for ours, theirs in zip((learn.model.g_a, learn.model.g_b, t.d_a, t.d_b), ref): assert_close(state(ours), state(theirs), 1e-5)
    assert not torch.equal(state(learn.model.g_a)['model.1.weight'], state(GA)['model.1.weight'])   # it trained
    assert not torch.equal(state(t.d_b)['model.0.weight'], state(DB)['model.0.weight'])
    assert len(t.pool_a) == len(t.pool_b) == 2
    assert learn.recorder.metric_names[3:-1] == ['g_a', 'g_b', 'cycle_a', 'cycle_b', 'idt_a', 'idt_b', 'd_a', 'd_b']
    assert all(isinstance(v, float) for v in learn.recorder.values[-1])


def test_one_optimizer_over_both_discriminators_on_the_schedule():
    lrs = []
    class Rec(Callback):
        order = 70
        def after_batch(self):
            if self.training: lrs.append((self.opt.hypers[-1]['lr'], self.cycle_gan_trainer.d_opt.hypers[0]['lr']))
    GA, GB, DA, DB = nets()
    learn = cyclegan_learner(make_dls(batches(n=2)), GA, GB, DA, DB, cbs=Rec(), trainer_kwargs=dict(d_lr_mult=0.5))
    with learn.no_bar(), learn.no_logging(): learn.fit_gan(1, 1, lr=1e-3)
    t = learn.cycle_gan_trainer
    assert isinstance(t, AdversarialTrainer) and t.discriminators == {'d_a': DA, 'd_b': DB}
    assert {id(p) for g in t.d_opt.opt.param_groups for p in g['params']} == {id(p) for D in (DA, DB) for p in D.parameters()}
    assert [round(g / 1e-3, 6) for g, _ in lrs] == [1, 1, 0.5, 0.5] and all(d == pytest.approx(0.5 * g) for g, d in lrs)


def test_validation_and_lr_find_leave_the_trainer_alone(tmp_path):
    GA, GB, DA, DB = nets()
    learn = cyclegan_learner(make_dls(batches(n=2)), GA, GB, DA, DB, pool_size=3, path=tmp_path)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    t = learn.cycle_gan_trainer
    before = deepcopy(t.state_dict())
    with learn.no_bar():
        learn.validate()
        learn.lr_find(num_it=6, end_lr=10, show_plot=False)
    after = t.state_dict()
    for k in ('d_a', 'd_b'): assert_close(after['discriminators'][k], before['discriminators'][k], 0)
    assert str(after['d_opt']) == str(before['d_opt'])
    for k in ('a', 'b'): assert torch.equal(after['pools'][k]['images'], before['pools'][k]['images'])


def test_translation_both_ways_and_export_without_discriminators(tmp_path):
    GA, GB, DA, DB = nets()
    learn = cyclegan_learner(make_dls(batches(n=1)), GA, GB, DA, DB, path=tmp_path)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    x = batches(n=1)[0][0]
    m = learn.model.eval()
    with torch.no_grad():
        assert torch.equal(m(x), GA(x))
        m.direction = 'BtoA'; assert torch.equal(m(x), GB(x))
    m.direction = 'sideways'
    with pytest.raises(ValueError, match="'AtoB' or 'BtoA'"): m(x)
    m.direction = 'AtoB'
    learn.export(tmp_path/'cg.pkl')
    from fastai.learner import load_learner
    l2 = load_learner(tmp_path/'cg.pkl')
    t2 = l2.cycle_gan_trainer
    assert t2.d_a is None and t2.d_b is None and t2.d_opt is None and len(t2.pool_a) == 0
    assert l2.loss_func.__self__ is t2   # the loss still belongs to the trainer
    with torch.no_grad(): assert torch.equal(l2.model.eval()(x), GA(x))


# --- bad input

def test_identity_loss_needs_equal_channels():
    data = batches(n=1, ch=(1, 3))
    GA, GB, DA, DB = nets(ch=(1, 3))
    with pytest.raises(ValueError, match=r'domain.*1.*3.*set lambda_idt=0'): cyclegan_learner(make_dls(data), GA, GB, DA, DB)
    # a Learner built by hand fails at the first batch, before any update
    t = CycleGANTrainer(DA, DB)
    learn = Learner(make_dls(data), CycleGANModel(GA, GB), loss_func=t.generator_loss, opt_func=pix2pix_adam, cbs=t)
    w = state(GA)
    with pytest.raises(ValueError, match='set lambda_idt=0'), learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert_close(state(GA), w, 0)
    learn = cyclegan_learner(make_dls(data), GA, GB, DA, DB, lambda_idt=0)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert learn.model.identity is False and len(learn.model(*data[0])) == 4   # no identity outputs

def test_paired_batches_and_a_foreign_loss_are_clear_errors():
    data = batches(n=1)
    items = list((a, b) for A, B in data for a, b in zip(A, B))   # n_inp=1: (input, target) pairs
    GA, GB, DA, DB = nets()
    learn = cyclegan_learner(DataLoaders.from_dsets(items, items, bs=2, device='cpu'), GA, GB, DA, DB, lambda_idt=0)
    with pytest.raises(ValueError, match=r'two model inputs.*n_inp=2'), learn.no_bar(): learn.fit(1, 1e-3)
    learn = Learner(make_dls(data), CycleGANModel(GA, GB), loss_func=F.l1_loss, cbs=CycleGANTrainer(DA, DB))
    with pytest.raises(ValueError, match='loss_func=trainer.generator_loss'), learn.no_bar(): learn.fit(1, 1e-3)


# --- exact resume with full pools

from helpers import Interrupt, run_gan as run

def test_interrupt_and_resume_with_full_pools_is_bitwise_identical(tmp_path):
    ref = resume_learner(tmp_path/'ref')
    run(ref)
    learn = resume_learner(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)])
    with pytest.raises(KeyboardInterrupt): run(learn)
    ck = torch.load(tmp_path/'models'/'gan_epoch0.pth', weights_only=True)
    assert ck['trainer']['pools']['a']['images'].shape[0] == 3   # saved full
    resumed = resume_learner(tmp_path, seed=1234, cbs=GANCheckpoint(resume=True))
    assert not torch.equal(next(resumed.model.parameters()), next(ref.model.parameters()))
    run(resumed)
    assert resumed.gan_checkpoint.resumed_from.name == 'gan_epoch0.pth'
    t, t0 = resumed.cycle_gan_trainer, ref.cycle_gan_trainer
    assert_close(state(resumed.model), state(ref.model), 0)
    for k in ('d_a', 'd_b'): assert_close(state(getattr(t, k)), state(getattr(t0, k)), 0)
    assert str(resumed.opt.state_dict()) == str(ref.opt.state_dict()) and str(t.d_opt.state_dict()) == str(t0.d_opt.state_dict())
    for p, p0 in ((t.pool_a, t0.pool_a), (t.pool_b, t0.pool_b)): assert torch.equal(torch.cat(p.images), torch.cat(p0.images))
    assert all(torch.equal(a, b) for a, b in zip(t.hist, t0.hist)) and len(t.hist) == len(t0.hist) == 12
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]
