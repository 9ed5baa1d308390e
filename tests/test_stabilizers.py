"The stabilizers in the trainers: DiffAugment on what D sees (pairs sharing spatial draws), lazy R1/R2 steps, spectral norm, the EMA's skip flag, exact resume with options on, recipes."
import warnings
import pytest, torch
from fastai.basics import Learner, DataLoaders, Callback, L1LossFlat, set_seed, L
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator, ResnetGenerator, PatchSampleF, init_weights
from gan_callbacks.gans.pix2pix import Pix2pixTrainer, pix2pix_learner
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.callback.checkpoint import GANCheckpoint
from gan_callbacks.stabilizers.ema import GeneratorEMA, find_ema
from gan_callbacks.stabilizers.regularize import r1_penalty, lazy_ratio
from gan_callbacks.metrics.swd import SWD
from gan_callbacks.nets.hd_networks import GlobalGenerator, MultiscaleDiscriminator
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from helpers import Interrupt, RandFlip, Unpaired, unpaired_resume_dls, run_gan

ALL = dict(diffaugment='color,translation,cutout', r1_gamma=1., r2_gamma=0.5, reg_interval=2, spectral_norm=True)

def paired_dls(n=16, bs=4, size=32, same=False, flip=True):
    g = torch.Generator().manual_seed(0)
    A = torch.rand(n, 3, size, size, generator=g) * 2 - 1
    items = list(zip(A, A.clone() if same else -A.flip(-2)))
    return DataLoaders.from_dsets(items, items[:4], bs=bs, after_batch=RandFlip() if flip else None, num_workers=0, device='cpu')

def p2p(path='.', seed=0, cbs=None, dls=None, **trainer_kw):
    "Tiny pix2pix (dropout on) under `seed`, D built at the first batch"
    set_seed(seed)
    G = UnetGenerator(num_downs=5, ngf=8, use_dropout=True)
    return Learner(dls or paired_dls(), G, loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                   cbs=[Pix2pixTrainer(PatchDiscriminator(6, ndf=8, n_layers=2), **trainer_kw)] + L(cbs), path=path)

def quiet_fit(learn, n=1, lr=1e-3):
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit(n, lr)

def sd(m): return {k: v.detach().clone() for k, v in m.state_dict().items()}


# --- DiffAugment: every input of D, the pair's spatial draws shared

class SeenByD(Callback):
    "Records every input of the trainer's discriminator in training"
    order = -10
    def __init__(self, trainer='pix2pix_trainer'): self.trainer = trainer
    def before_fit(self):
        self.seen = []
        D = getattr(self.learn, self.trainer).discriminator
        D.register_forward_pre_hook(lambda m, args: self.seen.append(args[0].detach().clone()) if self.training else None)

def test_pix2pix_diffaugment_shares_spatial_draws_between_condition_and_image():
    learn = p2p(dls=paired_dls(same=True, flip=False), cbs=SeenByD(), diffaugment='translation,cutout')
    quiet_fit(learn)
    seen = learn.seen_by_d.seen
    assert len(seen) == 3 * 4   # D's fake, D's real, G's fake, in each of 4 iterations
    real = seen[1::3]           # (A, B) with B == A: the same shift and hole in both halves
    for x in real: assert torch.equal(x[:, :3], x[:, 3:])
    holes = [(x == 0).all(1).flatten(1).any(1) for x in real]   # cutout zeroes every channel of a rectangle
    assert all(h.all() for h in holes)
    off = p2p(dls=paired_dls(same=True, flip=False), cbs=SeenByD())
    quiet_fit(off)
    assert not any((x == 0).all(1).any() for x in off.seen_by_d.seen[1::3])   # without the option D sees the images as they are

def test_color_changes_the_image_only():
    learn = p2p(dls=paired_dls(same=True, flip=False), cbs=SeenByD(), diffaugment='color')
    quiet_fit(learn)
    x = learn.seen_by_d.seen[1]
    assert not torch.equal(x[:, :3], x[:, 3:])
    assert {tuple(t.shape) for t in learn.seen_by_d.seen} == {tuple(x.shape)}


# --- lazy R1: every k D steps, a separate step on k times the penalty, D's Adam adjusted

