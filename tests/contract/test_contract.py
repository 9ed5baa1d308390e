"""The contract every registered model keeps: one suite over `registered_models()`, so a model added to the registry is tested with no test written for it.

Each model trains tiny networks on tiny data its record describes (`GANModel.tiny`, `tiny_data`), on the CPU."""
import warnings
import pytest, torch
import matplotlib; matplotlib.use('Agg')
from fastai.learner import load_learner
from fastai.callback.core import Callback
from fastai.torch_core import set_seed
import gan_callbacks.all   # the gans wing registers its models
from gan_callbacks.trainer.registry import registered_models, cli_name
from gan_callbacks.trainer.distributed import unwrap
from gan_callbacks.trainer.base import find_trainer
from gan_callbacks.callback.checkpoint import GANCheckpoint, export_learner
from gan_callbacks.deploy.model_folder import write_model_folder
from gan_callbacks.deploy.interop import load_generator
from gan_callbacks.deploy.inference import translate_batch
from gan_callbacks.cli.sweeps import _check_models
from gan_callbacks.cli.preflight import CLIError
from helpers import quiet_fit, state, assert_same, run_cli

MODELS = list(registered_models())

def tiny(model, path, seed=0, **kw):
    "The tiny Learner of `model` in `path`, seeded"
    set_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return registered_models()[model].tiny_learner(path, **kw)

def weights(learn):
    "A copy of G's and every D's weights"
    t = find_trainer(learn)
    return {'G': state(unwrap(learn.model)), **{n: state(getattr(t, n)) for n in t.d_names}}

def a_batch(learn): return learn.dls.valid.one_batch()

@pytest.fixture(scope='module', params=MODELS)
def fitted(request, tmp_path_factory):
    "Each registered model, trained one epoch: (its name, the Learner, G's and D's weights before the fit)"
    learn = tiny(request.param, tmp_path_factory.mktemp(request.param))
    quiet_fit(learn, 1)   # builds D at the first batch
    return request.param, learn

def test_fit_trains_both_networks(fitted, tmp_path):
    name, _ = fitted
    learn = tiny(name, tmp_path)
    quiet_fit(learn, 1)
    before = weights(learn)
    quiet_fit(learn, 1)
    after = weights(learn)
    assert before.keys() == after.keys() and len(after) >= 2   # G and at least one D
    for net in after: assert any(not torch.equal(before[net][k], after[net][k]) for k in after[net]), f"{name}: {net} did not train"
    losses = [float(v) for v in learn.recorder.values[-1] if v is not None]
    assert losses and all(torch.isfinite(torch.tensor(losses)))

def test_translate_and_predict(fitted):
    name, learn = fitted
    x = a_batch(learn)[0]
    out = translate_batch(learn, x)
    assert out.shape[0] == x.shape[0] and out.shape[-2:] == x.shape[-2:] and out.abs().max() <= 1
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        preds, _ = learn.get_preds(dl=learn.dls.valid)
    assert preds.shape[0] == len(learn.dls.valid_ds) or preds.shape[0] >= 1

def test_show_results(fitted):
    name, learn = fitted
    import matplotlib.pyplot as plt
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        learn.show_results(max_n=2)
    assert plt.get_fignums()
    plt.close('all')

@pytest.mark.parametrize('one_cycle', [False, True])
def test_save_and_load(fitted, tmp_path, one_cycle):
    name, _ = fitted
    learn = tiny(name, tmp_path)
    quiet_fit(learn, 1, one_cycle=one_cycle)
    learn.save('both')
    other = tiny(name, tmp_path, seed=1)
    quiet_fit(other, 1)   # D exists before loading into it
    other.load('both')
    assert_same(weights(other), weights(learn))

def test_export_and_load_learner(fitted):
    name, learn = fitted
    fn = export_learner(learn, 'export.pkl')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        back = load_learner(fn)
    x = a_batch(learn)[0].cpu()
    assert torch.equal(translate_batch(back, x), translate_batch(learn, x))

