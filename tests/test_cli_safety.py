"The `gan_callbacks` command under hostile but realistic use: outputs over inputs, pickles, two runs on one folder, signals at any moment, unreadable and unwritable files."
import json, os, pickle, shlex, signal, socket, subprocess, sys
from pathlib import Path
import pytest, torch
from gan_callbacks.cli.parser import main
from gan_callbacks.data.samples import sample_pairs
from helpers import default_signals, wait_for, run_cli as run, one_line, TINY

pytestmark = pytest.mark.slow   # signals, locks and whole runs of the command: `make test-all`

EXE = str(Path(sys.executable).parent/'gan_callbacks')



# --- translate: the output never replaces an input

def test_translate_refuses_to_write_over_its_input(trained, tiny, tmp_path, capsys):
    imgs = tmp_path/'imgs'
    imgs.mkdir()
    for f in sorted((tiny/'val').iterdir()): (imgs/f.name).write_bytes(f.read_bytes())
    before = {f.name: f.read_bytes() for f in imgs.iterdir()}
    model = trained/'generator'
    one = sorted(imgs.iterdir())[0]
    (tmp_path/'link').symlink_to(imgs)
    for inp, outp in ((imgs, imgs), (one, imgs), (imgs, tmp_path/'link'), (one, tmp_path/'.'/'imgs')):
        capsys.readouterr()
        assert run(['translate', '--model', model, '--input', inp, '--output', outp, '--aligned']) == 2
        err = capsys.readouterr().err
        assert one_line(err).startswith('gan_callbacks translate: error: --output') and 'would overwrite the input' in err
    assert {f.name: f.read_bytes() for f in imgs.iterdir()} == before
    # an output folder inside the input folder is fine: no name collides
    assert run(['translate', '--model', model, '--input', imgs, '--output', imgs/'out', '--aligned']) == 0
    assert sorted(f.name for f in (imgs/'out').iterdir()) == sorted(before)


# --- pickles only when trusted

class Payload:
    "A pickle that creates a file when it is loaded"
    def __init__(self, fn): self.fn = fn
    def __reduce__(self): return (Path.touch, (Path(self.fn),))

@pytest.mark.parametrize('cmd', ['translate', 'evaluate', 'export', 'app'])
def test_a_pickle_needs_trust_pickle(trained, tiny, tmp_path, capsys, cmd):
    bad, ran = tmp_path/'generator.pkl', tmp_path/'payload-ran'
    bad.write_bytes(pickle.dumps(Payload(ran)))
    tail = dict(translate=['--input', tiny/'val', '--output', tmp_path/'t'], evaluate=['--data', tiny, '--out', tmp_path/'e'],
                export=['--format', 'reference', '--out', tmp_path/'x'/'latest_net_G.pth'], app=['--port', '0'])[cmd]
    assert run([cmd, '--model', bad, *tail]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f'gan_callbacks {cmd}: error: --model {bad} is a pickle') and '--trust-pickle' in line
    assert not ran.exists()
    if cmd == 'app': return   # trusted, it would serve until stopped: the app's own tests serve
    # trusted, it is loaded (and the payload runs: that is what trusting means)
    good = trained/'generator.pkl'
    assert run([cmd, '--model', good, '--trust-pickle', *tail]) == 0


# --- one run per output folder

def test_a_second_run_on_the_same_out_is_refused(tiny, tmp_path, capsys):
    out = tmp_path/'o'
    out.mkdir()
    lock = out/'.gan_callbacks.lock'
    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])   # a live process holds the lock
    try:
        lock.write_text(json.dumps(dict(pid=p.pid, host=socket.gethostname(), started='2026-01-01 00:00:00',
                                        command='gan_callbacks train --sample')))
        before = sorted(out.iterdir())
        assert run(['train', '--data', tiny, '--out', out, *TINY]) == 2
        line = one_line(capsys.readouterr().err)
        assert f'--out {out} is in use by another run (PID {p.pid} on {socket.gethostname()}' in line
        assert 'gan_callbacks train --sample' in line
        assert sorted(out.iterdir()) == before
        assert run(['train', '--data', tiny, '--out', out, *TINY, '--resume']) == 2   # not even to resume it
    finally: p.kill(); p.wait()
    # its process has ended: a stale lock, taken over with a note
    assert run(['train', '--data', tiny, '--out', out, *TINY]) == 0
    assert f'stale lock' in capsys.readouterr().err
    assert not lock.exists()   # released at the end
    # a finished run can be resumed (nothing left to train: the results are written again)
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--resume']) == 0