def test_r1_every_k_d_steps_with_the_interval_as_scale():
    k, gamma, calls = 3, 2., []
    class Spy(Pix2pixTrainer):
        def _step_d(self, loss):   # every D step, the penalty's too
            calls.append((self.learn.train_iter, loss.detach().clone(), self.stabilizers.lazy.n_steps))
            if len(calls) >= 2 and calls[-2][0] == calls[-1][0]:   # the iteration's second D step: the penalty's
                A, B = self.learn.xb[0], self.learn.yb[0]
                calls[-1] += (r1_penalty(self.discriminator, B, cond=A, gamma=gamma).detach() * k,)
            return super()._step_d(loss)
    set_seed(0)
    learn = Learner(paired_dls(n=24), UnetGenerator(num_downs=5, ngf=8), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                    cbs=Spy(PatchDiscriminator(6, ndf=8, n_layers=2), r1_gamma=gamma, reg_interval=k))
    quiet_fit(learn)   # 6 iterations
    per_iter = [sum(1 for c in calls if c[0] == i) for i in range(1, 7)]   # `train_iter` counts the iteration before `after_batch`
    assert per_iter == [2, 1, 1, 2, 1, 1]
    for c in calls:
        if len(c) == 4: assert torch.allclose(c[1], c[3], rtol=1e-5)
    assert sum(len(c) == 4 for c in calls) == 2
    t, r = learn.spy, lazy_ratio(k)
    h = t.d_opt.hypers[0]
    assert abs(h['lr'] - 1e-3 * r) < 1e-12 and abs(h['mom'] - 0.5 ** r) < 1e-12 and abs(h['sqr_mom'] - 0.999 ** r) < 1e-12
    assert t.state_dict()['lazy_reg'] == {'interval': k, 'n_steps': 6}

def test_paper_options_leave_d_s_optimizer_and_state_as_they_were():
    learn = p2p()
    quiet_fit(learn)
    t = learn.pix2pix_trainer
    assert 'lazy_reg' not in t.state_dict() and t.d_opt.hypers[0]['sqr_mom'] == 0.999 and t.d_opt.hypers[0]['lr'] == 1e-3
    assert not any(hasattr(m, 'weight_orig') for m in t.discriminator.modules())


# --- spectral norm

def test_spectral_norm_on_a_given_and_on_a_built_discriminator():
    learn = p2p(spectral_norm=True)
    quiet_fit(learn)
    D = learn.pix2pix_trainer.discriminator
    convs = [m for m in D.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(hasattr(m, 'weight_orig') for m in convs)
    opt_params = {id(p) for pg in learn.pix2pix_trainer.d_opt.opt.param_groups for p in pg['params']}
    assert opt_params == {id(p) for p in D.parameters()}
    built = pix2pix_learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8), trainer_kwargs=dict(spectral_norm=True))
    quiet_fit(built)
    assert all(hasattr(m, 'weight_orig') for m in built.pix2pix_trainer.discriminator.modules() if isinstance(m, torch.nn.Conv2d))


# --- EMA: a skipped iteration leaves the average alone

class InjectNaN(Callback):
    order = -5
    def __init__(self, its): self.its = set(its)
    def before_batch(self):
        if self.training and self.learn.train_iter in self.its: self.learn.xb = (self.xb[0] * float('nan'),)

class Averages(Callback):
    order = 30   # after `GeneratorEMA`
    def before_fit(self): self.got = []
    def after_batch(self):
        if self.training: self.got.append([e.clone() for e in self.learn.generator_ema.averages])

def test_ema_keeps_its_average_on_a_skipped_iteration():
    learn = p2p(cbs=[InjectNaN([2]), GeneratorEMA(ema_kimg=0.01), av := Averages()])
    quiet_fit(learn)
    assert learn.pix2pix_trainer.n_skipped == 1
    same = [all(torch.equal(a, b) for a, b in zip(x, y)) for x, y in zip(av.got, av.got[1:])]
    assert same == [False, True, False]   # iteration 2 skipped: its average is iteration 1's


# --- with every option on: short fits run, and an interrupted fit resumes exactly

