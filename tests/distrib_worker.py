"One process of the 2-process test in test_distributed.py (`python distrib_worker.py OUT`): 3 iterations, then rank 1 is killed."
import os, sys, signal, warnings
import torch
from fastai.basics import Learner, DataLoaders, Callback, L1LossFlat, set_seed, SGD, partial
import fastai.callback.progress  # Learner.no_bar
from fastai.distributed import rank_distrib
from gan_callbacks.models import UnetGenerator, PatchDiscriminator
from gan_callbacks.pix2pix import Pix2pixTrainer
from gan_callbacks.checkpoint import GANCheckpoint
from gan_callbacks.distributed import DistributedGAN, unwrap

LR = 1e-3

def items(n=12, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(n, 3, size, size, generator=g) * 2 - 1
    B = torch.rand(n, 3, size, size, generator=g) * 2 - 1
    return list(zip(A, B))

def make_learner(path, seed, bs=2, data=None, **kw):
    "Tiny instance-norm pix2pix, its initial weights drawn under `seed`, on unshuffled data"
    set_seed(seed)
    G = UnetGenerator(num_downs=5, ngf=8, norm='instance', use_dropout=False)
    D = PatchDiscriminator(ndf=8, n_layers=2, norm='instance')
    data = data or items()
    dls = DataLoaders.from_dsets(data, data[:4], bs=bs, shuffle=False, device='cpu')
    return Learner(dls, G, loss_func=L1LossFlat(), opt_func=partial(SGD, mom=0.9), path=path,
                   cbs=[Pix2pixTrainer(D), DistributedGAN(), GANCheckpoint(**kw)])

class Dump(Callback):
    "After epoch 0 (3 iterations), write this process's networks and optimizer states to `out/state{rank}.pt`"
    order = 70
    def __init__(self, out): self.out = out
    def after_epoch(self):
        if self.epoch: return
        t = self.pix2pix_trainer
        torch.save(dict(G=unwrap(self.model).state_dict(), D=t.discriminator.state_dict(), opt=self.opt.state_dict(),
                        d_opt=t.d_opt.state_dict()), os.path.join(self.out, f'state{rank_distrib()}.pt'))

class Die(Callback):
    "This process is killed in the middle of epoch 1"
    def after_batch(self):
        if self.training and self.epoch == 1 and self.iter == 1: os.kill(os.getpid(), signal.SIGKILL)

if __name__ == '__main__':
    out, rank = sys.argv[1], rank_distrib()
    learn = make_learner(os.path.join(out, f'rank{rank}'), seed=rank)   # different initial weights: rank 0's must win
    learn.add_cbs([Dump(out)] + ([Die()] if rank == 1 else []))
    with warnings.catch_warnings(), learn.no_bar(), learn.no_logging(), learn.distrib_ctx():
        warnings.simplefilter('ignore')
        learn.fit(3, LR)