def test_the_lock_holds_while_a_run_trains(tiny, tmp_path):
    out = tmp_path/'o'
    p = subprocess.Popen([EXE, 'train', '--data', str(tiny), '--out', str(out), *map(str, TINY[:1]), '100', *map(str, TINY[2:])],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        wait_for(lambda: (out/'.gan_callbacks.lock').exists(), p)
        info = json.loads((out/'.gan_callbacks.lock').read_text())
        assert info['pid'] == p.pid and info['host'] == socket.gethostname() and 'train' in info['command']
        q = subprocess.run([EXE, 'train', '--data', str(tiny), '--out', str(out), *map(str, TINY)], capture_output=True, text=True,
                           timeout=600, preexec_fn=default_signals)
        assert q.returncode == 2 and f'in use by another run (PID {p.pid}' in one_line(q.stderr)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=600)
    finally:
        if p.poll() is None: p.kill()
    assert p.returncode == 143 and not (out/'.gan_callbacks.lock').exists()


# --- one line, exit 2, for files that cannot be read or written

def test_resume_from_a_bad_file_is_one_line(tiny, trained, tmp_path, capsys):
    ck = next((trained/'checkpoints').glob('gan_epoch*.pth'))
    trunc, rand = tmp_path/'trunc.pth', tmp_path/'random.pth'
    trunc.write_bytes(ck.read_bytes()[:5000]); rand.write_bytes(os.urandom(5000))
    for f, what in ((trunc, 'truncated or corrupt'), (rand, 'truncated or corrupt'), (tmp_path/'missing.pth', 'No checkpoint')):
        assert run(['train', '--data', tiny, '--out', tmp_path/'o', *TINY, '--resume', f]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith('gan_callbacks train: error: ') and str(f.name) in line and what in line and 'weights_only' not in line

def test_resume_with_nothing_to_resume(tiny, tmp_path, capsys):
    out = tmp_path/'o'
    assert run(['train', '--data', tiny, '--out', out, *TINY, '--resume']) == 2
    assert one_line(capsys.readouterr().err) == \
        f"gan_callbacks train: error: --resume: nothing to resume in {out/'checkpoints'} (no gan_epoch*.pth, no gan_interrupted.pth)"
    assert not (out/'history.csv').exists()

def test_unwritable_places_are_one_line(trained, tiny, tmp_path, capsys):
    blocker = tmp_path/'file'
    blocker.write_text('a file, not a folder')
    cases = [['train', '--data', tiny, '--out', blocker/'o', *TINY],
             ['translate', '--model', trained/'generator', '--input', tiny/'val', '--output', blocker/'t', '--aligned'],
             ['export', '--model', trained/'generator', '--format', 'reference', '--out', blocker/'x'/'latest_net_G.pth'],
             ['export', '--model', trained/'generator', '--format', 'folder', '--out', blocker/'m']]
    for argv in cases:
        assert run(argv) == 2, argv
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f'gan_callbacks {argv[0]}: error: ') and str(blocker) in line, line

def test_oserror_and_checkpoint_error_reaching_main(tiny, tmp_path, capsys, monkeypatch):
    from gan_callbacks.cli import commands as cli   # where each command runs
    from gan_callbacks.atomic import CheckpointError
    def boom(**kwargs): raise PermissionError(13, 'Permission denied', str(tmp_path/'x.png'))
    monkeypatch.setattr(cli, 'translate', boom)
    assert run(['translate', '--model', 'm', '--input', 'i', '--output', 'o']) == 2
    assert one_line(capsys.readouterr().err) == f"gan_callbacks translate: error: {tmp_path/'x.png'}: Permission denied"
    def ck(**kwargs): raise CheckpointError("Exception occured in `GANCheckpoint` when calling event `before_fit`:\n\tCannot read the checkpoint c.pth")
    monkeypatch.setattr(cli, 'translate', ck)
    assert run(['translate', '--model', 'm', '--input', 'i', '--output', 'o']) == 2
    assert one_line(capsys.readouterr().err) == "gan_callbacks translate: error: Cannot read the checkpoint c.pth"


# --- signals: SIGINT and SIGTERM at several moments

@pytest.fixture(scope='module')
def sigdata(tmp_path_factory):
    return sample_pairs(tmp_path_factory.mktemp('home')/'sig', n_train=8, n_valid=1, size=32)

SIG_ARGS = ['--epochs', '50', '--epochs-decay', '0', '--bs', '1', '--load-size', '36', '--crop-size', '32', '--n-samples', '1']

