"Sweeps: a grid trained on several seeds, its table, plots and best run config; pruning; workers sharing a study; a killed sweep going on."
import os, subprocess, sys, textwrap
import pytest
from PIL import Image
from helpers import run_cli, one_line, train_options

optuna = pytest.importorskip('optuna')
TINY = ['--epochs', 1, '--epochs-decay', 0, '--bs', 4, '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--n-samples', 1]

def _trials(storage, study='sweep'):
    return optuna.load_study(study_name=study, storage=storage).get_trials()

def test_a_sweep_writes_its_table_plots_and_best_config(tiny, tmp_path, capsys):
    out = tmp_path/'sw'
    assert run_cli(['sweep', '--data', tiny, '--out', out, '--grid', 'lambda-l1=1,100', '--seeds', 2, '--metric', 'l1', *TINY]) == 0
    printed = capsys.readouterr().out
    trials = _trials(f"sqlite:///{out/'sweep.db'}")
    assert [t.state.name for t in trials] == ['COMPLETE', 'COMPLETE'] and [t.params for t in trials] == [{'lambda_l1': 1.}, {'lambda_l1': 100.}]
    for t in trials:   # each configuration trained once per seed, scored by the mean of its seeds' last validation L1
        l1s = [float((out/f'trial_{t.number:03d}'/f'seed_{s}'/'history.csv').read_text().splitlines()[-1].split(',')[2]) for s in (0, 1)]
        assert t.value == pytest.approx(sum(l1s) / 2, rel=1e-5) and l1s[0] != l1s[1]
    best = min(trials, key=lambda t: t.value)
    table = (out/'sweep.md').read_text()
    rows = [l for l in table.splitlines() if l.startswith('| best') or l.startswith('|  |')]
    assert len(rows) == 2 and rows[0].startswith(f"| best | {best.number} | lambda_l1={best.params['lambda_l1']}") and ' ± ' in rows[0]
    said = next(l for l in table.splitlines() if l.startswith('Best by l1:'))
    assert said in printed and ('beyond the seeds' in said or 'within the seeds' in said)
    assert 'gan_callbacks sweep --data' in table   # the command that made it
    for png in ('scores', 'history', 'importances', 'intermediate'):
        with Image.open(out/f'{png}.png') as im: assert im.format == 'PNG' and min(im.size) > 100
    assert 'sweep.csv' in printed and len((out/'sweep.csv').read_text().splitlines()) == 3
    # the best configuration, as a run config: train --config trains the best trial's first seed again, bitwise
    got = train_options(['train', '--config', out/'best_run.yaml', '--out', tmp_path/'again'])
    assert got['lambda_l1'] == best.params['lambda_l1'] and got['seed'] == 0
    assert run_cli(['train', '--config', out/'best_run.yaml', '--out', tmp_path/'again']) == 0
    first = out/f'trial_{best.number:03d}'/'seed_0'/'generator'/'model.safetensors'
    assert (tmp_path/'again'/'generator'/'model.safetensors').read_bytes() == first.read_bytes()
    # the same command again trains nothing more and writes the table again
    assert run_cli(['sweep', '--data', tiny, '--out', out, '--grid', 'lambda-l1=1,100', '--seeds', 2, '--metric', 'l1', *TINY]) == 0
    assert '2 finished already' in capsys.readouterr().out and len(_trials(f"sqlite:///{out/'sweep.db'}")) == 2

def test_a_sweep_config_file_and_the_command_line(tiny, tmp_path, capsys):
    cfg = tmp_path/'sweep.yaml'
    cfg.write_text(textwrap.dedent(f"""\
        data: {tiny}
        grid: {{recipe: [paper, modern]}}
        seeds: 1
        metric: ssim
        lambda_l1: 10
        epochs: 1
        epochs_decay: 0
        bs: 4
        load_size: 36
        crop_size: 32
        ngf: 8
        n_samples: 1
        """))
    out = tmp_path/'sw'
    assert run_cli(['sweep', '--config', cfg, '--out', out, '--lambda-l1', 20]) == 0   # the command line wins
    trials = _trials(f"sqlite:///{out/'sweep.db'}")
    assert sorted(t.params['recipe'] for t in trials) == ['modern', 'paper']
    assert 'lambda_l1: 20.0' in (out/'trial_000'/'seed_0'/'run.yaml').read_text()
    assert 'One seed has no spread' in capsys.readouterr().out

