"The documentation site's browser check: it passes a sound site and rejects broken anchors, images, links and scripts."
import sys
from pathlib import Path
import pytest

pytest.importorskip('playwright')
chromium = '/usr/bin/chromium'
if not Path(chromium).exists(): pytest.skip(f"no Chromium at {chromium}", allow_module_level=True)
sys.path.insert(0, str(Path(__file__).parent.parent/'tools'))
from docs_check import check

png = bytes.fromhex('89504e470d0a1a0a0000000d4948445200000001000000010806000000'
                    '1f15c4890000000d49444154789c6360f8cfc0f01f0005000201e2212cbc0000000049454e44ae426082')   # 1x1 pixel

def site(tmp_path, index_body, other='<h2 id="there">There</h2>'):
    "A two-page site: index.html with `index_body`, page.html with `other`, and pic.png"
    d = tmp_path/'site'
    d.mkdir()
    (d/'index.html').write_text(f'<!doctype html><html><body>{index_body}</body></html>')
    (d/'page.html').write_text(f'<!doctype html><html><body>{other}<a href="index.html">home</a></body></html>')
    (d/'pic.png').write_bytes(png)
    return d

good = '<a href="page.html#there">there</a> <img src="pic.png"> <a href="#top" id="top">top</a>'

def test_sound_site_passes(tmp_path):
    shots = tmp_path/'shots'
    assert check(site(tmp_path, good), shots, chromium, log=lambda *a: None) == []
    assert (shots/'docs_home.png').stat().st_size > 0

def test_missing_anchor_and_image_rejected(tmp_path):
    d = site(tmp_path, good)
    (d/'page.html').write_text('<!doctype html><html><body><h2 id="elsewhere">x</h2></body></html>')   # the anchor is gone
    (d/'pic.png').unlink()                                                                            # and the image
    problems = check(d, None, chromium, log=lambda *a: None)
    assert any('broken anchor page.html#there' in p for p in problems), problems
    assert any('image did not load: pic.png' in p for p in problems), problems

def test_broken_link_script_error_and_external_request_rejected(tmp_path):
    d = site(tmp_path, '<a href="gone.html">gone</a><script>undefined_function()</script>'
                       '<img src="https://example.com/x.png">')
    problems = check(d, None, chromium, log=lambda *a: None)
    assert any('broken link to gone.html' in p for p in problems), problems
    assert any('JavaScript error' in p and 'undefined_function' in p for p in problems), problems
    assert any('external request https://example.com/x.png' in p for p in problems), problems

def test_unbuilt_site_rejected(tmp_path):
    assert 'build the site first' in check(tmp_path, None, chromium)[0]
