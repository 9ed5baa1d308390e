"pix2pixHD's multi-scale discriminator and feature matching in pix2pix and CycleGAN: the formula inside G's loss, the D built, the columns, exact resume, the command line."
import pytest, torch
import torch.nn.functional as F
from fastai.basics import Learner, DataLoaders, L1LossFlat, set_seed, L
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator, PatchDiscriminator, init_weights
from gan_callbacks.nets.hd_networks import MultiscaleDiscriminator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer, pix2pix_learner
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.callback.checkpoint import GANCheckpoint
from helpers import Interrupt, RandFlip, unpaired_resume_dls, run_gan, fit, state, assert_same

def paired_dls(n=16, bs=4, size=32):
    g = torch.Generator().manual_seed(0)
    A = torch.rand(n, 3, size, size, generator=g) * 2 - 1
    items = list(zip(A, -A.flip(-2)))
    return DataLoaders.from_dsets(items, items[:4], bs=bs, after_batch=RandFlip(), num_workers=0, device='cpu')

def quiet_fit(learn): fit(learn, warn=False)

def hd_feat_loss(pred_fake, pred_real, n_layers, num_D, lambda_feat):
    "pix2pixHD_model.py's loss_G_GAN_Feat, written out"
    feat_weights, D_weights, loss = 4.0 / (n_layers + 1), 1.0 / num_D, 0
    for i in range(num_D):
        for j in range(len(pred_fake[i]) - 1):
            loss = loss + D_weights * feat_weights * F.l1_loss(pred_fake[i][j], pred_real[i][j].detach()) * lambda_feat
    return loss

def lsgan_g(preds): return sum(F.mse_loss(p[-1], torch.ones_like(p[-1])) for p in preds)
def bce_g(preds): return sum(F.binary_cross_entropy_with_logits(p[-1], torch.ones_like(p[-1])) for p in preds)


def test_pix2pix_g_loss_holds_the_pix2pixhd_feature_matching_term():
    seen = []
    class Spy(Pix2pixTrainer):
        def step_g(self, loss):   # D updated and frozen: G's loss by hand, from the same D
            A, B, fake = self.learn.xb[0], self.learn.yb[0], self.learn.pred
            D = self.discriminator
            with torch.no_grad():
                pf, pr = D(torch.cat([A, fake], 1)), D(torch.cat([A, B], 1))
                fm = hd_feat_loss(pf, pr, 3, 2, 10.)
                seen.append((loss.detach().clone(), bce_g(pf) + 100. * F.l1_loss(fake, B) + fm, fm))
            return super().step_g(loss)
        def log_losses(self, **losses):
            seen[-1] += (losses['g_gan_feat'].detach().clone(),)
            return super().log_losses(**losses)
    set_seed(0)
    learn = Learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Spy(num_D=2, lambda_feat=10.))
    quiet_fit(learn)
    D = learn.spy.discriminator
    assert isinstance(D, MultiscaleDiscriminator) and D.num_D == 2 and D.get_interm_feat and D.in_ch == 6
    assert len(seen) == 4
    for loss, want, fm, logged in seen:
        assert fm > 0 and torch.allclose(loss, want, rtol=1e-5) and torch.allclose(logged, fm, rtol=1e-5)
    assert learn.spy.cols == ('g_gan', 'g_l1', 'g_gan_feat', 'd_real', 'd_fake')
    assert 'g_gan_feat' in learn.recorder.metric_names

def test_multiscale_d_alone_and_paper_default():
    learn = pix2pix_learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8), num_D=3)
    quiet_fit(learn)
    t = learn.pix2pix_trainer
    D = t.discriminator
    assert isinstance(D, MultiscaleDiscriminator) and D.num_D == 3 and not D.get_interm_feat and t.cols == ('g_gan', 'g_l1', 'd_real', 'd_fake')
    assert type(pix2pix_learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8)).pix2pix_trainer.make_discriminator('discriminator', 6)) is PatchDiscriminator
    with pytest.raises(ValueError, match='lambda_feat needs a discriminator returning'):
        quiet_fit(pix2pix_learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8), PatchDiscriminator(6, ndf=8, n_layers=2), lambda_feat=1.))
    with pytest.raises(ValueError, match="gan_mode='wgangp'"): Pix2pixTrainer(gan_mode='wgangp', num_D=2)
    G = init_weights(ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True), 'xavier')
    with pytest.raises(ValueError, match='CUTTrainer does not build a multi-scale discriminator'): cut_learner(unpaired_resume_dls(), G, num_D=2)


def cyc(path='.', seed=0, cbs=None, **kw):
    "Tiny CycleGAN whose discriminators are built at the first batch"
    set_seed(seed)
    torch.manual_seed(1)
    gs = ResnetGenerator(3, 3, ngf=4, n_blocks=1), ResnetGenerator(3, 3, ngf=4, n_blocks=1)
    return cyclegan_learner(unpaired_resume_dls(), *gs, pool_size=3, cbs=cbs, path=path, trainer_kwargs=kw)