def test_model_folder_round_trip(fitted, tmp_path):
    name, learn = fitted
    write_model_folder(learn.model, tmp_path/'generator', dict(size=32), training=dict(model=name))
    G = load_generator(tmp_path/'generator')
    assert_same(state(unwrap(learn.model)), state(G))   # CycleGAN: both generators

class StopAt(Callback):
    "Ctrl-C as epoch `epoch` begins"
    order = 100
    def __init__(self, epoch): self.at = epoch
    def before_epoch(self):
        if self.epoch == self.at: raise KeyboardInterrupt

def test_checkpoint_resume_is_bitwise(fitted, tmp_path):
    name, _ = fitted
    ref = tiny(name, tmp_path/'ref')
    quiet_fit(ref, 2, cbs=GANCheckpoint())
    stopped = tiny(name, tmp_path/'run')
    with pytest.raises(KeyboardInterrupt): quiet_fit(stopped, 2, cbs=[GANCheckpoint(), StopAt(1)])
    resumed = tiny(name, tmp_path/'run', seed=1234)   # another process: other initial weights and loader seeds
    quiet_fit(resumed, 2, cbs=GANCheckpoint(resume=True))
    assert_same(weights(resumed), weights(ref))

def cli_options(model):
    "The command line of a tiny run of `model`: its record's tiny options, spelled by `cli_name`"
    m = registered_models()[model]
    opts = {**m.tiny, **{k: v for k, v in m.tiny_data.get('loaders', {}).items() if k != 'num_downs'}}
    if m.data == 'labels': opts.pop('crop_size', None)
    args = [a for k, v in opts.items() for a in (cli_name(k), 'off' if v is False else v)]
    return ['--model', model, '--epochs', 1, '--epochs-decay', 0, '--n-samples', 1, '--seed', 0, *args]

def test_command_line_train_translate_evaluate_export(fitted, tmp_path):
    name, learn = fitted
    m = registered_models()[name]
    data = m.sample(tmp_path/'data', **m.tiny_data.get('sample', {}))
    out = tmp_path/'run'
    assert run_cli(['train', '--data', data, '--out', out, *cli_options(name)]) == 0
    folder = out/'generator'
    assert (folder/'config.json').is_file() and (folder/'model.safetensors').is_file()
    import json
    cfg = json.loads((folder/'config.json').read_text())
    assert cfg['model_type'] == name and cfg['training']['model'] == name
    for k in m.folder: assert cfg.get(k) is not None, f"{name}: its model folder does not record {k}"
    inputs = next(p for p in (data/'val_label', data/'testA', data/'val') if p.is_dir())
    inst = ['--instances', data/'val_inst'] if (data/'val_inst').is_dir() else []   # label maps come with their instance maps
    assert run_cli(['translate', '--model', folder, '--input', inputs, '--output', tmp_path/'translated', *inst]) == 0
    assert len(list((tmp_path/'translated').iterdir())) == len(list(inputs.iterdir()))
    assert run_cli(['export', '--model', folder, '--format', 'folder', '--out', tmp_path/'copy']) == 0
    assert_same(state(load_generator(tmp_path/'copy')), state(load_generator(folder)))
    assert run_cli(['export', '--model', folder, '--format', 'onnx', '--out', tmp_path/'G.onnx']) == 0   # checked against onnxruntime
    assert (tmp_path/'G.onnx').stat().st_size > 0
    if m.data != 'unpaired':   # evaluate scores translations against true targets
        assert run_cli(['evaluate', '--model', folder, '--data', data, '--out', tmp_path/'evaluation']) == 0

def test_sweep_checks_the_model_options(fitted):
    name, _ = fitted
    _check_models([{}], {'model': name})   # the model itself is known to a sweep
    with pytest.raises(CLIError, match=f'not an option of --model {name}'): _check_models([{'no_such_option': 1}], {'model': name})

def test_train_runs_the_registered_record(fitted):
    "`train --model NAME` runs the record registered as NAME: its schedule and validation columns are the record's"
    from gan_callbacks.cli.runs import train_runs
    name, _ = fitted
    run, m = train_runs[name], registered_models()[name]
    assert run.model is m and run.schedule == m.schedule and run.columns == m.columns and run.fit == m.fit