def test_pix2pix_with_every_option_resumes_bitwise(tmp_path):
    ema = lambda: GeneratorEMA(ema_kimg=0.01, ema_rampup=0.5)
    ref = p2p(tmp_path/'ref', cbs=ema(), **ALL)
    run_gan(ref)
    learn = p2p(tmp_path, cbs=[ema(), GANCheckpoint(), Interrupt(epoch=1, batch=2)], **ALL)
    with pytest.raises(KeyboardInterrupt): run_gan(learn)
    resumed = p2p(tmp_path, seed=1234, cbs=[ema(), GANCheckpoint(resume=True)], **ALL)
    run_gan(resumed)
    t, t0 = resumed.pix2pix_trainer, ref.pix2pix_trainer
    for a, b in ((resumed.model, ref.model), (t.discriminator, t0.discriminator)):
        x, y = sd(a), sd(b)
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert str(t.d_opt.state_dict()) == str(t0.d_opt.state_dict()) and str(resumed.opt.state_dict()) == str(ref.opt.state_dict())
    assert t.state_dict()['lazy_reg'] == t0.state_dict()['lazy_reg'] == {'interval': 2, 'n_steps': 12}
    assert all(torch.equal(a, b) for a, b in zip(resumed.generator_ema.averages, ref.generator_ema.averages))
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]


# --- the generator's perceptual term

class MeanAbs(torch.nn.Module):
    "pix2pix's L1 as a perceptual term"
    def forward(self, fake, real): return (fake.float() - real.float()).abs().mean()

def test_perceptual_term_adds_to_g_s_loss_with_its_weight():
    "L1 as the perceptual term, weight 50, beside lambda_l1=100 trains as lambda_l1=150 does; its column is half of g_l1's"
    ps = lambda m: {k: v.detach().clone() for k, v in m.named_parameters()}
    init = ps(p2p().model)
    learn = p2p(lambda_l1=100., perceptual=MeanAbs(), lambda_perceptual=50.)
    quiet_fit(learn)
    ref, off = p2p(lambda_l1=150.), p2p(lambda_l1=100.)
    quiet_fit(ref); quiet_fit(off)
    got, want, other = ps(learn.model), ps(ref.model), ps(off.model)
    diff = lambda a: max((a[k] - want[k]).abs().max().item() for k in want)
    assert diff(got) < 1e-3 * diff(init) and diff(got) < 1e-2 * diff(other)   # as lambda_l1=150, far from lambda_l1=100
    t = learn.pix2pix_trainer
    assert t.cols == ('g_gan', 'g_l1', 'g_perceptual', 'd_real', 'd_fake') and 'g_perceptual' in learn.recorder.metric_names
    h = torch.tensor([list(r) for r in t.hist])
    torch.testing.assert_close(h[:, 2], h[:, 1] / 2)

def test_lpips_term_resumes_bitwise_and_is_left_out_of_the_export(tmp_path):
    from gan_callbacks.nets.lpips import LPIPS
    def lpips(): torch.manual_seed(5); return LPIPS('alex')   # random weights, the same in every run
    ref = p2p(tmp_path/'ref', perceptual=lpips())
    run_gan(ref)
    learn = p2p(tmp_path, perceptual=lpips(), cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)])
    with pytest.raises(KeyboardInterrupt): run_gan(learn)
    resumed = p2p(tmp_path, seed=1234, perceptual=lpips(), cbs=GANCheckpoint(resume=True))
    run_gan(resumed)
    x, y = sd(resumed.model), sd(ref.model)
    assert all(torch.equal(x[k], y[k]) for k in x)
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]
    t = ref.pix2pix_trainer
    assert not any(p.requires_grad for p in t.perceptual.parameters()) and not t.perceptual.training
    assert t.__getstate__()['perceptual'] is None and t.perceptual is not None   # what `learn.export` pickles

def cyc(path, seed=0, cbs=None, recipe='paper', **kw):
    set_seed(seed)
    torch.manual_seed(1)
    nets = (ResnetGenerator(3, 3, ngf=4, n_blocks=1), ResnetGenerator(3, 3, ngf=4, n_blocks=1),
            PatchDiscriminator(3, ndf=8, n_layers=2, norm='instance'), PatchDiscriminator(3, ndf=8, n_layers=2, norm='instance'))
    return cyclegan_learner(unpaired_resume_dls(), *nets, pool_size=3, cbs=cbs, path=path, recipe=recipe, trainer_kwargs=kw)

