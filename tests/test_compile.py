"Compiled networks train as the eager ones: every trainer, 20 iterations, the same weights, and no recompilation after the first iterations"
import random
import numpy as np
import pytest, torch
from fastai.basics import Learner, DataLoaders, Callback, set_seed
from fastai.losses import L1LossFlat
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator, ResnetGenerator, PatchSampleF
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.nets.hd_networks import GlobalGenerator, MultiscaleDiscriminator
from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
from gan_callbacks.internals import compiled_graphs, is_compiled
from helpers import Unpaired

pytestmark = pytest.mark.slow   # torch.compile: `make test-all`

# dynamo's graphs and AOT autograd's forward/backward split, run by eager kernels: what decides which compiled frame
# runs (guards on `requires_grad`, train/eval, shapes) without generating C++ kernels, minutes each on a small CPU
COMPILE = {'backend': 'aot_eager'}
N = 20

def batches(n=N, bs=2, size=32):
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(bs, 3, size, size, generator=g)*2-1, torch.rand(bs, 3, size, size, generator=g)*2-1) for _ in range(n)]

def unpaired(data):
    items = Unpaired((a, b) for A, B in data for a, b in zip(A, B))
    return DataLoaders.from_dsets(items, Unpaired(items[:2]), bs=2, shuffle=False, device='cpu')

def pix2pix(compile):
    items = [(a, b) for A, B in batches() for a, b in zip(A, B)]
    torch.manual_seed(1)
    G, D = UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2)
    learn = Learner(DataLoaders.from_dsets(items, items[:2], bs=2, shuffle=False, device='cpu'), G, loss_func=L1LossFlat(),
                    opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D, compile=compile))
    return learn, lambda: (learn.model, learn.pix2pix_trainer.discriminator)

def cyclegan(compile):
    torch.manual_seed(1)
    nets = (ResnetGenerator(3, 3, ngf=4, n_blocks=1), ResnetGenerator(3, 3, ngf=4, n_blocks=1),
            PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance'), PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance'))
    learn = cyclegan_learner(unpaired(batches()), *nets, pool_size=2, opt_func=pix2pix_adam, trainer_kwargs=dict(compile=compile))
    t = learn.cycle_gan_trainer
    return learn, lambda: (learn.model, t.d_a, t.d_b)

def cut(compile):
    torch.manual_seed(1)
    G = ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True)
    D = PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance', antialias=True)
    Fs = PatchSampleF(nc=8, gain=1.).create_mlp([3, 8, 16, 16])
    learn = cut_learner(unpaired(batches()), G, D, Fs, opt_func=pix2pix_adam,
                        trainer_kwargs=dict(nce_layers=(0, 4, 8, 12), num_patches=16, compile=compile))
    return learn, lambda: (learn.model, learn.cut_trainer.discriminator, learn.cut_trainer.sampler)

def pix2pixhd(compile):
    items = [(a, b) for A, B in batches() for a, b in zip(A, B)]
    torch.manual_seed(1)
    G = GlobalGenerator(3, 3, ngf=4, n_downsampling=2, n_blocks=1)
    D = MultiscaleDiscriminator(6, ndf=4, n_layers=2, num_D=2, get_interm_feat=True)   # feature matching through D's layers
    learn = pix2pixhd_learner(DataLoaders.from_dsets(items, items[:2], bs=2, shuffle=False, device='cpu'), G, D, opt_func=pix2pix_adam,
                              trainer_kwargs=dict(vgg=False, pool_size=2, compile=compile))
    t = learn.cbs.filter(lambda cb: hasattr(cb, 'd_names'))[0]
    return learn, lambda: (learn.model, *t.discriminators.values())

class GraphCount(Callback):
    "Dynamo's graph count after each training iteration"
    def before_fit(self): self.counts, self.base = [], compiled_graphs()
    def after_batch(self):
        if self.training: self.counts.append(compiled_graphs() - self.base)

def train(make, compile):
    learn, nets = make(compile)
    random.seed(0); np.random.seed(0); set_seed(0)   # the pools' and FastCUT's draws, dropout
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3, cbs=(gc := GraphCount()))
    return learn, [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in nets()], gc.counts

@pytest.mark.parametrize('make', [pix2pix, cyclegan, cut, pix2pixhd])
def test_compiled_networks_train_as_eager_and_compile_once(make):
    _, eager, counts = train(make, False)
    assert counts == [0] * N   # nothing compiled
    learn, comp, counts = train(make, COMPILE)
    assert len(counts) == N and counts[0] >= 1
    assert counts[-1] - counts[1] <= 1, f'recompiled after the first iterations: graphs per iteration {counts}'
    for m in (learn.model, *learn.cbs.filter(lambda cb: hasattr(cb, 'd_names'))[0].discriminators.values()):
        assert is_compiled(m)
    _, before = make(False)
    for a, b, init in zip(comp, eager, (m.state_dict() for m in before())):
        assert a.keys() == b.keys()
        for k in a: torch.testing.assert_close(a[k].float(), b[k].float(), atol=1e-5, rtol=1e-5, msg=lambda s: f'{k}: {s}')
        assert any(not torch.equal(a[k], init[k]) for k in a)   # it trained

def test_inductor_refused_for_replication_padding_before_any_step():
    learn, nets = cut(True)   # CUT's anti-aliased G upsamples after replication padding: inductor's backward of it fails mid-fit
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in nets()]
    with pytest.raises(ValueError, match='ResnetGenerator has a ReplicationPad2d'), learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert not is_compiled(learn.model)
    for m, sd in zip(nets(), before): assert all(torch.equal(v, sd[k]) for k, v in m.state_dict().items())   # no step taken
