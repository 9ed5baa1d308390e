"Shared by the resume tests: a Ctrl-C at a chosen batch, and a short quiet GAN fit."
import warnings
from fastai.callback.core import Callback

class Interrupt(Callback):
    "A Ctrl-C in training batch `batch` of epoch `epoch`"
    def __init__(self, epoch=2, batch=1): self.at = (epoch, batch)
    def after_batch(self):
        if self.training and (self.epoch, self.iter) == self.at: raise KeyboardInterrupt

def run_gan(learn, n=3):
    "`n` epochs of `fit_gan` (the last one decaying), without bars, logs or warnings"
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit_gan(n - 1, 1, lr=2e-3)
