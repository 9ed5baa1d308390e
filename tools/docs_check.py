"""Check the built documentation site in a real browser: serve it on 127.0.0.1, open every page in headless Chromium,
and fail on a page that does not load, a broken internal link or anchor, an image that does not load, a JavaScript
error, or a request that leaves the machine. Optionally save screenshots of some pages.

    python tools/docs_check.py [SITE] [--shots DIR] [--chromium PATH]"""
import argparse, functools, http.server, os, sys, threading
from pathlib import Path
from urllib.parse import urljoin, urldefrag, urlparse, unquote

flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--no-first-run']
shots = {'index.html': 'docs_home.png', '02b_cyclegan.html': 'docs_cyclegan.png'}   # page -> screenshot file

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass

class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address): pass   # the browser closing a page mid-download is not a fault

def serve(site):
    "A server of folder `site` on a free port of 127.0.0.1, in a thread; its base url and the server"
    srv = Server(('127.0.0.1', 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f'http://127.0.0.1:{srv.server_address[1]}/', srv

# Every element id and named anchor of the page; every link; every image that has not loaded (after asking for them all)
ids_js = "() => [...document.querySelectorAll('[id]')].map(e => e.id).concat([...document.querySelectorAll('a[name]')].map(e => e.name))"
links_js = "() => [...document.querySelectorAll('a[href]')].map(a => a.href)"
images_js = """async () => {
  const imgs = [...document.images];
  imgs.forEach(i => i.loading = 'eager');
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  return imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
}"""

def check(site, shot_dir=None, chromium='/usr/bin/chromium', log=print):
    "The list of problems found on the site in folder `site` (empty when it is fine)"
    from playwright.sync_api import sync_playwright
    site = Path(site)
    if not (site/'index.html').is_file(): return [f"{site}/index.html: missing (build the site first: make docs)"]
    base, srv = serve(site)
    pages = sorted(str(p.relative_to(site).as_posix()) for p in site.rglob('*.html'))
    problems, ids, links = [], {}, []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=flags)
            ctx = browser.new_context(viewport={'width': 1280, 'height': 900})
            # nothing may be fetched from outside the machine: block it and report it
            def route(r):
                if urlparse(r.request.url).hostname in ('127.0.0.1', None) or r.request.url.startswith('data:'): r.continue_()
                else:
                    problems.append(f"{cur[0]}: external request {r.request.url}")
                    r.abort()
            ctx.route('**/*', route)
            cur = ['']
            for name in pages:
                cur[0] = name
                page = ctx.new_page()
                page.on('console', lambda m, n=name: m.type == 'error' and problems.append(f"{n}: console error: {m.text}"))
                page.on('pageerror', lambda e, n=name: problems.append(f"{n}: JavaScript error: {e}"))
                page.on('requestfailed', lambda r, n=name: urlparse(r.url).hostname == '127.0.0.1' and
                        problems.append(f"{n}: failed to load {r.url} ({r.failure})"))
                page.on('response', lambda r, n=name: r.status >= 400 and
                        problems.append(f"{n}: HTTP {r.status} for {r.url}"))
                try: resp = page.goto(base + name, wait_until='load', timeout=60_000)
                except Exception as e:
                    problems.append(f"{name}: did not load ({str(e).splitlines()[0]})"); page.close(); continue
                if resp is None or not resp.ok: problems.append(f"{name}: HTTP {resp.status if resp else 'no response'}")
                problems += [f"{name}: image did not load: {src}" for src in page.evaluate(images_js)]
                ids[name] = set(page.evaluate(ids_js))
                links += [(name, h) for h in page.evaluate(links_js)]
                if shot_dir and name in shots:
                    Path(shot_dir).mkdir(parents=True, exist_ok=True)
                    shot = Path(shot_dir)/shots[name]
                    page.screenshot(path=str(shot))
                    from PIL import Image   # a 256-colour PNG: a page of text is a third of the size
                    Image.open(shot).convert('RGB').quantize(256, dither=Image.Dither.NONE).save(shot, optimize=True)
                    log(f"screenshot of {name}: {shot}")
                page.close()
            browser.close()
    finally: srv.shutdown()
    for src, href in links:
        u = urlparse(href)
        if u.scheme not in ('http', 'https') or u.hostname != '127.0.0.1': continue
        url, frag = urldefrag(href)
        target = unquote(urlparse(url).path).lstrip('/') or 'index.html'
        if target.endswith('/'): target += 'index.html'
        if not (site/target).exists(): problems.append(f"{src}: broken link to {target}"); continue
        if frag and target in ids and unquote(frag) not in ids[target]: problems.append(f"{src}: broken anchor {target}#{frag}")
    log(f"checked {len(pages)} pages and {len(links)} links")
    return sorted(set(problems))

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('site', nargs='?', default='_docs')
    p.add_argument('--shots', default=None, help='folder for screenshots of the home page and the CycleGAN page')
    p.add_argument('--chromium', default=os.environ.get('CHROMIUM', '/usr/bin/chromium'))
    a = p.parse_args()
    problems = check(a.site, a.shots, a.chromium)
    for o in problems: print(o)
    if problems: sys.exit(f"docs check: {len(problems)} problem(s)")
    print("docs check: no problems")

if __name__ == '__main__': main()
