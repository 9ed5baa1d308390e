"What the test modules share: tiny data and networks, quiet fits, state comparisons, the command line, and the pieces of the resume and signal tests."
import glob, json, os, random, signal, struct, sys, time, warnings
from contextlib import ExitStack
from unittest import mock
import torch
from torch import nn
from fastai.basics import Learner, L1LossFlat, MSELossFlat, set_seed, L
from fastai.callback.core import Callback
from fastai.data.core import Transform, DataLoaders
import fastai.callback.progress  # Learner.no_bar
import fastai.callback.schedule  # Learner.fit_one_cycle
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator, PatchDiscriminator
from gan_callbacks.data.folders import Pix2pixDataLoaders, UnpairedDataLoaders
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.gans.pix2pix import Pix2pixTrainer, pix2pix_learner
from gan_callbacks.gans.cyclegan import cyclegan_learner
from gan_callbacks.cli.parser import main

# --- fits, states, the command line

def tiny_learner(path, ngf=8, cbs=None, **kw):
    "A pix2pix Learner on 8 random 32-pixel pairs (B the flipped negative of A), seeded"
    set_seed(0)
    g = torch.Generator().manual_seed(0)
    A = torch.rand(8, 3, 32, 32, generator=g) * 2 - 1
    items = list(zip(A, -A.flip(-2)))
    dls = DataLoaders.from_dsets(items, items[:4], bs=4, num_workers=0, device='cpu')
    trainer = Pix2pixTrainer(PatchDiscriminator(ndf=8, n_layers=2))
    return Learner(dls, UnetGenerator(num_downs=5, ngf=ngf), loss_func=L1LossFlat(), opt_func=pix2pix_adam,
                   cbs=[trainer] + list(cbs or []), path=path, **kw)

def fit(learn, n=1, lr=1e-3, log=False, warn=True, **kw):
    "`learn.fit(n, lr)` without the progress bar, the printed table (unless `log`) and warnings (unless `warn`)"
    with ExitStack() as st:
        st.enter_context(learn.no_bar())
        if not log: st.enter_context(learn.no_logging())
        if not warn: st.enter_context(warnings.catch_warnings()); warnings.simplefilter('ignore')
        learn.fit(n, lr, **kw)

def quiet_fit(learn, n=4, one_cycle=False, **kw):
    "`n` epochs at 1e-3 (or one cycle at 2e-3), without bars, logs or warnings"
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        if one_cycle: learn.fit_one_cycle(n, 2e-3, **kw)
        else: learn.fit(n, 1e-3, **kw)

def state(m):
    "A copy of module `m`'s state dict"
    return {k: v.detach().clone() for k, v in m.state_dict().items()}

def assert_close(a, b, atol, rtol=0, dtype=None):
    "State dicts `a` and `b` have the same keys and tensors within `atol` and `rtol` (compared as `dtype` if given)"
    assert a.keys() == b.keys()
    cast = (lambda t: t) if dtype is None else (lambda t: t.to(dtype))
    for k in a: torch.testing.assert_close(cast(a[k]), cast(b[k]), atol=atol, rtol=rtol, msg=lambda m: f'{k}: {m}')

def assert_same(a, b):
    "Bitwise equal nested state (tensors, numbers, lists, dicts)"
    if isinstance(a, torch.Tensor): assert torch.equal(a, b); return
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a: assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple, L)):
        assert len(a) == len(b)
        for x, y in zip(a, b): assert_same(x, y)
    else: assert a == b

def run_cli(argv):
    "The exit code of the `gan_callbacks` command with arguments `argv` (any objects: each is made a string)"
    try: main([str(a) for a in argv]); return 0
    except SystemExit as e: return e.code

def train_options(argv):
    "The keyword arguments `main` hands to `train` for the command line `argv` (a `train` command), without training"
    got = {}
    with mock.patch('gan_callbacks.cli.commands.train', lambda **kw: got.update(kw)): main([str(a) for a in argv])
    return got

