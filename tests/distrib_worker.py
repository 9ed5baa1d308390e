"One process of the 2-process tests in test_distributed.py (`python distrib_worker.py OUT [cyclegan|cut|plain]`): pix2pix, 3 iterations, then rank 1 is killed; or CycleGAN, or CUT, 3 iterations; or (plain) a `Learner` given only `Pix2pixTrainer`, 3 iterations."
import os, sys, signal, warnings
import torch
import torch.distributed as dist
from fastai.basics import Learner, DataLoaders, Callback, L1LossFlat, set_seed, SGD, partial, first
from fastai.data.core import TfmdLists, Datasets
import fastai.callback.progress  # Learner.no_bar
from fastai.distributed import rank_distrib
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator, ResnetGenerator, PatchSampleF, init_weights
from gan_callbacks.data.folders import UnpairedDL
from gan_callbacks.trainer.base import AdversarialTrainer, find_trainer
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.callback.checkpoint import GANCheckpoint
from gan_callbacks.trainer.distributed import DistributedGAN, unwrap

LR = 1e-3

def items(n=12, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(n, 3, size, size, generator=g) * 2 - 1
    B = torch.rand(n, 3, size, size, generator=g) * 2 - 1
    return list(zip(A, B))

def make_learner(path, seed, bs=2, data=None, dgan=True, **kw):
    "Tiny instance-norm pix2pix, its initial weights drawn under `seed`, on unshuffled data (`dgan=False`: no `DistributedGAN` given)"
    set_seed(seed)
    G = UnetGenerator(num_downs=5, ngf=8, norm='instance', use_dropout=False)
    D = PatchDiscriminator(ndf=8, n_layers=2, norm='instance')
    data = data or items()
    dls = DataLoaders.from_dsets(data, data[:4], bs=bs, shuffle=False, device='cpu')
    return Learner(dls, G, loss_func=L1LossFlat(), opt_func=partial(SGD, mom=0.9), path=path,
                   cbs=[Pix2pixTrainer(D), *([DistributedGAN()] if dgan else []), GANCheckpoint(**kw)])

def tiny_d(seed, name, in_ch=3):
    "A tiny instance-norm PatchGAN drawn under (`seed`, `name`), the global random state left alone"
    with torch.random.fork_rng():
        torch.manual_seed(10 * seed + ('d_a', 'd_b').index(name))
        return PatchDiscriminator(in_ch=in_ch, ndf=4, n_layers=1, norm='instance')

def unpaired_dls(data, bs):
    "Unshuffled `UnpairedDL`s (item i of A with item i of B) over the (A, B) pairs `data`, validated on the first 4"
    n, val = len(data), data[:4]
    splits = [list(range(n)), list(range(n, n + len(val)))]
    tls = [TfmdLists([o[i] for o in data + val], None, splits=splits) for i in (0, 1)]
    dls = Datasets(tls=tls, n_inp=2).dataloaders(bs=bs, shuffle=False, device='cpu', dl_type=UnpairedDL)
    dls.in_ch = dls.out_ch = 3
    return dls

def make_cyclegan(path, seed, bs=2, data=None, **kw):
    "Tiny CycleGAN from `cyclegan_learner`, generators drawn under `seed`, discriminators built at the first batch (under `seed`)"
    set_seed(seed)
    learn = cyclegan_learner(unpaired_dls(data or items(), bs), ResnetGenerator(ngf=4, n_blocks=1), ResnetGenerator(ngf=4, n_blocks=1),
                             opt_func=partial(SGD, mom=0.9), cbs=GANCheckpoint(**kw), path=path)
    trainer(learn).make_discriminator = partial(tiny_d, seed)
    return learn

CUT_LAYERS = (0, 4, 8, 12)   # G with one residual block

def make_cut(path, seed, bs=2, data=None, **kw):
    "Tiny CUT from `cut_learner`, G and D drawn under `seed`; F's MLPs made at the first batch (from each rank's random state)"
    set_seed(seed)
    G = init_weights(ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True), 'xavier', 0.5)
    D = init_weights(PatchDiscriminator(3, ndf=4, n_layers=1, norm='instance', antialias=True), 'xavier', 0.5)
    return cut_learner(unpaired_dls(data or items(), bs), G, D, PatchSampleF(nc=16, gain=1.), opt_func=partial(SGD, mom=0.9),
                       cbs=GANCheckpoint(**kw), path=path, trainer_kwargs=dict(nce_layers=CUT_LAYERS, num_patches=64))

trainer = find_trainer   # the GAN trainer of a Learner

def nets(learn):
    "The state of the generator (`G`) and of every discriminator, by name"
    t = trainer(learn)
    return {'G': unwrap(learn.model).state_dict(), **{k: D.state_dict() for k, D in t.discriminators.items()},
            **({'F': t.sampler.state_dict()} if hasattr(t, 'sampler') else {})}

class Reduced(Callback):
    "The number of elements this process all-reduces itself in each training batch (DDP reduces G's gradients in its own way)"
    def before_fit(self):
        self.counts, self.orig = [], dist.all_reduce
        def counted(t, *args, **kwargs):
            if self.training: self.counts[-1] += t.numel()
            return self.orig(t, *args, **kwargs)
        dist.all_reduce = counted
    def before_batch(self):
        if self.training: self.counts.append(0)
    def after_fit(self): dist.all_reduce = self.orig

class Dump(Callback):
    "After epoch 0 (3 iterations), write this process's networks, optimizer states and image pools to `out/state{rank}.pt`"
    order = 70
    def __init__(self, out): self.out = out
    def after_epoch(self):
        if self.epoch: return
        t = trainer(self.learn)
        pools = {k: getattr(t, k).state_dict() for k in ('pool_a', 'pool_b') if hasattr(t, k)}
        f_opt = t.f_opt.state_dict() if getattr(t, 'f_opt', None) is not None else None
        torch.save(dict(nets=nets(self.learn), opt=self.opt.state_dict(), d_opt=t.d_opt.state_dict(), f_opt=f_opt, pools=pools,
                        reduced=self.learn.reduced.counts),
                   os.path.join(self.out, f'state{rank_distrib()}.pt'))

class Die(Callback):
    "This process is killed in the middle of epoch 1"
    def after_batch(self):
        if self.training and self.epoch == 1 and self.iter == 1: os.kill(os.getpid(), signal.SIGKILL)

if __name__ == '__main__':
    out, rank, mode = sys.argv[1], rank_distrib(), (sys.argv[2:] or ['pix2pix'])[0]
    cycle = mode == 'cyclegan'
    path = os.path.join(out, f'rank{rank}')
    # different initial weights on each rank: rank 0's must win
    learn = (make_cyclegan(path, seed=rank) if cycle else make_cut(path, seed=rank) if mode == 'cut'
             else make_learner(path, seed=rank, dgan=mode != 'plain'))
    learn.add_cbs([Reduced(), Dump(out)] + ([Die()] if rank == 1 and mode == 'pix2pix' else []))
    with warnings.catch_warnings(), learn.no_bar(), learn.no_logging(), learn.distrib_ctx():
        warnings.simplefilter('ignore')
        learn.fit(3 if mode == 'pix2pix' else 1, LR)
