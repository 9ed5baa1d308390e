"The web app: in a real browser, headless Chromium drops an image on the page and gets the command line's translation; over HTTP, where the app keeps its files."
import os, socket, subprocess, sys, threading, time, queue
from contextlib import contextmanager
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from gan_callbacks.nets.networks import UnetGenerator
from gan_callbacks.deploy.model_folder import write_model_folder
from gan_callbacks.cli.parser import main

pytestmark = pytest.mark.slow   # a browser and a web server: `make test-all`

CHROMIUM = os.environ.get('CHROMIUM', '/usr/bin/chromium')
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run']

def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

@contextmanager
def running_app(folder, cwd, args=(), **env):
    "`gan_callbacks app` on model folder `folder` with more `args`, environment variables `env` (`None`: removed), and the address it serves"
    port = free_port()
    env = {k: v for k, v in dict(os.environ, GRADIO_ANALYTICS_ENABLED='False', PYTHONUNBUFFERED='1', **env).items() if v is not None}
    from helpers import default_signals
    p = subprocess.Popen([sys.executable, '-m', 'gan_callbacks', 'app', '--model', str(folder), '--port', str(port), '--max-pixels', '10000', *args],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=default_signals, cwd=cwd)
    lines = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, p.stdout), lines.put(None)], daemon=True).start()   # None: the output ended
    url, seen, bound = f'http://127.0.0.1:{port}', [], 900   # a generous bound: a loaded machine imports torch and Gradio slowly
    try:
        deadline = time.monotonic() + bound
        while True:   # wait for the server to say it is up, or for its output to end
            try: line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty: raise AssertionError(f"the app did not say it serves {url} within {bound} s:\n{''.join(seen)}") from None
            if line is None: raise AssertionError(f"the app ended (exit code {p.wait()}) before serving:\n{''.join(seen)}")
            seen.append(line)
            if url in line: break
        yield url
    finally:
        p.terminate(); p.wait(30)

def small_model(tmp_path):
    torch.manual_seed(0)
    return write_model_folder(UnetGenerator(num_downs=5, ngf=4), tmp_path/'my-model', dict(size=32, test_mode='paper'), sample=False)

@pytest.fixture
def served(tmp_path):
    "`gan_callbacks app` on a small model folder, and the address it serves"
    folder = small_model(tmp_path)
    with running_app(folder, tmp_path) as url: yield folder, url

def test_uploads_beyond_max_file_size_are_refused_before_they_are_stored(tmp_path):
    import httpx
    with running_app(small_model(tmp_path), tmp_path, args=['--max-file-size', '4kb']) as url:
        post = lambda n: httpx.post(f'{url}/gradio_api/upload', files={'files': ('x.png', b'0' * n)}, timeout=60)
        assert post(1000).status_code == 200
        r = post(100_000)
        assert r.status_code == 413, (r.status_code, r.text)

def test_a_tiff_of_many_pages_is_refused_from_its_header(tmp_path):
    import tifffile
    from gan_callbacks.deploy.webapp import check_upload, AppError
    tifffile.imwrite(tmp_path/'stack.tif', np.zeros((200, 64, 64, 3), np.uint8), compression='zlib')   # Pillow sees one 64 x 64 page
    with pytest.raises(AppError, match=r'stack.tif: shape \(200, 64, 64, 3\): one image of \(H, W\) or \(H, W, C\)'):
        check_upload(tmp_path/'stack.tif')
    tifffile.imwrite(tmp_path/'one.tif', np.zeros((64, 48, 3), np.uint8))
    assert check_upload(tmp_path/'one.tif') == (48, 64)

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

@needs_chromium
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


