"Nothing a user has is lost: model folders replaced under signals and kills, finished runs, ground truth and run files never overwritten."
import os, signal, subprocess, sys, textwrap
from pathlib import Path
import pytest, torch
from gan_callbacks.nets.networks import ResnetGenerator
from gan_callbacks.deploy.model_folder import write_model_folder, read_model_folder
from gan_callbacks.deploy.interop import load_generator
from helpers import run_cli as run, one_line, TINY

TESTS = str(Path(__file__).parent)

# --- a model folder replaced while a signal or a kill lands: the user's files are kept, or come back at the next use

REPLACE = '''
import os, signal, sys
sys.path.insert(0, {tests!r})
from helpers import default_signals
default_signals()
signal.signal(signal.SIGINT, signal.default_int_handler)   # as Python starts an interactive process
from pathlib import Path
from gan_callbacks.atomic import stop_on_sigterm
from gan_callbacks.deploy.model_folder import write_model_folder
from gan_callbacks.nets.networks import ResnetGenerator
out, sig, at = Path(sys.argv[1]), getattr(signal, sys.argv[2]), sys.argv[3]
real = dict(rename=os.rename, replace=os.replace)
def after(kind):
    "`os.rename` or `os.replace` that signals this process just after the call that moves what `at` names"
    def move(src, dst):
        real[kind](src, dst)
        if (at == 'user-file' and kind == 'rename' and Path(src).parent == out) or (at == 'folder' and Path(src) == out):
            os.kill(os.getpid(), sig)
    return move
os.rename, os.replace = after('rename'), after('replace')
with stop_on_sigterm(): write_model_folder(ResnetGenerator(ngf=4, n_blocks=2), out, sample=False)
'''

def _replace_under(out, sig, at):
    "Replace model folder `out` in a child process that gets signal `sig` just after the move `at`; its exit code"
    p = subprocess.run([sys.executable, '-c', REPLACE.format(tests=TESTS), str(out), sig, at], capture_output=True, text=True)
    return p.returncode, p.stderr

def _user_folder(tmp_path, n=40):
    out = write_model_folder(ResnetGenerator(ngf=4, n_blocks=1), tmp_path/'m', sample=False)
    notes = {f'note{i:02d}.txt': f'mine {i}' for i in range(n)}
    for k, v in notes.items(): (out/k).write_text(v)
    return out, notes

def _kept(out, notes): return {k: (out/k).read_text() for k in notes if (out/k).is_file()} == notes

def _blocks(folder): return read_model_folder(folder, 'cpu')[0].model.__len__()

@pytest.mark.parametrize('sig', ['SIGTERM', 'SIGINT'])
def test_a_stop_while_a_model_folder_is_replaced_keeps_every_file(tmp_path, sig):
    out, notes = _user_folder(tmp_path)
    old = _blocks(out)
    code, err = _replace_under(out, sig, 'user-file')
    assert code != 0 and ('Terminated' if sig == 'SIGTERM' else 'KeyboardInterrupt') in err, err
    assert _kept(out, notes)   # the stop waited for the renames: the new folder is in place, with every file of the user
    assert _blocks(out) != old and not list(tmp_path.glob('.m.*'))

@pytest.mark.parametrize('at', ['user-file', 'folder'])
def test_a_kill_while_a_model_folder_is_replaced_is_undone_at_the_next_use(tmp_path, at):
    out, notes = _user_folder(tmp_path)
    old = _blocks(out)
    code, _ = _replace_under(out, 'SIGKILL', at)
    assert code == -signal.SIGKILL and not _kept(out, notes)   # the kill stranded them
    assert _blocks(out) == old and _kept(out, notes) and not list(tmp_path.glob('.m.*'))   # reading puts them back
    code, _ = _replace_under(out, 'SIGKILL', at)
    write_model_folder(ResnetGenerator(ngf=4, n_blocks=3), out, sample=False)   # so does the next write
    assert _kept(out, notes) and _blocks(out) != old and not list(tmp_path.glob('.m.*'))