@pytest.mark.parametrize('argv,msg', [
    (['--grid', 'lambda-l1=x'], "--grid lambda_l1='x': --lambda-l1 takes a number"),
    (['--grid', 'foo=1,2'], '--grid foo=1,2: train has no option --foo'),
    (['--grid', 'recipe=paper,old'], "--grid recipe='old': --recipe is one of"),
    (['--grid', 'seed=1,2'], "--grid seed: a sweep's seeds are --seeds N"),
    (['--seed', '1'], '--seed: a sweep trains each trial on seeds 0..N-1'),
    (['--nproc', '2'], '--nproc: a sweep trains each trial in its own process'),
    (['--range', 'lr=1e-4:1e-3:log'], '--range draws numbers, which a grid cannot list'),
    (['--sampler', 'tpe', '--range', 'lr=1e-4:1e-3'], '--sampler tpe needs --n-trials N'),
    (['--grid', 'lambda-l1=1,2', '--lambda-l1', '3'], '--grid lambda_l1: --lambda-l1 is also given as a fixed option'),
])
def test_a_bad_sweep_is_one_line_and_writes_nothing(tiny, tmp_path, capsys, argv, msg):
    out = tmp_path/'sw'
    assert run_cli(['sweep', '--data', tiny, '--out', out, *argv, *TINY]) == 2
    assert msg in one_line(capsys.readouterr().err)
    assert not out.exists()

def test_a_study_started_otherwise_and_a_metric_the_model_lacks_are_refused(tiny, unpaired, tmp_path, capsys):
    out = tmp_path/'sw'
    assert run_cli(['sweep', '--data', tiny, '--out', out, '--grid', 'lambda-l1=1', '--seeds', 1, *TINY]) == 0
    capsys.readouterr()
    assert run_cli(['sweep', '--data', tiny, '--out', out, '--grid', 'lambda-l1=1', '--seeds', 2, *TINY]) == 2
    assert 'was started with other settings: seeds [0] (now [0, 1])' in one_line(capsys.readouterr().err)
    assert run_cli(['sweep', '--data', unpaired, '--out', tmp_path/'cyc', '--model', 'cyclegan', '--metric', 'psnr', '--grid', 'lambda-a=10',
                    '--seeds', 1, *TINY]) == 2
    assert '--metric psnr: --model cyclegan has no validation psnr (it has: l1; swd with --swd)' in one_line(capsys.readouterr().err)
    assert [t.state.name for t in _trials(f"sqlite:///{tmp_path/'cyc'/'sweep.db'}")] == ['FAIL']   # and its configuration free again

def test_without_optuna_the_error_says_what_to_install(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'optuna', None)   # import optuna fails
    assert run_cli(['sweep', '--data', tiny, '--out', tmp_path/'sw', '--grid', 'lambda-l1=1,2', *TINY]) == 2
    assert 'sweep needs Optuna: pip install "gan_callbacks[sweep]"' in one_line(capsys.readouterr().err)

def test_a_hopeless_trial_is_pruned_after_its_first_epoch(tiny, tmp_path):
    from gan_callbacks.cli.sweeps import sweep
    o = dict(epochs=3, epochs_decay=0, bs=4, load_size=36, crop_size=32, ngf=8, n_samples=1)
    s = sweep(data=tiny, out=tmp_path/'sw', grid=dict(lambda_l1=[100.]), seeds=2, metric='psnr', quiet=True,
              pruner=optuna.pruners.ThresholdPruner(lower=1e6), **o)   # no PSNR reaches a million dB: pruned at its first report
    (t,) = s.get_trials()
    assert t.state.name == 'PRUNED' and list(t.intermediate_values) == [0]
    hist = (tmp_path/'sw'/'trial_000'/'seed_0'/'history.csv').read_text().splitlines()
    assert len(hist) == 2   # the header and one epoch of three; the second seed never started
    assert not (tmp_path/'sw'/'trial_000'/'seed_1').exists()
    table = (tmp_path/'sw'/'sweep.md').read_text()
    assert '| pruned | 0 | lambda_l1=100.0 |' in table and 'No trial finished' in table and not (tmp_path/'sw'/'best_run.yaml').exists()