def test_cyclegan_feature_matching_terms_and_columns():
    learn = cyc(num_D=2, lambda_feat=5.)
    quiet_fit(learn)
    t = learn.cycle_gan_trainer
    assert all(isinstance(D, MultiscaleDiscriminator) and D.num_D == 2 and D.get_interm_feat for D in (t.d_a, t.d_b))
    assert t.cols == ('g_a', 'g_b', 'cycle_a', 'cycle_b', 'idt_a', 'idt_b', 'feat_a', 'feat_b', 'd_a', 'd_b')
    assert {'feat_a', 'feat_b'} <= set(learn.recorder.metric_names)
    real_A, real_B = learn.dls.one_batch()
    with torch.no_grad():
        out = learn.model(real_A, real_B)
        terms = t.g_losses(out, real_A, real_B)   # outside training: D sees the images as they are
        fake_B, fake_A = out[0], out[2]
        pf_b, pf_a = t.d_a(fake_B), t.d_b(fake_A)
        want_a, want_b = hd_feat_loss(pf_b, t.d_a(real_B), 3, 2, 5.), hd_feat_loss(pf_a, t.d_b(real_A), 3, 2, 5.)
    assert len(terms) == 8 and torch.allclose(terms[6], want_a, rtol=1e-5) and torch.allclose(terms[7], want_b, rtol=1e-5)
    assert torch.allclose(terms[0], lsgan_g(pf_b), rtol=1e-5) and torch.allclose(terms[1], lsgan_g(pf_a), rtol=1e-5)


# --- exact resume with the options on: the built multi-scale discriminators come back from the checkpoint

def p2p(path, seed=0, cbs=None, **kw):
    set_seed(seed)
    G = UnetGenerator(num_downs=5, ngf=8, use_dropout=True)
    return Learner(paired_dls(), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=[Pix2pixTrainer(**kw)] + L(cbs), path=path)

def same(*pairs):
    "Each pair of modules has bitwise-equal state"
    for a, b in pairs: assert_same(state(a), state(b))
    return True

def uninterrupted_and_resumed(make, path, seed, **kw):
    "A fit of `make`'s learner, and the same fit interrupted in epoch 1 and resumed in a new learner seeded `seed`"
    ref = make(path/'ref', **kw)
    run_gan(ref)
    with pytest.raises(KeyboardInterrupt): run_gan(make(path, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)], **kw))
    resumed = make(path, seed=seed, cbs=GANCheckpoint(resume=True), **kw)
    run_gan(resumed)
    return ref, resumed

def test_pix2pix_feature_matching_resumes_bitwise(tmp_path):
    ref, resumed = uninterrupted_and_resumed(p2p, tmp_path, 1234, num_D=2, lambda_feat=10., diffaugment='color,translation')
    t, t0 = resumed.pix2pix_trainer, ref.pix2pix_trainer
    assert same((resumed.model, ref.model), (t.discriminator, t0.discriminator))
    assert str(t.d_opt.state_dict()) == str(t0.d_opt.state_dict())
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]

@pytest.mark.slow
def test_cyclegan_feature_matching_resumes_bitwise(tmp_path):
    ref, resumed = uninterrupted_and_resumed(cyc, tmp_path, 99, num_D=2, lambda_feat=10.)
    t, t0 = resumed.cycle_gan_trainer, ref.cycle_gan_trainer
    assert same((resumed.model, ref.model), (t.d_a, t0.d_a), (t.d_b, t0.d_b))
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]


def test_train_flags(tmp_path):
    import csv
    from gan_callbacks.cli.parser import main
    from gan_callbacks.data.samples import sample_pairs
    data = sample_pairs(tmp_path/'sample', n_train=4, n_valid=2, size=32)
    out = tmp_path/'run'
    main([str(a) for a in ['train', '--data', data, '--out', out, '--epochs', 1, '--epochs-decay', 0, '--bs', 2, '--load-size', 32,
                           '--crop-size', 32, '--ngf', 4, '--n-samples', 2, '--num-d', 2, '--lambda-feat', 10]])
    rows = list(csv.DictReader(open(out/'history.csv')))
    assert len(rows) == 1 and float(rows[0]['g_gan_feat']) > 0
    with pytest.raises(SystemExit):
        main([str(a) for a in ['train', '--sample', '--out', tmp_path/'c', '--model', 'cut', '--num-d', 2]])


def test_with_diffaugment_fake_and_real_are_matched_under_the_same_draws():
    "The features of the real are those of the real augmented as the fake was: the condition beside both comes out the same"
    seen = []
    class Spy(Pix2pixTrainer):
        def setup_discriminator(self, a_ch, b_ch):
            D = super().setup_discriminator(a_ch, b_ch)
            if len(D._forward_pre_hooks) < 2: D.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))   # after the trainer's
            return D
    set_seed(0)
    learn = Learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Spy(num_D=2, lambda_feat=10., diffaugment='translation,cutout'))
    quiet_fit(learn)
    assert len(seen) == 4 * 4   # per iteration: D's update on fake and real, then G's term on the fake and the real's features
    for i in range(0, 16, 4):
        d_fake, d_real, g_fake, g_real = seen[i:i+4]
        assert torch.equal(g_fake[:, :3], g_real[:, :3]) and not torch.equal(g_fake[:, 3:], g_real[:, 3:])
        assert not torch.equal(d_fake[:, :3], d_real[:, :3])   # D's update: draws of their own, as DiffAugment makes them
