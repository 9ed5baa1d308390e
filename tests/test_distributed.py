"Two CPU processes over gloo, pix2pix and CycleGAN: ranks identical, equal to one process on the global batches, rank-0-only files, a killed rank, resume on one process."
import sys, time, warnings
from pathlib import Path
import pytest, torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from fastai.callback.core import Callback
from gan_callbacks.trainer.distributed import launch
from gan_callbacks.callback.checkpoint import load_checkpoint
sys.path.insert(0, str(Path(__file__).parent))
from distrib_worker import make_learner, make_cyclegan, make_cut, items, nets, trainer, tiny_d, LR
from helpers import fit as quiet

pytestmark = pytest.mark.slow   # several processes: `make test-all`

WORKER = str(Path(__file__).parent/'distrib_worker.py')

def same(a, b):
    "Bitwise equal nested state"
    if torch.is_tensor(a): return torch.equal(a, b)
    if isinstance(a, dict): return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b

def rel_err(ref, got):
    "Relative error of state dict `got` against `ref`, over all its tensors together"
    d = torch.cat([(ref[k].float() - got[k].float()).flatten() for k in ref])
    return (d.norm() / torch.cat([ref[k].float().flatten() for k in ref]).norm()).item()

def global_batches(bs=2, world=2):
    "The items in the order one process must see them to get, batch after batch, what `world` processes see together"
    it = items(); n = len(it) // world   # `DistributedDL` gives rank r the r-th contiguous slice of the epoch
    return [x for k in range(0, n, bs) for r in range(world) for x in it[r*n + k: r*n + k + bs]]

def fit(learn, n): quiet(learn, n, LR, warn=False)

@pytest.fixture(scope='module', autouse=True)
def one_thread():
    "One thread in this process: on a busy 2-core machine two threads wait on each other, ten times slower"
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

def d_size(s): return sum(v.numel() for k, sd in s['nets'].items() if k != 'G' for v in sd.values())

def copy(sd): return {k: v.clone() for k, v in sd.items()}

def files(d): return sorted(str(p.relative_to(d)) for p in d.rglob('*') if p.is_file())

class Keep(Callback):
    "A copy of the networks (and image pools) after epoch 0"
    def after_epoch(self):
        if self.epoch: return
        t = trainer(self.learn)
        self.nets = {k: copy(v) for k, v in nets(self.learn).items()}
        self.pools = {k: getattr(t, k).state_dict() for k in ('pool_a', 'pool_b') if hasattr(t, k)}

# --- pix2pix

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "One 2-process launch: 3 iterations (epoch 0, checkpointed), then rank 1 is killed in epoch 1"
    out = tmp_path_factory.mktemp('distrib')
    t0 = time.time()
    with pytest.raises(ChildFailedError) as e: launch([sys.executable, WORKER, str(out)], nproc=2)
    return out, e.value, time.time() - t0

def test_ranks_identical(run):
    out = run[0]
    s0, s1 = (torch.load(out/f'state{r}.pt', weights_only=False) for r in (0, 1))
    for k in ('nets', 'opt', 'd_opt'): assert same(s0[k], s1[k]), k
    # each iteration all-reduces D's gradients and two skip flags (D's step, G's): DDP alone averages G's gradients
    assert s0['reduced'] == [d_size(s0) + 2] * 3
    init = make_learner(out/'x', seed=1)   # rank 1's own initial G: replaced by rank 0's
    assert rel_err(init.model.state_dict(), s1['nets']['G']) > 0.1

@pytest.fixture(scope='module')
def one_process(tmp_path_factory):
    "The same training on one process, batches of 2b: rank 0's initial weights, 2 epochs"
    learn = make_learner(tmp_path_factory.mktemp('ref'), seed=0, bs=4, data=global_batches())
    learn.add_cb(Keep())
    init = copy(learn.model.state_dict())
    fit(learn, 2)
    return learn, init

def test_equals_one_process(run, one_process):
    "Batch b on each of 2 processes == batch 2b on one, for G and for D: both networks' gradients are averaged"
    s0 = torch.load(run[0]/'state0.pt', weights_only=False)['nets']
    ref, init = one_process[0].keep.nets, one_process[1]
    for k in ('G', 'discriminator'): assert rel_err(ref[k], s0[k]) < 1e-5, k
    assert rel_err(init, ref['G']) > 1e-3   # the weights did move

def test_only_rank0_writes(run):
    out = run[0]
    assert files(out/'rank0') == ['models/gan_epoch0.pth'] and files(out/'rank1') == []