# --- a finished run is kept: a new `train` on its --out is refused before anything is written

def _files(d): return {p.relative_to(d): p.read_bytes() for p in sorted(Path(d).rglob('*')) if p.is_file()}

def test_a_new_train_on_a_finished_run_is_refused(trained, tiny, tmp_path, capsys):
    out = tmp_path/'run'
    import shutil; shutil.copytree(trained, out)
    before = _files(out)
    assert run(['train', '--data', tiny, '--out', out, *TINY]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f'gan_callbacks train: error: --out {out} holds an earlier run (summary.json, history.csv, generator.pkl, generator/, checkpoints/, run.yaml, losses.png, '
                           'samples_epoch000.png)')
    assert '--resume' in line and '--overwrite' in line
    assert _files(out) == before
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--overwrite']) == 0   # asked, it starts over
    assert (out/'summary.json').read_bytes() != before[Path('summary.json')]

def test_a_generator_folder_of_other_files_is_refused_before_training(tiny, tmp_path, capsys):
    out = tmp_path/'run'
    (out/'generator').mkdir(parents=True)
    (out/'generator'/'NOTES.txt').write_text('mine')
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--overwrite']) == 2
    line = one_line(capsys.readouterr().err)
    assert line == f"gan_callbacks train: error: --out {out}: train writes its model folder to {out/'generator'}, which holds other files: move them, or give another --out"
    assert sorted(p.name for p in out.rglob('*')) == ['NOTES.txt', 'generator']   # nothing trained, nothing written


# --- translate never replaces a file it did not write in this call, unless asked

def test_translate_does_not_overwrite_the_output(trained, tiny, tmp_path, capsys):
    truth = tmp_path/'B'
    truth.mkdir()
    for f in sorted((tiny/'val').iterdir()): (truth/f.name).write_bytes(b'ground truth')
    before = _files(truth)
    cmd = ['translate', '--model', trained/'generator', '--input', tiny/'val', '--output', truth, '--aligned']
    assert run(cmd) == 2
    name = sorted(before)[0]
    assert one_line(capsys.readouterr().err) == (f"gan_callbacks translate: error: --output {truth} already holds {name} and 1 more of the names "
                                                  "to write: give another --output, or --overwrite to replace them")
    assert _files(truth) == before
    assert run(cmd + ['--overwrite']) == 0 and all(v != b'ground truth' for v in _files(truth).values())


# --- the direction a model was trained in is the one it is used in

