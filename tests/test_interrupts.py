"A run stopped after its last epoch: its generator and model folder are written by the same writer as a complete run's."
import json
import pytest
from fastai.callback.core import Callback
from gan_callbacks.cli.runs import train
from gan_callbacks.callback.checkpoint import GANCheckpoint
from gan_callbacks.cli.interrupts import Interrupted
from gan_callbacks.data.label_maps import sample_labels

class CtrlCAfterFit(Callback):
    "Ctrl-C just after the last epoch's checkpoint was saved"
    order = GANCheckpoint.order + 1
    def after_epoch(self):
        if self.epoch == self.n_epoch - 1: raise KeyboardInterrupt

def test_pix2pixhd_stopped_after_its_last_epoch_records_its_label_settings(tmp_path):
    data = sample_labels(tmp_path/'labels', n_train=4, n_valid=2, size=32, label_nc=4)
    out = tmp_path/'run'
    with pytest.raises(Interrupted, match='the generator is in'):
        train(data=data, out=out, model='pix2pixhd', epochs=1, epochs_decay=0, bs=2, load_size=32, ngf=8, n_samples=1, seed=0,
              precision='fp32', label_nc=4, n_downsampling=2, n_blocks=1, ndf=8, vgg='off', cbs=[CtrlCAfterFit()])
    cfg = json.loads((out/'generator'/'config.json').read_text())
    assert cfg['label_nc'] == 4 and cfg['instance'] is True and cfg['size'] == 32
    assert cfg['training']['model'] == 'pix2pixhd' and cfg['training']['label_nc'] == 4 and cfg['training']['seed'] == 0
    assert (out/'generator.pkl').is_file()