def test_killed_rank(run):
    "The killed rank ends the launch with an error naming it; the others do not hang; the last checkpoint loads"
    out, err, secs = run
    assert 1 in err.failures and secs < 120
    assert err.failures[1].signal_name() == 'SIGKILL'
    learn = make_learner(out/'y', seed=3)
    load_checkpoint(learn, out/'rank0'/'models'/'gan_epoch0.pth')   # intact: written atomically before the kill

def test_resume_on_one_process(run, one_process):
    "A 2-process checkpoint continues on one process like the one-process run it equals"
    ref = one_process[0]
    learn = make_learner(run[0]/'res', seed=7, bs=4, data=global_batches(), resume=run[0]/'rank0'/'models'/'gan_epoch0.pth')
    fit(learn, 2)
    assert learn.gan_checkpoint.resumed_from is not None
    for k, v in nets(ref).items(): assert rel_err(v, nets(learn)[k]) < 1e-5, k

def test_a_trainer_adds_distributed_gan_once(tmp_path):
    "Given to the `Learner`, or added later: `DistributedGAN` comes with the trainer, once"
    from gan_callbacks.trainer.distributed import DistributedGAN
    from gan_callbacks.gans.pix2pix import Pix2pixTrainer
    count = lambda learn: sum(isinstance(cb, DistributedGAN) for cb in learn.cbs)
    assert count(make_learner(tmp_path, seed=0, dgan=False)) == 1 and count(make_learner(tmp_path, seed=0)) == 1
    learn = make_learner(tmp_path, seed=0, dgan=False)
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, (DistributedGAN, Pix2pixTrainer))])
    learn.add_cb(Pix2pixTrainer(tiny_d(0, 'd_a', in_ch=6)))
    assert count(learn) == 0
    fit(learn, 1)
    assert count(learn) == 1

def launched(tmp_path_factory, kind):
    "The folder of one 2-process launch of the worker's `kind` fit"
    out = tmp_path_factory.mktemp(kind)
    launch([sys.executable, WORKER, str(out), kind], nproc=2)
    return out

@pytest.fixture(scope='module')
def plain_run(tmp_path_factory):
    "One 2-process launch of `Learner(dls, G, cbs=[Pix2pixTrainer(D), ...])` under fastai's `learn.distrib_ctx()`: 3 iterations"
    return launched(tmp_path_factory, 'plain')

def test_a_trainer_brings_what_distrib_ctx_needs(plain_run, one_process):
    "No `DistributedGAN` given: the trainer adds it; ranks identical, D's gradients averaged, equal to one process on the global batch"
    s0, s1 = (torch.load(plain_run/f'state{r}.pt', weights_only=False) for r in (0, 1))
    for k in ('nets', 'opt', 'd_opt'): assert same(s0[k], s1[k]), k
    assert s0['reduced'] == [d_size(s0) + 2] * 3
    ref = one_process[0].keep.nets
    for k in ('G', 'discriminator'): assert rel_err(ref[k], s0['nets'][k]) < 1e-5, k
    assert files(plain_run/'rank0') == ['models/gan_epoch0.pth'] and files(plain_run/'rank1') == []

# --- CycleGAN: `cyclegan_learner`, unpaired loaders, discriminators built at the first batch, image pools of 50
# (still filling after 3 iterations: they return each fake as it comes, so the runs compare exactly)

@pytest.fixture(scope='module')
def cycle_run(tmp_path_factory):
    "One 2-process CycleGAN launch: 3 iterations of batch 2 per process, checkpointed"
    return launched(tmp_path_factory, 'cyclegan')

@pytest.fixture(scope='module')
def cycle_one_process(tmp_path_factory):
    "The same CycleGAN training on one process, batches of 4: rank 0's initial weights, 2 epochs"
    learn = make_cyclegan(tmp_path_factory.mktemp('cref'), seed=0, bs=4, data=global_batches())
    learn.add_cb(Keep())
    init = {'G': copy(learn.model.state_dict()), **{k: tiny_d(0, k).state_dict() for k in ('d_a', 'd_b')}}
    fit(learn, 2)
    return learn, init

def test_cyclegan_ranks_identical(cycle_run):
    "G_A, G_B, D_A, D_B and both optimizers bitwise the same on both ranks, though each rank drew its own"
    s0, s1 = (torch.load(cycle_run/f'state{r}.pt', weights_only=False) for r in (0, 1))
    for k in ('nets', 'opt', 'd_opt'): assert same(s0[k], s1[k]), k
    assert s0['nets'].keys() == {'G', 'd_a', 'd_b'} and any(k.startswith('g_b.') for k in s0['nets']['G'])
    assert s0['reduced'] == [d_size(s0) + 2] * 3   # D_A's and D_B's gradients and two flags: G's are DDP's alone
    own = make_cyclegan(cycle_run/'x', seed=1)   # rank 1's own generators, and its own discriminators (built lazily)
    assert rel_err(own.model.state_dict(), s1['nets']['G']) > 0.1
    for k in ('d_a', 'd_b'): assert rel_err(tiny_d(1, k).state_dict(), s1['nets'][k]) > 0.1