def test_cyclegan_modern_recipe_resumes_bitwise(tmp_path):
    ref = cyc(tmp_path/'ref', recipe='modern', r2_gamma=0.5, reg_interval=2, spectral_norm=True)
    assert isinstance(ref.generator_ema, GeneratorEMA) and ref.cycle_gan_trainer.stabilizers.diffaugment
    run_gan(ref)
    learn = cyc(tmp_path, recipe='modern', r2_gamma=0.5, reg_interval=2, spectral_norm=True, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)])
    with pytest.raises(KeyboardInterrupt): run_gan(learn)
    resumed = cyc(tmp_path, seed=99, recipe='modern', r2_gamma=0.5, reg_interval=2, spectral_norm=True, cbs=GANCheckpoint(resume=True))
    run_gan(resumed)
    t, t0 = resumed.cycle_gan_trainer, ref.cycle_gan_trainer
    for a, b in ((resumed.model, ref.model), (t.d_a, t0.d_a), (t.d_b, t0.d_b)):
        x, y = sd(a), sd(b)
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert all(torch.equal(a, b) for a, b in zip(resumed.generator_ema.averages, ref.generator_ema.averages))
    assert t.state_dict()['lazy_reg']['n_steps'] == 12

def test_cut_with_every_option_and_an_swd_column_fits():
    set_seed(0)
    G = init_weights(ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True), 'xavier', 0.5)
    D = init_weights(PatchDiscriminator(3, ndf=8, n_layers=2, norm='instance', antialias=True), 'xavier', 0.5)
    learn = cut_learner(unpaired_resume_dls(), G, D, recipe='modern', metrics=SWD(),
                        trainer_kwargs=dict(nce_layers=(0, 4, 8, 12), num_patches=16, r2_gamma=0.5, reg_interval=2, spectral_norm=True))
    quiet_fit(learn, 2)
    assert learn.cut_trainer.state_dict()['lazy_reg']['n_steps'] == 8 and learn.cut_trainer.n_skipped == 0
    swd = [v[learn.recorder.metric_names.index('swd') - 1] for v in learn.recorder.values]
    assert len(swd) == 2 and all(s > 0 for s in swd)

def test_recipe_paper_is_the_learner_without_options():
    learn = pix2pix_learner(paired_dls(), UnetGenerator(num_downs=5, ngf=8))
    t = learn.pix2pix_trainer
    assert t.stabilizers.lazy is None and not t.stabilizers.diffaugment and not t.spectral_norm
    assert not any(isinstance(cb, GeneratorEMA) for cb in learn.cbs)
    with pytest.raises(ValueError, match="recipe must be one of 'paper', 'modern'"): pix2pix_learner(paired_dls(), recipe='2024')


# --- pix2pixHD: the same options through the same parts

def hd(path='.', seed=0, cbs=None, dls=None, recipe='paper', **trainer_kw):
    "Tiny pix2pixHD on image pairs (two D scales with feature matching, no VGG, a pool of 2) under `seed`"
    set_seed(seed)
    G = GlobalGenerator(3, 3, ngf=4, n_downsampling=2, n_blocks=1)
    D = MultiscaleDiscriminator(6, ndf=4, n_layers=2, num_D=2, get_interm_feat=True)
    return pix2pixhd_learner(dls or paired_dls(), G, D, cbs=cbs, path=path, recipe=recipe,
                             trainer_kwargs=dict(vgg=False, pool_size=2) | trainer_kw)

