"Fixtures the test modules share: small image datasets on disk, made once per module."
import pytest
from gan_callbacks.data.samples import sample_pairs, sample_unpaired
from helpers import run_cli, TINY

@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    "8 training and 2 validation A|B pairs of 32 pixels"
    return sample_pairs(tmp_path_factory.mktemp('home')/'sample', n_train=8, n_valid=2, size=32)

@pytest.fixture(scope='module')
def pairs(tmp_path_factory): return sample_pairs(tmp_path_factory.mktemp('p')/'pairs', n_train=4, n_valid=2, size=32)

@pytest.fixture(scope='module')
def unpaired(tmp_path_factory): return sample_unpaired(tmp_path_factory.mktemp('u')/'unpaired', n_train=4, n_test=2, size=32)

@pytest.fixture(scope='module')
def trained(tiny, tmp_path_factory):
    "A one-epoch pix2pix run of the command line on `tiny`: its output folder"
    out = tmp_path_factory.mktemp('run')
    assert run_cli(['train', '--data', tiny, '--out', out, *TINY]) == 0
    return out
