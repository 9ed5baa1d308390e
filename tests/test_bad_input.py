"Bad input gives a clear error, early, and changes nothing."
import pytest, torch
from fastai.basics import Learner, DataLoaders, L1LossFlat, set_seed
import fastai.callback.progress  # Learner.no_bar
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.callback.checkpoint import GANCheckpoint, load_checkpoint
from gan_callbacks.atomic import CheckpointError
from helpers import fit, tiny_learner


def weights(learn): return {k: v.clone() for k, v in learn.model.state_dict().items()}


# --- checkpoints

@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    "A directory with one checkpoint of the tiny learner"
    path = tmp_path_factory.mktemp('saved')
    fit(tiny_learner(path, cbs=[GANCheckpoint()]))
    return path

def test_truncated_checkpoint(saved, tmp_path):
    data = (saved/'models'/'gan_epoch0.pth').read_bytes()
    bad = tmp_path/'half.pth'
    bad.write_bytes(data[:len(data)//3])
    with pytest.raises(CheckpointError, match=r'half\.pth: it is truncated or corrupt'): load_checkpoint(tiny_learner(tmp_path), bad)
    (tmp_path/'empty.pth').write_bytes(b'')
    with pytest.raises(CheckpointError, match=r'empty\.pth: it is truncated or corrupt'):
        load_checkpoint(tiny_learner(tmp_path), tmp_path/'empty.pth')

def test_checkpoint_of_another_architecture(saved):
    learn = tiny_learner(saved, ngf=4, cbs=[GANCheckpoint(resume=True)])
    w = weights(learn)
    with pytest.raises(CheckpointError, match=r'(?s)does not fit the generator.*\(8, 3, 4, 4\) in the checkpoint, \(4, 3, 4, 4\) in the model'):
        fit(learn)
    assert all(torch.equal(w[k], v) for k, v in learn.model.state_dict().items())

def test_output_dir_that_is_a_file(tmp_path):
    (tmp_path/'models').write_text('not a directory')
    learn = tiny_learner(tmp_path, cbs=[GANCheckpoint()])
    w = weights(learn)
    with pytest.raises(CheckpointError, match='Cannot write checkpoints to .*models: .*models is a file, not a directory'): fit(learn)
    assert all(torch.equal(w[k], v) for k, v in learn.model.state_dict().items())   # failed before training

def test_unwritable_model_dir(tmp_path):
    # permissions do not stop root: a model directory under a file cannot be created by anyone
    (tmp_path/'blocker').write_text('a file')
    learn = tiny_learner(tmp_path, cbs=[GANCheckpoint()], model_dir=tmp_path/'blocker'/'models')
    with pytest.raises(CheckpointError, match='blocker is a file, not a directory'): fit(learn)


# data, networks and trainer

from PIL import Image
from gan_callbacks.data.folders import Pix2pixDataLoaders
from gan_callbacks.gans.pix2pix import pix2pix_learner

def aligned_folder(root, n=4, size=32, bad=None):
    for split in ('train', 'val'):
        (root/split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.new('RGB', (2*size, size), (i*40, 80, 200 - i*30)).save(root/split/f'{i:02d}.png')
    if bad: (root/'train'/bad).write_bytes(b'\x89PNG\r\n\x1a\n not really a png')
    return root

def test_channels_of_data_and_generator_disagree(tmp_path):
    dls = Pix2pixDataLoaders.from_folder(aligned_folder(tmp_path), load_size=36, crop_size=32, bs=2, in_ch=1, device='cpu')
    learn = Learner(dls, UnetGenerator(in_ch=3, num_downs=5, ngf=8), cbs=Pix2pixTrainer(), opt_func=pix2pix_adam)
    w0 = weights(learn)
    with pytest.raises(ValueError, match='UnetGenerator expected 3 input channels, got 1'): fit(learn)
    assert all(torch.equal(v, w0[k]) for k, v in learn.model.state_dict().items())

def test_channels_of_data_and_discriminator_disagree(tmp_path):
    dls = Pix2pixDataLoaders.from_folder(aligned_folder(tmp_path), load_size=36, crop_size=32, bs=2, in_ch=1, device='cpu')
    learn = Learner(dls, UnetGenerator(in_ch=1, num_downs=5, ngf=8), opt_func=pix2pix_adam,
                    cbs=Pix2pixTrainer(PatchDiscriminator(in_ch=6, ndf=8, n_layers=2)))
    w0 = weights(learn)
    with pytest.raises(ValueError, match='PatchDiscriminator expected 6 input channels, got 4'): fit(learn)
    assert all(torch.equal(v, w0[k]) for k, v in learn.model.state_dict().items())

def test_size_the_unet_cannot_take(tmp_path):
    with pytest.raises(ValueError, match='multiples? of 32'):
        UnetGenerator(num_downs=5, ngf=8)(torch.zeros(1, 3, 48, 48))
    dls = Pix2pixDataLoaders.from_folder(aligned_folder(tmp_path, size=48), load_size=52, crop_size=48, bs=2, device='cpu')
    with pytest.raises(ValueError, match='divisible by 32'): pix2pix_learner(dls)
    with pytest.raises(ValueError, match='32'):
        Pix2pixDataLoaders.from_folder(tmp_path, load_size=52, crop_size=48, num_downs=5)

def test_empty_dataset(tmp_path):
    (tmp_path/'train').mkdir()
    with pytest.raises((ValueError, FileNotFoundError), match='train'): Pix2pixDataLoaders.from_folder(tmp_path, crop_size=32, load_size=36)

def test_corrupt_image_in_the_middle_of_a_folder(tmp_path):
    aligned_folder(tmp_path, bad='02b.png')
    with pytest.raises((ValueError, OSError), match='02b.png'): Pix2pixDataLoaders.from_folder(tmp_path, crop_size=32, load_size=36)