def upload_pair(page, fn, inst, tries=4):
    "Put label map `fn` and instance map `inst` in their upload boxes; on a page that does not take them within 30 s, reload it and try again"
    from playwright.sync_api import TimeoutError as Timeout
    for i in range(tries):
        if i: page.reload(); page.wait_for_load_state('networkidle')
        try:
            for box, f in (('#upload', fn), ('#instances', inst)):
                page.set_input_files(f'{box} input[type=file]', str(f))
                page.locator(box).get_by_text(f.name).first.wait_for(timeout=30_000)
            return
        except Timeout: continue
    raise AssertionError(f"the upload boxes never showed {fn.name} and {inst.name}")

@needs_chromium
def test_page_translates_label_maps_like_the_command_line(tmp_path):
    "A pix2pixHD model trained on label maps and instance maps: the page takes both, gives the command's file, and refuses a photo in one line"
    from playwright.sync_api import sync_playwright
    from gan_callbacks.nets.hd_networks import GlobalGenerator
    torch.manual_seed(0)
    folder = write_model_folder(GlobalGenerator(5, 3, ngf=4, n_downsampling=2, n_blocks=1), tmp_path/'labels-model',
                                dict(size=32, label_nc=4, instance=True), sample=False)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 4, (40, 52), dtype=np.uint8)).save(tmp_path/'map.png')
    Image.fromarray(rng.integers(0, 3, (40, 52), dtype=np.uint8)).save(tmp_path/'inst.png')
    Image.fromarray(rng.integers(0, 256, (40, 52, 3), dtype=np.uint8)).save(tmp_path/'photo.png')
    assert main(['translate', '--model', str(folder), '--input', str(tmp_path/'map.png'), '--instances', str(tmp_path/'inst.png'),
                 '--output', str(tmp_path/'cli')]) is None
    want = np.asarray(Image.open(tmp_path/'cli'/'map.png'))
    with running_app(folder, tmp_path) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(url); page.wait_for_load_state('networkidle')
            assert 'Drop a label map (a single-channel PNG of class ids 0 to 3) and its instance map' in page.content()
            upload_pair(page, tmp_path/'map.png', tmp_path/'inst.png')
            page.click('#translate')
            page.locator('#status').get_by_text('Translated map.png').wait_for(timeout=120_000)
            link = page.locator('#download a').first
            (tmp_path/'got.png').write_bytes(page.request.get(link.get_attribute('href')).body())
            assert np.array_equal(np.asarray(Image.open(tmp_path/'got.png')), want)
            page.reload(); page.wait_for_load_state('networkidle')
            upload_pair(page, tmp_path/'photo.png', tmp_path/'inst.png')
            page.click('#translate')
            page.locator('#status').get_by_text('photo.png: label map photo.png has 3 channels').wait_for(timeout=120_000)
            assert 'Traceback' not in page.content()
        finally: browser.close()


def test_the_app_keeps_its_files_in_a_folder_of_its_own_and_removes_it(tmp_path):
    "Uploads, Gradio's cache and translations in `gan_callbacks_app_*` under the system's temp (not Gradio's shared `gradio/`), gone when the app stops"
    from gradio_client import Client, handle_file
    folder, temp = small_model(tmp_path), tmp_path/'temp'
    temp.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 72, 3), dtype=np.uint8)).save(tmp_path/'photo.png')
    with running_app(folder, tmp_path, TMPDIR=str(temp), GRADIO_TEMP_DIR=None) as url:
        client = Client(url, verbose=False, download_files=str(tmp_path/'client'), analytics_enabled=False)
        shown, download, status = client.predict(handle_file(tmp_path/'photo.png'), 'AtoB', 'whole image', api_name='/run')
        assert status.startswith('Translated photo.png')
        mine = [p for p in temp.iterdir() if p.name.startswith('gan_callbacks_app_')]
        assert len(mine) == 1 and not (temp/'gradio').exists(), sorted(temp.iterdir())
        kept = {p.name for p in mine[0].rglob('*') if p.is_file()}
        assert {'photo.png', 'photo_AtoB.png'} <= kept, kept   # the upload and the translation
    assert not mine[0].exists() and not (temp/'gradio').exists()
