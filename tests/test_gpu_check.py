"`make gpu-check` (benchmarks/gpu_check.py): without a GPU it says so and exits 0; its figures' path, run on tiny models on the CPU."
import os, subprocess, sys
from pathlib import Path
import pytest

script = Path(__file__).parents[1]/'benchmarks'/'gpu_check.py'

def test_without_a_gpu_it_says_so_and_exits_0(tmp_path):
    r = subprocess.run([sys.executable, script, '--out', tmp_path/'t.md'], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=''))
    assert r.returncode == 0, r.stderr
    assert 'gpu-check: no CUDA GPU found' in r.stdout and 'no GPU figures exist yet' in r.stdout
    assert not (tmp_path/'t.md').exists()

@pytest.mark.slow
def test_its_table_on_tiny_models_on_the_cpu(tmp_path):
    r = subprocess.run([sys.executable, script, '--device', 'cpu', '--tiny', '--iters', '1', '--out', tmp_path/'t.md'],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert r.returncode == 0, r.stderr
    rows = [l for l in (tmp_path/'t.md').read_text().splitlines() if l.startswith('| ') and 'tiny' in l]
    assert [r.split(' tiny')[0] for r in rows] == ['| pix2pix', '| pix2pix', '| cyclegan', '| pix2pixhd']
    for row in rows:
        sec, img_s, flop, share = (row.split('|')[i].strip() for i in (2, 3, 5, 6))
        assert float(sec) > 0 and float(img_s) > 0 and float(flop) > 0 and share.endswith('%')