def test_pix2pixhd_d_sees_augmented_pairs_real_and_fake_with_one_draw():
    learn = hd(dls=paired_dls(same=True, flip=False), cbs=SeenByD('pix2pixhd_trainer'), diffaugment='translation,cutout', pool_size=0)
    quiet_fit(learn)
    seen = learn.seen_by_d.seen
    assert len(seen) == 3 * 4   # D's (pooled) fake, D's real, G's fake, in each of 4 iterations
    pooled, real, fake = seen[0::3], seen[1::3], seen[2::3]
    for r, f in zip(real, fake):
        assert torch.equal(r[:, :3], r[:, 3:])   # B == A: one shift and hole for condition and image
        assert torch.equal(r[:, :3], f[:, :3])   # feature matching compares real and fake at the same draws
        assert (r == 0).all(1).flatten(1).any(1).all()   # cutout's holes
    assert not all(torch.equal(p[:, :3], r[:, :3]) for p, r in zip(pooled, real))   # D's fake has draws of its own

def test_pix2pixhd_lazy_r1_steps_at_the_reals_and_adjusts_d_s_adam():
    learn = hd(cbs=SeenByD('pix2pixhd_trainer'), r1_gamma=1., reg_interval=2, pool_size=0)
    quiet_fit(learn)   # 4 iterations: the penalty's D step in the first and the third
    seen, t = learn.seen_by_d.seen, learn.pix2pixhd_trainer
    assert len(seen) == 3 * 4 + 2
    assert torch.equal(seen[3], seen[1]) and torch.equal(seen[10], seen[8])   # R1 at the real pair: 4 + 3 inputs before the third iteration's
    assert t.state_dict()['lazy_reg'] == {'interval': 2, 'n_steps': 4}
    assert abs(t.d_opt.hypers[0]['sqr_mom'] - 0.999 ** lazy_ratio(2)) < 1e-12

def test_pix2pixhd_modern_recipe_leaves_out_r1_and_spectral_norm():
    t = hd(recipe='modern').pix2pixhd_trainer   # both raised SWD on every seed of the label-map sample
    assert t.stabilizers.diffaugment and t.stabilizers.lazy is None and not t.spectral_norm
    assert any(isinstance(cb, GeneratorEMA) for cb in t.learn.cbs)
    t = hd(recipe='modern', r1_gamma=0.5, spectral_norm=True).pix2pixhd_trainer   # given, they win
    assert t.stabilizers.r1_gamma == 0.5 and t.spectral_norm

def test_pix2pixhd_with_every_option_resumes_bitwise(tmp_path):
    opts = dict(recipe='modern', r1_gamma=1., r2_gamma=0.5, reg_interval=2, spectral_norm=True)
    ref = hd(tmp_path/'ref', **opts)
    t0 = ref.pix2pixhd_trainer
    assert isinstance(ref.generator_ema, GeneratorEMA) and t0.stabilizers.diffaugment and t0.spectral_norm
    run_gan(ref)
    learn = hd(tmp_path, cbs=[GANCheckpoint(), Interrupt(epoch=1, batch=2)], **opts)
    with pytest.raises(KeyboardInterrupt): run_gan(learn)
    resumed = hd(tmp_path, seed=99, cbs=GANCheckpoint(resume=True), **opts)
    run_gan(resumed)
    t = resumed.pix2pixhd_trainer
    for a, b in ((resumed.model, ref.model), (t.discriminator, t0.discriminator)):
        x, y = sd(a), sd(b)
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert str(t.d_opt.state_dict()) == str(t0.d_opt.state_dict()) and str(resumed.opt.state_dict()) == str(ref.opt.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(resumed.generator_ema.averages, ref.generator_ema.averages))
    assert all(torch.equal(a, b) for a, b in zip(t.pool.images, t0.pool.images)) and len(t.pool) == 2
    assert t.state_dict()['lazy_reg'] == t0.state_dict()['lazy_reg'] == {'interval': 2, 'n_steps': 12}
    assert [list(v) for v in resumed.recorder.values] == [list(v) for v in ref.recorder.values]


# --- the command line