class HostReads:
    "Counts the calls that copy a tensor's value to the host (a sync on CUDA), by whether the library made them"
    names = ('item', 'tolist', 'cpu', 'numpy', '__bool__', '__float__', '__int__', '__format__')
    def __enter__(self):
        self.n, self.depth = {'library': 0, 'other': 0}, 0
        self.saved = {k: (k in torch.Tensor.__dict__, getattr(torch.Tensor, k)) for k in self.names}
        for k, (_, f) in self.saved.items(): setattr(torch.Tensor, k, self._counted(f))
        return self
    def _counted(self, f):
        def g(*args, **kwargs):
            if self.depth == 0:   # not the inner call of fastai's tensor subclasses
                caller = sys._getframe(1).f_code.co_filename
                self.n['library' if f'{os.sep}gan_callbacks{os.sep}' in caller else 'other'] += 1
            self.depth += 1
            try: return f(*args, **kwargs)
            finally: self.depth -= 1
        return g
    def __exit__(self, *exc):
        for k, (own, f) in self.saved.items():
            if own: setattr(torch.Tensor, k, f)
            else: delattr(torch.Tensor, k)

# --- tiny data and networks

def batches(n=3, bs=2, size=32, cin=3, cout=3, seed=0):
    "`n` batches of `bs` random (A, B) pairs in [-1, 1], `size` pixels square, with `cin` and `cout` channels"
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(bs, cin, size, size, generator=g)*2-1, torch.rand(bs, cout, size, size, generator=g)*2-1) for _ in range(n)]

def paired_dls(bs_list, valid=None):
    "Unshuffled paired loaders of `batches` `bs_list`, validating on `valid` (the first two pairs if not given)"
    items = [(a, b) for A, B in bs_list for a, b in zip(A, B)]
    v = valid or items[:2]
    return DataLoaders.from_dsets(items, v, bs=len(bs_list[0][0]), shuffle=False, device='cpu')

def unpaired_dls(bs_list, **kw):
    "Unpaired loaders (shuffled) of `batches` `bs_list`, validating on the first two pairs"
    items = Unpaired((a, b) for A, B in bs_list for a, b in zip(A, B))
    return DataLoaders.from_dsets(items, Unpaired(items[:2]), bs=len(bs_list[0][0]), device='cpu', **kw)

def mirror_dls(n=16, bs=4, size=32, cin=3, **kw):
    "Shuffled loaders of `n` random A and B = -A upside down (its first 3 channels), validating on the first 4"
    g = torch.Generator().manual_seed(0)
    A = torch.rand(n, cin, size, size, generator=g) * 2 - 1
    items = list(zip(A, -A[:, :3].flip(-2)))
    return DataLoaders.from_dsets(items, items[:4], bs=bs, device='cpu', **kw)

def flipped_dls(n=16, bs=4, size=32, cin=3):
    "`mirror_dls` with `RandFlip`: what a resumed fit must draw again the same"
    return mirror_dls(n, bs, size, cin, after_batch=RandFlip(), num_workers=0)

def pix2pix_nets(cin=3, cout=3, dropout=False):
    "A tiny pix2pix generator and discriminator, the same each call"
    torch.manual_seed(1)
    return UnetGenerator(cin, cout, num_downs=5, ngf=8, use_dropout=dropout), PatchDiscriminator(cin+cout, ndf=8, n_layers=2)

def cyclegan_nets(seed=1, ch=(3, 3)):
    "Tiny CycleGAN networks `(G_A, G_B, D_A, D_B)` for `ch` channels of A and B, under `seed`"
    torch.manual_seed(seed)
    a, b = ch
    return (ResnetGenerator(a, b, ngf=4, n_blocks=1), ResnetGenerator(b, a, ngf=4, n_blocks=1),
            PatchDiscriminator(b, ndf=8, n_layers=2, norm='instance'), PatchDiscriminator(a, ndf=8, n_layers=2, norm='instance'))