def test_the_recorded_direction_is_used(tiny, tmp_path):
    import json
    from PIL import Image
    out = tmp_path/'btoa'
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--direction', 'BtoA', '--test-mode', 'eval']) == 0
    assert json.loads((out/'generator'/'config.json').read_text())['training']['direction'] == 'BtoA'
    l1 = lambda *a: run(['evaluate', '--model', out/'generator', '--data', tiny, '--out', tmp_path/'e', '--overwrite', *a]) or \
        json.loads((tmp_path/'e'/'summary.json').read_text())['l1']
    assert l1() == l1('--direction', 'BtoA') != l1('--direction', 'AtoB')
    pair = sorted((tiny/'val').iterdir())[0]
    half = tmp_path/'half'/pair.name
    half.parent.mkdir()
    with Image.open(pair) as im: im.crop((im.width//2, 0, im.width, im.height)).save(half)   # B, the input of a B to A model
    assert run(['translate', '--model', out/'generator', '--input', pair, '--output', tmp_path/'t1', '--aligned']) == 0
    assert run(['translate', '--model', out/'generator', '--input', half, '--output', tmp_path/'t2']) == 0
    assert (tmp_path/'t1'/pair.name).read_bytes() == (tmp_path/'t2'/pair.name).read_bytes()


# --- export and evaluate never write over a run's files

def test_export_refuses_its_input_and_run_files(trained, tmp_path, capsys):
    import shutil
    run_dir = tmp_path/'run'
    shutil.copytree(trained, run_dir)
    before, ck = _files(run_dir), sorted((run_dir/'checkpoints').glob('*.pth'))[-1]
    for args, msg in ((['--model', ck, '--format', 'reference', '--out', ck], f'--out {ck} is the --model {ck} it exports'),
                      (['--model', ck, '--format', 'onnx', '--out', run_dir/'generator.pkl'], '--format onnx writes a .onnx file'),
                      (['--model', run_dir/'generator', '--format', 'onnx', '--out', run_dir/'generator'/'g.onnx'], 'is inside the --model'),
                      (['--model', run_dir/'generator', '--format', 'folder', '--out', run_dir/'generator'], 'is the --model')):
        assert run(['export', *args]) == 2
        assert msg in one_line(capsys.readouterr().err)
    assert _files(run_dir) == before
    x = tmp_path/'g.pth'
    assert run(['export', '--model', ck, '--format', 'reference', '--out', x]) == 0
    x.write_bytes(b'mine')
    assert run(['export', '--model', ck, '--format', 'reference', '--out', x]) == 2 and x.read_bytes() == b'mine'
    assert 'exists: give another --out, or --overwrite' in capsys.readouterr().err
    assert run(['export', '--model', ck, '--format', 'reference', '--out', x, '--overwrite']) == 0 and x.read_bytes() != b'mine'

def test_evaluate_refuses_a_run_folder_and_takes_its_lock(trained, tiny, tmp_path, capsys):
    import json, shutil, socket
    run_dir = tmp_path/'run'
    shutil.copytree(trained, run_dir)
    before = _files(run_dir)
    assert run(['evaluate', '--model', run_dir/'generator', '--data', tiny, '--out', run_dir]) == 2
    assert f"--out {run_dir} holds a training run (history.csv, generator.pkl, generator/, checkpoints/)" in capsys.readouterr().err
    assert _files(run_dir) == before
    ev = tmp_path/'ev'
    ev.mkdir()
    p = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)   # a live process holds the lock
    try:
        (ev/'.gan_callbacks.lock').write_text(json.dumps(dict(pid=p.pid, host=socket.gethostname(), started='2026-01-01 00:00:00',
                                                             command='gan_callbacks evaluate')))
        assert run(['evaluate', '--model', run_dir/'generator', '--data', tiny, '--out', ev]) == 2
        assert f'--out {ev} is in use by another run (PID {p.pid}' in capsys.readouterr().err
    finally: p.kill(); p.wait()


# --- a resume trains what the checkpoint trained, or says what differs

def test_a_resume_with_other_options_is_refused(trained, tiny, tmp_path, capsys):
    import shutil
    out = tmp_path/'run'
    shutil.copytree(trained, out)
    before = _files(out)
    more = [*TINY, '--epochs', 2, '--resume']
    for args, was, asks in ((['--lambda-l1', 10], 'lambda_l1=100.0', 'lambda_l1=10.0'), (['--ema'], 'ema=None', 'ema=True'),
                            (['--gan-mode', 'lsgan', '--lr', 1e-3], "lr=0.0002, gan_mode='vanilla'", "lr=0.001, gan_mode='lsgan'")):
        assert run(['train', '--data', tiny, '--out', out, *more, *args]) == 2
        line = one_line(capsys.readouterr().err)
        assert f'gan_epoch0.pth was trained with {was}; this fit asks for {asks}: resume with the same options' in line, line
        assert '--allow-changes' in line
        assert _files(out) == before
    assert run(['train', '--data', tiny, '--out', out, *more, '--lambda-l1', 10, '--allow-changes']) == 0   # told, it resumes
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--epochs', 3, '--resume']) == 2   # the option the last resume changed holds
