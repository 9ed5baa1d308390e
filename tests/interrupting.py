"Shared by the resume and signal tests: a Ctrl-C at a chosen batch, augmentation to reproduce, a short quiet GAN fit, and children that get signals as a shell's would."
import random, signal, time, warnings
import torch
from fastai.callback.core import Callback
from fastai.data.core import Transform, DataLoaders

class Interrupt(Callback):
    "A Ctrl-C in training batch `batch` of epoch `epoch`"
    def __init__(self, epoch=2, batch=1): self.at = (epoch, batch)
    def after_batch(self):
        if self.training and (self.epoch, self.iter) == self.at: raise KeyboardInterrupt

def run_gan(learn, n=3):
    "`n` epochs of `fit_gan` (the last one decaying), without bars, logs or warnings"
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit_gan(n - 1, 1, lr=2e-3)

class RandFlip(Transform):
    "Random flips (python's `random`) and noise (torch): augmentation the random states must reproduce"
    order = 90
    def encodes(self, x: torch.Tensor): return (x.flip(-1) if random.random() < 0.5 else x) + 0.01 * torch.randn_like(x)

def default_signals():
    "In the child: SIGINT and SIGTERM as a shell's foreground job gets them, whatever the test runner's were"
    signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGTERM, signal.SIG_DFL)

def wait_for(cond, p, timeout=900):
    "Poll `cond` until true, or fail if process `p` ended or `timeout` seconds passed"
    t0 = time.monotonic()
    while not cond():
        assert p.poll() is None, f"the child ended early: {p.communicate()}"
        assert time.monotonic() - t0 < timeout, 'timed out'
        time.sleep(0.005)

class Unpaired(list):
    "(real_A, real_B) items: two model inputs, no target"
    n_inp = 2
    def new_empty(self): return type(self)()

def unpaired_resume_dls():
    "Shuffled unpaired loaders of 8 random pairs, batches of 2, with `RandFlip`: what a resumed fit must draw again the same"
    g = torch.Generator().manual_seed(0)
    A, B = torch.rand(8, 3, 16, 16, generator=g)*2-1, torch.rand(8, 3, 16, 16, generator=g)*2-1
    items = Unpaired(zip(A, B))
    return DataLoaders.from_dsets(items, Unpaired(items[:2]), bs=2, after_batch=RandFlip(), device='cpu')   # shuffled