def test_train_modern_recipe_keeps_the_best_swd_and_writes_the_average(tmp_path):
    import json, csv
    from fastai.learner import load_learner
    from gan_callbacks.cli.parser import main
    from gan_callbacks.data.samples import sample_pairs
    data = sample_pairs(tmp_path/'sample', n_train=8, n_valid=2, size=32)
    out = tmp_path/'run'
    main([str(a) for a in ['train', '--data', data, '--out', out, '--epochs', 1, '--epochs-decay', 1, '--bs', 4, '--load-size', 36,
                           '--crop-size', 32, '--ngf', 8, '--lr', 1e-3, '--n-samples', 2, '--recipe', 'modern', '--spectral-norm',
                           '--reg-interval', 2, '--keep-best', 'swd']])
    rows = list(csv.DictReader(open(out/'history.csv')))
    assert len(rows) == 2 and all(float(r['swd']) > 0 for r in rows)
    s = json.loads((out/'summary.json').read_text())
    assert s['best']['metric'] == 'swd' and s['best']['score'] == min(float(r['swd']) for r in rows)
    learn = load_learner(out/'generator.pkl', cpu=True)
    ema = next(cb for cb in learn.cbs if isinstance(cb, GeneratorEMA))
    assert all(torch.equal(p, e) for p, e in zip(learn.model.parameters(), ema.averages))   # the written generator is the average
    assert (out/'best_generator.pkl').exists()


def test_train_pix2pixhd_takes_the_recipe_and_an_swd_column(tmp_path):
    import json, csv
    from fastai.learner import load_learner
    from gan_callbacks.cli.parser import main
    from gan_callbacks.data.label_maps import sample_labels
    data = sample_labels(tmp_path/'s', n_train=4, n_valid=2, size=32, label_nc=8)
    out = tmp_path/'run'
    main([str(a) for a in ['train', '--model', 'pix2pixhd', '--data', data, '--out', out, '--label-nc', 8, '--epochs', 1, '--epochs-decay', 1,
                           '--bs', 2, '--load-size', 32, '--ngf', 4, '--n-downsampling', 2, '--n-blocks', 1, '--ndf', 4, '--vgg', 'off',
                           '--n-samples', 2, '--recipe', 'modern', '--r2', 0.5, '--reg-interval', 2, '--swd']])
    rows = list(csv.DictReader(open(out/'history.csv')))
    assert len(rows) == 2 and all(float(r['swd']) > 0 for r in rows)
    learn = load_learner(out/'generator.pkl', cpu=True)
    t, ema = learn.pix2pixhd_trainer, next(cb for cb in learn.cbs if isinstance(cb, GeneratorEMA))
    assert t.stabilizers.diffaugment and not t.spectral_norm and (t.stabilizers.r1_gamma, t.stabilizers.r2_gamma) == (0, 0.5)
    assert t.stabilizers.lazy.n_steps == 4   # two epochs of two batches
    assert all(torch.equal(p, e) for p, e in zip(learn.model.parameters(), ema.averages))   # the written generator is the average
    training = json.loads((out/'generator'/'config.json').read_text())['training']
    assert training['recipe'] == 'modern' and (training['r2_gamma'], training['reg_interval']) == (0.5, 2)

def test_keep_best_keeps_the_average_and_resumes_as_uninterrupted(tmp_path):
    "With a moving average, the best weights are the average's, also when the best epoch is the checkpoint's own"
    import numpy as np
    from fastai.metrics import ValueMetric
    from gan_callbacks.callback.loggers import KeepBest
    from gan_callbacks.stabilizers.ema import averaged
    scores = [0.5, 0.3, 0.6, 0.4]
    seen = {}
    class AtBest(Callback):
        order = 70   # after `KeepBest`: the average at the best epoch, by hand
        def after_epoch(self):
            if self.epoch == 1:
                seen['trained'] = sd(self.learn.model)
                with averaged(self.learn) as m: seen[self.learn.path] = sd(m)
    def fit(path, interrupt=None, resume=False):
        learn = p2p(path, cbs=[GeneratorEMA(ema_kimg=0.01), AtBest()])
        learn.metrics = [ValueMetric(lambda: scores[learn.epoch], 'score')]
        keep = KeepBest('score', comp=np.less)
        cbs = [GANCheckpoint(resume=resume), keep] + ([Interrupt(epoch=interrupt, batch=1)] if interrupt is not None else [])
        with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
            warnings.simplefilter('ignore'); learn.fit(4, 1e-3, cbs=cbs)
        return learn, keep
    ref, keep0 = fit(tmp_path/'ref')
    assert keep0.best_epoch == 1
    avg = seen[ref.path]
    assert all(torch.equal(keep0.best_state[k], avg[k].cpu()) for k in avg)
    assert not all(torch.equal(keep0.best_state[k], v) for k, v in seen['trained'].items())   # not the training weights
    with pytest.raises(KeyboardInterrupt): fit(tmp_path/'cut', interrupt=2)
    _, keep = fit(tmp_path/'cut', resume=True)   # resumed from epoch 1, the best
    assert keep.best_epoch == 1 and all(torch.equal(keep.best_state[k], keep0.best_state[k]) for k in avg)


