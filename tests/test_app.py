"The web app in a real browser: headless Chromium drops an image on the page and gets the command line's translation."
import os, socket, subprocess, sys, threading, queue
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from gan_callbacks.models import UnetGenerator
from gan_callbacks.model_folder import write_model_folder
from gan_callbacks.cli import main

CHROMIUM = os.environ.get('CHROMIUM', '/usr/bin/chromium')
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run']

def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

@pytest.fixture
def served(tmp_path):
    "`gan_callbacks app` on a small model folder, and the address it serves"
    torch.manual_seed(0)
    folder = write_model_folder(UnetGenerator(num_downs=5, ngf=4), tmp_path/'my-model', dict(size=32, test_mode='paper'), sample=False)
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED='False', PYTHONUNBUFFERED='1')
    from interrupting import default_signals
    p = subprocess.Popen([sys.executable, '-m', 'gan_callbacks', 'app', '--model', str(folder), '--port', str(port), '--max-pixels', '10000'],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=default_signals, cwd=tmp_path)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in p.stdout], daemon=True).start()
    url, seen = f'http://127.0.0.1:{port}', []
    try:
        while True:   # wait for the server to say it is up
            line = lines.get(timeout=120); seen.append(line)
            if url in line: break
            assert p.poll() is None, ''.join(seen)
        yield folder, url
    finally:
        p.terminate(); p.wait(30)

def upload(page, fn, setup=lambda: None, tries=4):
    "Put file `fn` in the upload box after `setup()`; on a page that does not take it within 30 s, reload the page and try again"
    from playwright.sync_api import TimeoutError as Timeout
    for i in range(tries):
        if i: page.reload(); page.wait_for_load_state('networkidle')
        setup()
        page.set_input_files('#upload input[type=file]', str(fn))
        try: return page.locator('#upload').get_by_text(fn.name).first.wait_for(timeout=30_000)
        except Timeout: continue
    raise AssertionError(f"the upload box never showed {fn.name}")

def test_page_translates_like_the_command_line(served, tmp_path):
    from playwright.sync_api import sync_playwright
    folder, url = served
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 72, 3), dtype=np.uint8)).save(tmp_path/'photo.png')
    assert main(['translate', '--model', str(folder), '--input', str(tmp_path/'photo.png'), '--output', str(tmp_path/'cli'),
                 '--tile', '256']) is None
    want = np.asarray(Image.open(tmp_path/'cli'/'photo.png'))
    (tmp_path/'notes.txt').write_text('not an image')
    Image.new('RGB', (200, 100)).save(tmp_path/'huge.png')   # above the app's --max-pixels 10000
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(url); page.wait_for_load_state('networkidle')
            upload(page, tmp_path/'photo.png', setup=lambda: page.get_by_label('256').check())
            page.click('#translate')
            page.locator('#status').get_by_text('Translated photo.png').wait_for(timeout=120_000)
            img = page.locator('#output img').first
            img.wait_for(timeout=30_000)
            shown = page.request.get(img.get_attribute('src')).body()
            link = page.locator('#download a').first
            got = page.request.get(link.get_attribute('href')).body()
            for data, name in ((shown, 'shown'), (got, 'downloaded')):
                (tmp_path/f'{name}.png').write_bytes(data)
                assert np.array_equal(np.asarray(Image.open(tmp_path/f'{name}.png')), want), name
            for bad, msg in (('notes.txt', 'notes.txt is not an image'), ('huge.png', 'huge.png is 200x100 pixels: more than')):
                page.reload(); page.wait_for_load_state('networkidle')   # an empty upload box again
                upload(page, tmp_path/bad)
                page.click('#translate')
                page.locator('#status').get_by_text(msg).wait_for(timeout=120_000)
            assert 'Traceback' not in page.content()
        finally: browser.close()