def test_the_median_pruner_stops_a_trial_worse_than_the_median(tiny, tmp_path):
    "Optuna's median rule at the reported steps: the worst of six trials at its first epoch is stopped there"
    from gan_callbacks.cli.sweeps import ReportEpochs
    s = optuna.create_study(direction='maximize', pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0))
    for v in (10., 11., 12., 13., 14.):
        t = s.ask(); t.report(v, 0); s.tell(t, v)
    t = s.ask()
    cb = ReportEpochs(t, 'psnr', 'psnr')
    cb.learn = type('L', (), dict(recorder=type('R', (), dict(metric_names=['epoch', 'train_loss', 'psnr', 'time'], values=[[0.5, 9.]]))(),
                                   epoch=0))()
    with pytest.raises(optuna.TrialPruned, match='pruned after epoch 0: psnr 9'): cb.after_epoch()

def _sweep_cmd(tiny, out, storage, *more):
    return [sys.executable, '-m', 'gan_callbacks', 'sweep', '--data', str(tiny), '--out', str(out), '--storage', storage, '--study', 'shared',
            '--seeds', '1', *map(str, TINY), *more]

@pytest.mark.slow
def test_two_workers_share_one_study_and_train_each_configuration_once(tiny, tmp_path):
    storage = f"sqlite:///{tmp_path/'shared.db'}"
    grid = ['--grid', 'lambda-l1=1,10,100,1000', '--grid', 'gan-mode=vanilla,lsgan']
    ps = [subprocess.Popen(_sweep_cmd(tiny, tmp_path/f'w{i}', storage, *grid), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for i in (1, 2)]
    outs = [p.communicate(timeout=900) for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    done = [t for t in _trials(storage, 'shared') if t.state.name == 'COMPLETE']
    assert len(done) == 8 and len({tuple(sorted(t.params.items())) for t in done}) == 8
    runs = list(tmp_path.glob('w*/trial_*/seed_0/history.csv'))
    assert len(runs) == 8   # eight fits in all: none trained twice
    assert {t.user_attrs['pid'] for t in done} == {p.pid for p in ps}   # both workers trained
    for i in (1, 2): assert (tmp_path/f'w{i}'/'sweep.md').read_text().count('| lambda_l1=') >= 1

_KILLED = """
import os, signal, sys
from gan_callbacks.cli import sweeps
from gan_callbacks.cli.parser import main
def after_epoch(self, orig=sweeps.ReportEpochs.after_epoch):
    orig(self)
    if self.trial.number == 1: os.kill(os.getpid(), signal.SIGKILL)   # killed in the second trial, after its first epoch
sweeps.ReportEpochs.after_epoch = after_epoch
main(sys.argv[1:])
"""

@pytest.mark.slow
def test_a_killed_sweep_goes_on_where_it_was(tiny, tmp_path, capsys):
    out, storage = tmp_path/'sw', f"sqlite:///{tmp_path/'sw'/'sweep.db'}"
    argv = ['sweep', '--data', tiny, '--out', out, '--grid', 'lambda-l1=1,100', '--seeds', 1, '--epochs', 2, *TINY[2:]]
    p = subprocess.run([sys.executable, '-c', _KILLED, *map(str, argv)], capture_output=True, text=True, timeout=900)
    assert p.returncode == -9, p.stderr
    assert [t.state.name for t in _trials(storage)] == ['COMPLETE', 'RUNNING']
    assert run_cli(argv) == 0
    printed = capsys.readouterr().out
    assert 'Trials 1 of a sweep process no longer running: marked failed, to be trained again' in printed
    trials = _trials(storage)
    assert [t.state.name for t in trials] == ['COMPLETE', 'FAIL', 'COMPLETE']
    assert trials[2].params == trials[1].params == {'lambda_l1': 100.}   # the killed configuration, trained again
    assert (out/'sweep.md').read_text().count('| lambda_l1=') == 2

def test_a_list_of_configurations_and_options_their_model_lacks(tiny, unpaired, tmp_path, capsys):
    cfg = tmp_path/'sweep.yaml'
    cfg.write_text(f"data: {tiny}\nseeds: 1\nmetric: l1\ngrid:\n- {{recipe: paper}}\n- {{recipe: paper, num-d: 2, lambda-feat: 10}}\n")
    out = tmp_path/'sw'
    assert run_cli(['sweep', '--config', cfg, '--out', out, *TINY]) == 0
    trials = _trials(f"sqlite:///{out/'sweep.db'}")
    assert [t.params for t in trials] == [dict(recipe='paper', num_d=None, lambda_feat=None), dict(recipe='paper', num_d=2, lambda_feat=10)]
    assert 'num_d: 1' in (out/'trial_000'/'seed_0'/'run.yaml').read_text() and 'num_d: 2' in (out/'trial_001'/'seed_0'/'run.yaml').read_text()
    assert '| recipe=paper num_d=2 lambda_feat=10 |' in (out/'sweep.md').read_text()
    capsys.readouterr()
    cfg.write_text(f"data: {unpaired}\nmodel: cut\ngrid:\n- {{recipe: paper}}\n- {{num_d: 2}}\n")
    assert run_cli(['sweep', '--config', cfg, '--out', tmp_path/'cut', '--metric', 'l1', *TINY]) == 2
    assert 'num_d=2: --num-d is not an option of --model cut' in one_line(capsys.readouterr().err)
    assert not (tmp_path/'cut').exists()
    cfg.write_text(f"data: {tiny}\ngrid:\n- {{num_d: two}}\n")
    assert run_cli(['sweep', '--config', cfg, '--out', tmp_path/'x', *TINY]) == 2
    assert "grid: num_d: 'two' is not a value --num-d takes" in one_line(capsys.readouterr().err)
    cfg.write_text(f"data: {tiny}\ngrid: {{lambda-l1: [10, x]}}\n")   # a mapping's every value checked
    assert run_cli(['sweep', '--config', cfg, '--out', tmp_path/'x', *TINY]) == 2
    assert "grid: lambda_l1: 'x' is not a value --lambda-l1 takes" in one_line(capsys.readouterr().err)

def test_reclaim_takes_back_a_gone_process_here_and_a_stale_trial_anywhere(tmp_path):
    import socket, time
    from gan_callbacks.cli.sweeps import reclaim
    s = optuna.create_study(storage=f"sqlite:///{tmp_path/'s.db'}")
    p = subprocess.Popen([sys.executable, '-c', 'pass']); p.wait()   # a process that is gone
    here_gone, here_live, elsewhere, elsewhere_old = (s.ask() for _ in range(4))
    for t, host, pid, alive in ((here_gone, socket.gethostname(), p.pid, time.time()), (here_live, socket.gethostname(), os.getpid(), time.time()),
                                (elsewhere, 'another-machine', 1, time.time()), (elsewhere_old, 'another-machine', 1, time.time() - 7200)):
        for k, v in dict(host=host, pid=pid, alive=alive).items(): t.set_user_attr(k, v)
    assert reclaim(s) == [0]
    assert reclaim(s, stale_after=3600) == [3]
    assert [t.state.name for t in s.get_trials()] == ['FAIL', 'RUNNING', 'RUNNING', 'FAIL']

def test_optuna_samplers_draw_n_trials_from_ranges_and_a_grid(tiny, tmp_path):
    from gan_callbacks.cli.sweeps import sweep
    o = dict(epochs=1, epochs_decay=0, bs=4, load_size=36, crop_size=32, ngf=8, n_samples=1)
    s = sweep(data=tiny, out=tmp_path/'sw', grid=dict(gan_mode=['vanilla', 'lsgan']), ranges=dict(lr=(1e-4, 1e-3, 'log'), lambda_l1=(10, 100)),
              sampler='random', n_trials=3, seeds=1, metric='l1', quiet=True, **o)
    trials = s.get_trials()
    assert len(trials) == 3 and all(t.state.name == 'COMPLETE' for t in trials)
    for t in trials:
        assert 1e-4 <= t.params['lr'] <= 1e-3 and isinstance(t.params['lambda_l1'], int) and t.params['gan_mode'] in ('vanilla', 'lsgan')
        run = (tmp_path/'sw'/f'trial_{t.number:03d}'/'seed_0'/'run.yaml').read_text()
        assert f"lr: {t.params['lr']}" in run and f"lambda_l1: {t.params['lambda_l1']}" in run   # what was drawn is what trained
    assert len({t.params['lr'] for t in trials}) == 3

_OPEN = """
import sys, optuna
from gan_callbacks.cli.sweeps import _storage
_storage(optuna, sys.argv[1])
"""

@pytest.mark.slow
def test_workers_started_together_on_a_new_database_all_open_it(tmp_path):
    "Each creates the new file's tables; the later ones met an IntegrityError on alembic's version row, about one round in two"
    for r in range(3):
        url = f"sqlite:///{tmp_path/f'new{r}.db'}"
        ps = [subprocess.Popen([sys.executable, '-c', _OPEN, url], stderr=subprocess.PIPE, text=True) for _ in range(5)]
        errs = [p.communicate(timeout=300)[1] for p in ps]
        assert [p.returncode for p in ps] == [0] * 5, [e.strip().splitlines()[-1] for e in errs if e.strip()]

def test_a_sweep_folder_belongs_to_one_study_and_a_study_to_its_data(tiny, pairs, tmp_path, capsys):
    "Study b in study a's --out is refused before anything is trained, a's files kept; study a on other data is refused too"
    out = tmp_path/'sw'
    assert run_cli(['sweep', '--data', tiny, '--out', out, '--study', 'a', '--grid', 'lambda-l1=1', '--seeds', 1, *TINY]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob('*')) if p.is_file() and p.name != 'sweep.db'}
    capsys.readouterr()
    assert run_cli(['sweep', '--data', tiny, '--out', out, '--study', 'b', '--grid', 'lambda-l1=1', '--seeds', 1, *TINY]) == 2
    assert one_line(capsys.readouterr().err) == (f"gan_callbacks sweep: error: --out {out} holds the sweep of study 'a' in "
                                                 f"sqlite:///{out/'sweep.db'}: give study 'b' another --out")
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob('*')) if p.is_file() and p.name != 'sweep.db'} == before
    assert run_cli(['sweep', '--data', pairs, '--out', out, '--study', 'a', '--grid', 'lambda-l1=1', '--seeds', 1, *TINY]) == 2
    line = one_line(capsys.readouterr().err)
    assert 'was started with other settings: data' in line and str(pairs.resolve()) in line, line

@pytest.mark.parametrize('argv,msg', [
    (['--grid', 'lr=' + ','.join(str(i) for i in range(100)), '--grid', 'lambda-l1=' + ','.join(str(i) for i in range(100)),
      '--grid', 'ngf=' + ','.join(str(i + 1) for i in range(1000))], '--grid gives 10,000,000 configurations: a sweep trains at most 100,000'),
    (['--grid', 'lambda-l1=1', '--seeds', 10**9], '--seeds 1,000,000,000: a sweep trains each configuration on at most 10,000 seeds'),
])
def test_a_huge_sweep_is_refused_before_it_is_listed(tiny, tmp_path, capsys, argv, msg):
    import time
    t = time.perf_counter()
    assert run_cli(['sweep', '--data', tiny, '--out', tmp_path/'sw', *argv, *TINY]) == 2
    assert msg in one_line(capsys.readouterr().err) and time.perf_counter() - t < 20
    assert not (tmp_path/'sw').exists()
