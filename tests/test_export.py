"`learn.export` of a pix2pix Learner on a user's own stock fastai `DataBlock`."
import numpy as np, pytest, torch
from pathlib import Path
from PIL import Image
from fastai.vision.all import DataBlock, ImageBlock, Resize, Normalize, IndexSplitter, Learner, L1LossFlat, load_learner, Transform
import gan_callbacks.data.folders   # registers how function transforms pickle
from gan_callbacks.nets.networks import UnetGenerator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer


def left(fn):
    "Left half of A|B file `fn`"
    im = Image.open(fn).convert('RGB'); return im.crop((0, 0, im.width//2, im.height))

def right(fn):
    "Right half of A|B file `fn`"
    im = Image.open(fn).convert('RGB'); return im.crop((im.width//2, 0, im.width, im.height))


def test_export_with_image_blocks(tmp_path):
    rng = np.random.default_rng(0)
    fns = []
    for i in range(4):
        fns.append(tmp_path/f'{i}.png'); Image.fromarray(rng.integers(0, 256, (32, 64, 3), dtype=np.uint8)).save(fns[-1])
    dblock = DataBlock(blocks=(ImageBlock, ImageBlock), get_x=left, get_y=right, splitter=IndexSplitter([3]),
                       item_tfms=Resize(32), batch_tfms=Normalize.from_stats(0.5, 0.5))
    dls = dblock.dataloaders(fns, bs=2, device='cpu')
    assert any(type(t) is Transform and 'encodes' in t.__dict__ for t in dls.train_ds.tls[0].tfms)   # a function transform
    learn = Learner(dls, UnetGenerator(num_downs=5, ngf=4), loss_func=L1LossFlat(), cbs=[Pix2pixTrainer()], path=tmp_path)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    learn.export('g.pkl')
    learn2 = load_learner(tmp_path/'g.pkl')
    _, raw, _ = learn2.predict(fns[3])
    learn.model.eval()
    x, _ = dls.valid.one_batch()
    with torch.no_grad(): torch.testing.assert_close(raw, learn.model(x)[0])