def test_cyclegan_equals_one_process(cycle_run, cycle_one_process):
    "Batch b on each of 2 processes == batch 2b on one, for all four networks: every gradient averaged, G's once"
    s0 = torch.load(cycle_run/'state0.pt', weights_only=False)['nets']
    ref, init = cycle_one_process[0].keep.nets, cycle_one_process[1]
    for name in ('g_a', 'g_b'):
        part = lambda sd: {k: v for k, v in sd.items() if k.startswith(name + '.')}
        assert rel_err(part(ref['G']), part(s0['G'])) < 1e-5, name
        assert rel_err(part(init['G']), part(ref['G'])) > 1e-3, name   # the weights did move, far more than the tolerance
    for k in ('d_a', 'd_b'):
        assert rel_err(ref[k], s0[k]) < 1e-5, k
        assert rel_err(init[k], ref[k]) > 1e-3, k

def test_cyclegan_pools_per_rank(cycle_run, cycle_one_process):
    "Each rank pools its own fakes: together they are the one-process pool, batch by batch"
    p0, p1 = (torch.load(cycle_run/f'state{r}.pt', weights_only=False)['pools'] for r in (0, 1))
    ref = cycle_one_process[0].keep.pools
    for k in ('pool_a', 'pool_b'):
        a, b, r = p0[k]['images'], p1[k]['images'], ref[k]['images']
        assert len(a) == len(b) == 6 and len(r) == 12 and not torch.equal(a, b)
        both = torch.cat([torch.cat([a[i:i+2], b[i:i+2]]) for i in range(0, 6, 2)])   # batch i: rank 0's 2 fakes, then rank 1's
        torch.testing.assert_close(both, r, atol=1e-5, rtol=0)

def test_cyclegan_only_rank0_writes(cycle_run):
    assert files(cycle_run/'rank0') == ['models/gan_epoch0.pth'] and files(cycle_run/'rank1') == []

def test_cyclegan_checkpoint_holds_rank0_pools(cycle_run):
    learn = make_cyclegan(cycle_run/'chk', seed=8)
    load_checkpoint(learn, cycle_run/'rank0'/'models'/'gan_epoch0.pth')
    p0 = torch.load(cycle_run/'state0.pt', weights_only=False)['pools']
    for k in ('pool_a', 'pool_b'): assert torch.equal(torch.cat(getattr(trainer(learn), k).images), p0[k]['images'])

def test_cyclegan_resume_on_one_process(cycle_run, cycle_one_process):
    "A 2-process CycleGAN checkpoint continues on one process like the one-process run it equals"
    ref, ck = cycle_one_process[0], cycle_run/'rank0'/'models'/'gan_epoch0.pth'
    learn = make_cyclegan(cycle_run/'res', seed=7, bs=4, data=global_batches(), resume=ck)
    t = trainer(learn)
    fit(learn, 2)
    assert learn.gan_checkpoint.resumed_from == ck
    for k, v in nets(ref).items(): assert rel_err(v, nets(learn)[k]) < 1e-5, k
    assert len(t.pool_a) == 6 + 12 and len(trainer(ref).pool_a) == 12 + 12   # rank 0's half of the history, then its own

# --- CUT: `cut_learner`, G and D given, the sampler F's MLPs made at the first batch on each rank

@pytest.fixture(scope='module')
def cut_run(tmp_path_factory):
    "One 2-process CUT launch: 3 iterations of batch 2 per process"
    out = tmp_path_factory.mktemp('cut')
    launch([sys.executable, WORKER, str(out), 'cut'], nproc=2)
    return out

def test_cut_ranks_identical_with_the_sampler_shared(cut_run):
    "G, D, F and their three optimizers bitwise the same on both ranks; D's and F's gradients all-reduced by the library"
    s0, s1 = (torch.load(cut_run/f'state{r}.pt', weights_only=False) for r in (0, 1))
    for k in ('nets', 'opt', 'd_opt', 'f_opt'): assert same(s0[k], s1[k]), k
    assert s0['nets'].keys() == {'G', 'discriminator', 'F'} and s0['f_opt'] is not None
    n_grads = sum(v.numel() for k in ('discriminator', 'F') for n, v in s0['nets'][k].items() if not n.endswith('filt'))
    assert s0['reduced'] == [n_grads + 2] * 3   # D's and F's gradients and two flags: G's are DDP's alone
    own = make_cut(cut_run/'x', seed=1)   # rank 1's own G and D: rank 0's won
    assert rel_err(own.model.state_dict(), s1['nets']['G']) > 0.1


