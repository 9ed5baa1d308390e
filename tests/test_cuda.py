"""What needs a CUDA GPU: fp16 with its scalers, bf16, channels_last, torch.compile and nccl, on every registered model where it applies.

Marked `cuda` and skipped without a GPU; `make gpu-check` runs them on one."""
import os, socket, warnings
import pytest, torch
from fastai.torch_core import set_seed
import gan_callbacks.all   # registers the models
from gan_callbacks.trainer.registry import registered_models
from gan_callbacks.trainer.base import find_trainer
from gan_callbacks.trainer.distributed import unwrap
from helpers import quiet_fit, state

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')]
MODELS = list(registered_models())

def on_gpu(name, path, **kw):
    "The tiny Learner of model `name`, its data on the GPU"
    set_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        learn = registered_models()[name].tiny_learner(path, **kw)
    learn.dls.to(torch.device('cuda'))
    return learn

def trains(learn, n=2):
    "Fit `n` epochs: G moved, every loss finite, G and the batches on the GPU"
    quiet_fit(learn, 1)
    before = state(unwrap(learn.model))
    quiet_fit(learn, n - 1)
    assert next(learn.model.parameters()).device.type == 'cuda'
    assert any(not torch.equal(v, before[k]) for k, v in unwrap(learn.model).state_dict().items())
    assert all(torch.isfinite(torch.tensor(float(v))) for v in learn.recorder.values[-1] if v is not None)

@pytest.mark.parametrize('name', MODELS)
def test_fp16_trains_with_its_scalers(name, tmp_path):
    learn = on_gpu(name, tmp_path).to_fp16()
    trains(learn)
    scalers = find_trainer(learn).precision.scalers
    assert scalers and all(s.get_scale() > 0 for s in scalers.values())

@pytest.mark.parametrize('name', MODELS)
def test_bf16_trains(name, tmp_path):
    if not torch.cuda.is_bf16_supported(): pytest.skip('this GPU has no bfloat16')
    trains(on_gpu(name, tmp_path).to_bf16())

def test_channels_last_trains_in_that_layout(tmp_path):
    learn = on_gpu('pix2pix', tmp_path, trainer_kwargs=dict(channels_last=True))
    trains(learn)
    w = next(p for p in unwrap(learn.model).parameters() if p.ndim == 4 and p.shape[1] > 1)
    assert w.is_contiguous(memory_format=torch.channels_last)

def test_compile_trains(tmp_path):
    trains(on_gpu('pix2pix', tmp_path, trainer_kwargs=dict(compile=True)))

def test_nccl_averages_gradients_in_one_process():
    import torch.distributed as dist
    from gan_callbacks.trainer.distributed import average_grads
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    dist.init_process_group('nccl', init_method=f'tcp://127.0.0.1:{port}', world_size=1, rank=0)
    try:
        p = torch.nn.Parameter(torch.ones(3, device='cuda')); p.grad = torch.full((3,), 2., device='cuda')
        bad = average_grads([p], torch.tensor(False, device='cuda'))
        assert torch.equal(p.grad, torch.full((3,), 2., device='cuda')) and not bool(bad)
    finally: dist.destroy_process_group()
