"Two CPU processes over gloo: ranks identical, equal to one process on the global batches, rank-0-only files, a killed rank, resume on one process."
import sys, time, warnings
from pathlib import Path
import pytest, torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from fastai.callback.core import Callback
from gan_callbacks.distributed import launch
from gan_callbacks.checkpoint import load_checkpoint
sys.path.insert(0, str(Path(__file__).parent))
from distrib_worker import make_learner, items, LR

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

def fit(learn, n):
    with warnings.catch_warnings(), learn.no_bar(), learn.no_logging():
        warnings.simplefilter('ignore')
        learn.fit(n, LR)

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "One 2-process launch: 3 iterations (epoch 0, checkpointed), then rank 1 is killed in epoch 1"
    out = tmp_path_factory.mktemp('distrib')
    t0 = time.time()
    with pytest.raises(ChildFailedError) as e:
        launch([sys.executable, str(Path(__file__).parent/'distrib_worker.py'), str(out)], nproc=2)
    return out, e.value, time.time() - t0

def test_ranks_identical(run):
    out = run[0]
    s0, s1 = (torch.load(out/f'state{r}.pt', weights_only=False) for r in (0, 1))
    for k in ('G', 'D', 'opt', 'd_opt'): assert same(s0[k], s1[k]), k
    init = make_learner(out/'x', seed=1)   # rank 1's own initial G: replaced by rank 0's
    assert rel_err(init.model.state_dict(), s1['G']) > 0.1

class Keep(Callback):
    "A copy of G and D after epoch 0"
    def after_epoch(self):
        if self.epoch == 0: self.states = [{k: v.clone() for k, v in m.state_dict().items()} for m in (self.model, self.pix2pix_trainer.discriminator)]

@pytest.fixture(scope='module')
def one_process(tmp_path_factory):
    "The same training on one process, batches of 2b: rank 0's initial weights, 2 epochs"
    learn = make_learner(tmp_path_factory.mktemp('ref'), seed=0, bs=4, data=global_batches())
    learn.add_cb(Keep())
    init = {k: v.clone() for k, v in learn.model.state_dict().items()}
    fit(learn, 2)
    return learn, init

def test_equals_one_process(run, one_process):
    "Batch b on each of 2 processes == batch 2b on one, for G and for D: both networks' gradients are averaged"
    s0 = torch.load(run[0]/'state0.pt', weights_only=False)
    (G, D), init = one_process[0].keep.states, one_process[1]
    assert rel_err(G, s0['G']) < 1e-5 and rel_err(D, s0['D']) < 1e-5
    assert rel_err(init, G) > 1e-3   # the weights did move

def test_only_rank0_writes(run):
    out = run[0]
    assert [p.name for p in (out/'rank0').rglob('*') if p.is_file()] == ['gan_epoch0.pth']
    assert not [p for p in (out/'rank1').rglob('*') if p.is_file()]

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
    assert rel_err(ref.model.state_dict(), learn.model.state_dict()) < 1e-5
    assert rel_err(ref.pix2pix_trainer.discriminator.state_dict(), learn.pix2pix_trainer.discriminator.state_dict()) < 1e-5