def synth_learner(n=32, bs=8, cbs=None, valid=True, model=None, **kwargs):
    "Linear regression on synthetic data: 2 training and (if `valid`) 2 validation batches per epoch"
    set_seed(0)
    x = torch.randn(n, 1); y = 2*x + 1
    dls = DataLoaders.from_dsets(list(zip(x[:n//2], y[:n//2])), list(zip(x[n//2:], y[n//2:])) if valid else [],
                                 bs=bs, device='cpu')
    learn = Learner(dls, model or nn.Linear(1, 1), loss_func=MSELossFlat(), cbs=cbs, **kwargs)
    learn.recorder.silent = True
    return learn

def synth_fit(learn, n=1, lr=0.1, **kwargs):
    "`fit` at `synth_learner`'s learning rate, its table printed"
    fit(learn, n, lr, log=True, **kwargs)

def pix2pix_on(path, **kw):
    "A tiny pix2pix learner on the A|B image folder `path`"
    dls = Pix2pixDataLoaders.from_folder(path, load_size=32, crop_size=32, bs=2, device='cpu')
    torch.manual_seed(0)
    return pix2pix_learner(dls, UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2), **kw)

def tiny_cyclegan(path):
    "A tiny CycleGAN learner on the unpaired image folder `path`"
    dls = UnpairedDataLoaders.from_folder(path, load_size=32, crop_size=32, bs=2, device='cpu')
    torch.manual_seed(0)
    g = lambda: ResnetGenerator(3, 3, ngf=4, n_blocks=1)
    d = lambda: PatchDiscriminator(3, ndf=8, n_layers=2, norm='instance')
    return cyclegan_learner(dls, g(), g(), d(), d(), pool_size=2)

# --- resume and signals

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

def make_learner(path, seed=0, cbs=None, trainer=True, given_d=True, ngf=8, opt_func=pix2pix_adam, **trainer_kw):
    "Tiny pix2pix (dropout on) under `seed`: everything random at construction depends on it"
    set_seed(seed)
    G = UnetGenerator(num_downs=5, ngf=ngf, use_dropout=True)
    tcb = [Pix2pixTrainer(PatchDiscriminator(ndf=8, n_layers=2) if given_d else None, **trainer_kw)] if trainer else []
    return Learner(flipped_dls(), G, loss_func=L1LossFlat(), opt_func=opt_func, cbs=tcb + L(cbs), path=path)

def cyclegan_resume_learner(path, seed=0, cbs=None):
    "Tiny CycleGAN with full pools on `unpaired_resume_dls` under `seed`"
    set_seed(seed)
    dls = unpaired_resume_dls()
    GA, GB, DA, DB = cyclegan_nets(seed)
    return cyclegan_learner(dls, GA, GB, DA, DB, pool_size=3, cbs=cbs, path=path)

def one_line(err):
    "The one line a command printed to stderr (warnings aside)"
    lines = [l for l in err.strip().splitlines() if l.startswith('gan_callbacks ')]
    assert len(lines) == 1 and 'Traceback' not in err, err
    return lines[0]

TINY = ['--epochs', 1, '--epochs-decay', 0, '--bs', 4, '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--n-samples', 1]   # a one-epoch pix2pix run of the command line on `tiny`

# --- W&B offline run files

def wandb_records(fn):
    "The records of an offline run file: a log of 32 KiB blocks of protobuf records after a 7-byte header"
    from wandb.proto import wandb_internal_pb2 as pb
    data, recs, i, buf = open(fn, 'rb').read(), [], 7, b''
    while i + 7 <= len(data):
        if 32768 - i % 32768 < 7: i += 32768 - i % 32768; continue
        _, n, kind = struct.unpack('<IHB', data[i:i+7])
        buf += data[i+7:i+7+n]; i += 7 + n
        if kind in (1, 4):
            r = pb.Record()
            try: r.ParseFromString(buf)
            except Exception: break   # a record still being written
            recs.append(r); buf = b''
        if kind == 0: i += 32768 - i % 32768   # zeros to the block's end
    return recs

def wandb_rows(run_dir, timeout=120):
    "The rows `wandb.log` wrote to an offline run, once the run file ends with its `exit` record (W&B's service may still be writing it)"
    fn, end = glob.glob(f'{run_dir}/run-*.wandb')[0], time.monotonic() + timeout
    while True:
        recs = wandb_records(fn)
        if any(r.WhichOneof('record_type') == 'exit' for r in recs) or time.monotonic() > end: break
        time.sleep(0.1)   # polling the file for the service's last record
    return [{('/'.join(it.nested_key) or it.key): json.loads(it.value_json) for it in r.history.item}
            for r in recs if r.WhichOneof('record_type') == 'history']
