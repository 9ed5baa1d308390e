"One way to run a generator outside the fit: `run_generator`, and through it the grids, the loggers, `MappingL1`, `translate` and `evaluate`."
import inspect
import pytest, torch
from torch import nn
from fastai.learner import Learner
from gan_callbacks.deploy import inference
from gan_callbacks.trainer.test_mode import run_generator, default_test_mode
from gan_callbacks.trainer.base import AdversarialTrainer
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.nets.networks import UnetGenerator
from gan_callbacks.deploy.inference import translate_batch, translate_file, generator_settings, to_pil
from gan_callbacks.callback.grids import SampleGrid, MappingL1
from gan_callbacks.callback.loggers import GANLogger
from gan_callbacks.metrics.evaluation import translate_all, evaluate
from gan_callbacks.data.samples import sample_pairs


def dropout_learner(test_mode='paper'):
    "A U-Net deep enough for dropout (64 px), with a BatchNorm frozen by hand, and its Learner"
    torch.manual_seed(0)
    G = UnetGenerator(num_downs=6, ngf=4)
    next(m for m in G.modules() if isinstance(m, nn.BatchNorm2d)).eval()
    return Learner(None, G, loss_func=nn.L1Loss(), cbs=Pix2pixTrainer(test_mode=test_mode)), torch.randn(3, 3, 64, 64)

def modes(m): return [o.training for o in m.modules()]

def test_translate_batch_honours_the_trainers_test_mode():
    learn, x = dropout_learner('paper')
    assert not torch.equal(translate_batch(learn, x), run_generator(learn.model, x, 'eval'))
    assert torch.equal(translate_batch(learn, x), run_generator(learn.model, x, 'paper'))
    assert torch.equal(translate_batch(learn, x, test_mode='eval'), run_generator(learn.model, x, 'eval'))

def test_sample_grid_puts_every_layer_back_and_keeps_the_draws():
    learn, x = dropout_learner('paper')
    before = modes(learn.model)
    assert not all(before)   # the frozen BatchNorm
    grid = SampleGrid(); grid.learn, grid.x = learn, x
    state = torch.get_rng_state()
    out = grid.predict()
    assert modes(learn.model) == before and torch.equal(torch.get_rng_state(), state)
    assert torch.equal(out, run_generator(learn.model, x, 'paper'))

def test_mapping_l1_and_the_loggers_run_in_the_test_mode_without_shifting_the_draws():
    learn, x = dropout_learner('paper')
    cb = MappingL1(x, torch.zeros(3, 3, 64, 64)); cb.learn = learn
    state = torch.get_rng_state()
    assert cb.value() == pytest.approx(run_generator(learn.model, x, 'paper').abs().mean().item())
    assert cb.value() != pytest.approx(run_generator(learn.model, x, 'eval').abs().mean().item())
    log = GANLogger(); log.learn, log.trainer, log.images = learn, learn.cbs[-1], [x, x]
    (tag, im), = log.grids()
    assert torch.equal(torch.get_rng_state(), state)

def test_evaluate_runs_the_test_mode_without_shifting_the_draws(tmp_path):
    data = sample_pairs(tmp_path/'pairs', n_train=1, n_valid=3, size=64)
    learn, _ = dropout_learner()
    G, batches = learn.model, [(torch.randn(2, 3, 64, 64), torch.zeros(2, 3, 64, 64))] * 2
    state = torch.get_rng_state()
    s = evaluate(G, data, tmp_path/'eval', size=64, test_mode='paper', bs=2, n_show=1, device='cpu', quiet=True)
    assert torch.equal(torch.get_rng_state(), state)
    x, fake, y = translate_all(G, batches, 'paper')
    assert torch.equal(torch.get_rng_state(), state)
    assert not torch.equal(fake[:2], fake[2:])   # batch by batch, each its own draws
    assert s['n_images'] == 3 and modes(G) == modes(dropout_learner()[0].model)

def test_translate_file_looks_the_settings_up_once(tmp_path, monkeypatch):
    G = UnetGenerator(num_downs=5, ngf=4)
    to_pil(torch.rand(3, 40, 50) * 2 - 1).save(tmp_path/'a.png')
    s, calls = generator_settings(G), []
    def counted(*args, **kwargs): calls.append(args); return generator_settings(*args, **kwargs)
    monkeypatch.setattr(inference, 'generator_settings', counted)
    for kw in ({}, dict(preprocess='resize', load_size=32), dict(tile=32, overlap=8)):
        calls.clear()
        translate_file(G, s, tmp_path/'a.png', tmp_path/'b.png', **kw)
        assert len(calls) == 1, kw

def test_one_default_test_mode():
    "The trainer's default is the one a bare generator and a model folder without one run in"
    assert inspect.signature(AdversarialTrainer).parameters['test_mode'].default == default_test_mode
    assert inspect.signature(run_generator).parameters['test_mode'].default == default_test_mode
    assert inference.test_mode_of(Learner(None, nn.Conv2d(3, 3, 1), loss_func=nn.L1Loss())) == default_test_mode