def test_accelerate_launch_on_the_cpu_needs_multi_gpu(tmp_path):
    "As `06l_distributed` says: `accelerate launch --cpu --num_processes 2` starts one process, `--multi_gpu --num_processes 2` two"
    import os, subprocess
    script = tmp_path/'world.py'
    script.write_text("from fastai.torch_core import num_distrib, rank_distrib\nprint('world', num_distrib(), rank_distrib(), flush=True)\n")
    accelerate = Path(sys.executable).parent/'accelerate'
    def worlds(*flags):
        env = dict(os.environ, OMP_NUM_THREADS='1', CUDA_VISIBLE_DEVICES='')
        r = subprocess.run([str(accelerate), 'launch', *flags, '--num_processes', '2', '--num_machines', '1', '--mixed_precision', 'no',
                            '--dynamo_backend', 'no', str(script)], capture_output=True, text=True, env=env, timeout=120)
        return sorted(l.split()[1:] for l in r.stdout.splitlines() if l.startswith('world'))
    assert worlds('--cpu') == [['0', '0']]                   # one process, not distributed
    assert worlds('--multi_gpu') == [['2', '0'], ['2', '1']]


# --- a lost worker: torchrun's agent starts the group again, and the run resumes from its last checkpoint

def _pid_of_rank(rank, out):
    "The process of `rank` in the launch writing to `out`, found by its environment"
    for p in Path('/proc').iterdir():
        try: env = dict(kv.split('=', 1) for kv in (p/'environ').read_bytes().decode(errors='replace').split('\0') if '=' in kv)
        except (OSError, ValueError): continue
        if env.get('RANK') == str(rank) and str(out) in env.get('GAN_CALLBACKS_LAUNCH_ARGV', ''): return int(p.name)
    return None

def test_a_lost_worker_is_restarted_and_the_run_resumes(tiny, tmp_path):
    import csv, os, signal, subprocess
    from safetensors.torch import load_file
    from helpers import default_signals, wait_for
    def cmd(out, *more):
        return [sys.executable, '-m', 'gan_callbacks', 'train', '--data', str(tiny), '--out', str(out), '--epochs', '6', '--epochs-decay', '4',
                '--bs', '1', '--load-size', '36', '--crop-size', '32', '--ngf', '8', '--n-samples', '1', '--seed', '0', '--precision', 'fp32',
                '--nproc', '2', *more]
    env = dict(os.environ, OMP_NUM_THREADS='1')
    assert subprocess.run(cmd(tmp_path/'ref'), env=env, capture_output=True, preexec_fn=default_signals).returncode == 0
    out = tmp_path/'lost'
    p = subprocess.Popen(cmd(out, '--max-restarts', '1'), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=default_signals)
    wait_for(lambda: (out/'checkpoints'/'gan_epoch0.pth').is_file(), p)
    wait_for(lambda: _pid_of_rank(1, out) is not None, p)
    os.kill(_pid_of_rank(1, out), signal.SIGKILL)   # a lost machine
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log[-3000:]
    a, b = (load_file(str(d/'generator'/'model.safetensors')) for d in (tmp_path/'ref', out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)   # the run an uninterrupted one is, bitwise
    rows = [[r[:-1] for r in csv.reader(open(d/'history.csv'))] for d in (tmp_path/'ref', out)]   # all but the time column
    assert rows[0] == rows[1] and len(rows[0]) == 11
    assert 'starting the processes again (1 of --max-restarts 1), from the last checkpoint' in log
    # without restarts: the run ends, the survivor says so in one line, no traceback
    out = tmp_path/'ended'
    p = subprocess.Popen(cmd(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_signals)
    wait_for(lambda: (out/'checkpoints'/'gan_epoch0.pth').is_file(), p)
    wait_for(lambda: _pid_of_rank(1, out) is not None, p)
    os.kill(_pid_of_rank(1, out), signal.SIGKILL)
    log, _ = p.communicate(timeout=600)
    assert p.returncode != 0 and 'Traceback' not in log, log[-3000:]
    assert 'rank 1 (SIGKILL) failed, the other processes were stopped' in log
    # rank 0 either found its peer gone (one line) or was stopped by the agent first (the line saying how to resume)
    assert 'rank 0: another process of the run ended; stopped' in log or 'resume with' in log, log[-3000:]