def start(data, out, ngf=8, epochs=50):
    argv = ['train', '--data', str(data), '--out', str(out), *SIG_ARGS, '--ngf', str(ngf)]
    argv[argv.index('--epochs') + 1] = str(epochs)
    p = subprocess.Popen([EXE, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    return p, argv

def finish(p, sig):
    try:
        p.send_signal(sig)
        _, err = p.communicate(timeout=900)
    finally:
        if p.poll() is None: p.kill()
    return err

def resumes(argv, line, out, epochs):
    "The resume command of `line`, as printed, continues the run (to `epochs` epochs)"
    cmd = shlex.split(line.split('resume with: ')[1])
    assert cmd[0] == 'gan_callbacks' and cmd[1:-1] == argv or cmd[1:-2] == argv, (cmd, argv)
    cmd[cmd.index('--epochs') + 1] = str(epochs)
    assert run(cmd[1:]) == 0
    assert len((out/'history.csv').read_text().splitlines()) == epochs + 1

@pytest.mark.parametrize('sig,code,how', [(signal.SIGINT, 130, 'interrupted'), (signal.SIGTERM, 143, 'stopped by SIGTERM')])
def test_signal_during_training(sigdata, tmp_path, sig, code, how):
    "After epoch 0: in the middle of an epoch (its partial state saved), or between two (the finished epoch is the place to resume)"
    out = tmp_path/'o'
    p, argv = start(sigdata, out)
    wait_for(lambda: (out/'samples_epoch000.png').exists(), p)   # written last in epoch 0
    err = finish(p, sig)
    assert p.returncode == code, err
    line = one_line(err)
    saved = Path(line.split('state saved to ')[1].split(';')[0])
    ck = torch.load(saved, weights_only=True)
    if f'training {how} in epoch ' in line: assert saved == out/'checkpoints'/'gan_interrupted.pth' and ck['interrupted']
    else: assert f'training {how} after epoch ' in line and saved.name == f"gan_epoch{ck['epoch']}.pth" and not ck['interrupted']
    resumes(argv, line, out, epochs=ck['epoch'] + 3)

@pytest.mark.parametrize('sig,code', [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_while_a_checkpoint_is_written(sigdata, tmp_path, sig, code):
    "The signal lands while `torch.save` writes the epoch's `.tmp` file: that epoch's checkpoint is completed, exactly"
    out = tmp_path/'o'
    p, argv = start(sigdata, out, ngf=48)   # checkpoints of some 100 MB: a while to write
    wait_for(lambda: any((out/'checkpoints').glob('.gan_epoch*.tmp')), p)
    err = finish(p, sig)
    assert p.returncode == code, err
    line = one_line(err)
    assert 'state saved to ' in line and 'resume with: ' in line
    saved = Path(line.split('state saved to ')[1].split(';')[0])
    ck = torch.load(saved, weights_only=True)
    assert saved.name == f"gan_epoch{ck['epoch']}.pth" and ck['interrupted'] is None
    assert not list((out/'checkpoints').glob('.*.tmp'))

def test_an_interrupt_dropped_by_a_library_still_stops_the_run(tiny, tmp_path, monkeypatch, capsys):
    "Ctrl-C while a checkpoint is written, its `KeyboardInterrupt` caught and dropped inside the writer: the run still stops there"
    save, dropped = torch.save, []
    def dropping_save(obj, f, **kwargs):
        if not dropped:
            try: signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt: dropped.append(True)   # as code that catches `BaseException` and goes on
        save(obj, f, **kwargs)
    monkeypatch.setattr(torch, 'save', dropping_save)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C as a terminal gives it, whatever the runner's
    out = tmp_path/'o'
    try: code = run(['train', '--data', tiny, '--out', out, *TINY[:1], 3, *TINY[2:]])
    finally: signal.signal(signal.SIGINT, old)
    line = one_line(capsys.readouterr().err)
    assert dropped and code == 130, line
    assert line.startswith('gan_callbacks train: training interrupted after epoch 1 of 3; state saved to ') and 'resume with: ' in line
    assert sorted(p.name for p in (out/'checkpoints').iterdir()) == ['gan_epoch0.pth']
    assert not torch.load(out/'checkpoints'/'gan_epoch0.pth', weights_only=True)['interrupted']

def test_signal_after_the_last_epoch_still_writes_the_generator(sigdata, tmp_path):
    out = tmp_path/'o'
    p, argv = start(sigdata, out, epochs=1)
    wait_for(lambda: (out/'checkpoints'/'gan_epoch0.pth').exists(), p)
    err = finish(p, signal.SIGINT)
    assert p.returncode == 130, err
    line = one_line(err)
    assert 'after its last epoch' in line and f"the generator is in {out/'generator'}" in line and 'resume with: ' in line, line
    assert (out/'generator'/'model.safetensors').is_file() and (out/'generator.pkl').is_file()
    assert run(shlex.split(line.split('resume with: ')[1])[1:]) == 0   # writes the rest
    assert (out/'summary.json').is_file()

def test_sigterm_on_several_processes(sigdata, tmp_path):
    "`--nproc 2`: SIGTERM to the launcher reaches every process; rank 0 saves, one line, exit 143"
    out = tmp_path/'o'
    argv = ['train', '--data', str(sigdata), '--out', str(out), *SIG_ARGS, '--ngf', '8', '--nproc', '2']
    p = subprocess.Popen([EXE, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    wait_for(lambda: (out/'samples_epoch000.png').exists(), p)
    err = finish(p, signal.SIGTERM)
    assert p.returncode == 143, err
    line = one_line(err)
    assert 'stopped by SIGTERM' in line and '--nproc 2' in line.split('resume with: ')[1], line
    saved = Path(line.split('state saved to ')[1].split(';')[0])
    assert torch.load(saved, weights_only=True)['format']