@pytest.mark.parametrize('kw,kimg', [(dict(ema=True), 10.), (dict(recipe='modern', ema=False), None), (dict(recipe='modern'), 10.),
                                     (dict(ema=dict(ema_kimg=0.5)), 0.5), ({}, None)])
def test_learner_functions_take_ema_as_the_stabilizers_page_teaches(kw, kimg):
    "`ema=` beside the learner function's other options: a `GeneratorEMA` (its arguments in a dict), winning over the recipe's"
    from helpers import flipped_dls, unpaired_dls, batches
    for learn in (pix2pix_learner(flipped_dls(), UnetGenerator(num_downs=5, ngf=8), **kw), cyclegan_learner(unpaired_dls([batches(n=2)]), **kw)):
        assert [cb.ema_kimg for cb in learn.cbs if isinstance(cb, GeneratorEMA)] == ([] if kimg is None else [kimg])

@pytest.mark.parametrize('kw,kimg', [(dict(ema=True), 10.), (dict(recipe='modern', ema=False), None), (dict(recipe='modern'), 10.),
                                     (dict(ema=dict(ema_kimg=0.5)), 0.5), ({}, None)])
def test_trainers_take_ema_and_recipe(kw, kimg):
    "`Pix2pixTrainer(ema=True)`, `(recipe='modern')` in a hand-built Learner: the recipe's options, a `GeneratorEMA` joined; the options given win"
    from fastai.basics import Learner, L1LossFlat
    from helpers import flipped_dls, fit
    from gan_callbacks.gans.pix2pix import Pix2pixTrainer
    t = Pix2pixTrainer(**kw)
    learn = Learner(flipped_dls(), UnetGenerator(num_downs=5, ngf=8), loss_func=L1LossFlat(), cbs=[t])
    assert [cb.ema_kimg for cb in learn.cbs if isinstance(cb, GeneratorEMA)] == ([] if kimg is None else [kimg])
    modern = kw.get('recipe') == 'modern'
    assert (t.stabilizers.r1_gamma, t.spectral_norm, bool(t.stabilizers.diffaugment)) == ((1., True, True) if modern else (0., False, False))
    fit(learn, 1, warn=False)
    assert (find_ema(learn) is not None) == (kimg is not None)
    t = Pix2pixTrainer(recipe='modern', r1_gamma=0.5, spectral_norm=False)
    assert (t.stabilizers.r1_gamma, t.spectral_norm, t.ema) == (0.5, False, True)
    from gan_callbacks.gans.pix2pixhd import Pix2pixHDTrainer
    t = Pix2pixHDTrainer(recipe='modern', vgg=False)   # pix2pixHD's modern: EMA and DiffAugment only
    assert (t.stabilizers.r1_gamma, t.spectral_norm, t.ema) == (0., False, True)
    with pytest.raises(ValueError, match="recipe must be one of 'paper', 'modern', got 'new'"): Pix2pixTrainer(recipe='new')

def test_diffaugment_true_is_the_default_policy():
    "`diffaugment=True` (as `ema=True` reads) is DiffAugment's own policy; `False` none; a bad policy names its part"
    from gan_callbacks.stabilizers.recipes import Stabilizers
    assert Stabilizers(diffaugment=True).diffaugment == 'color,translation,cutout'
    assert Stabilizers(diffaugment=False).diffaugment is None and Pix2pixTrainer(diffaugment=True).stabilizers.diffaugment == 'color,translation,cutout'
    with pytest.raises(ValueError, match="unknown part.*'colour'"): Stabilizers(diffaugment='colour')
