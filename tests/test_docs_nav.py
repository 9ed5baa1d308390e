"The documentation site's navigation: the notebooks in the order of their numbers, grouped in sections."
import sys
from pathlib import Path
import pytest

root = Path(__file__).parent.parent
sys.path.insert(0, str(root/'tools'))

def test_nav_reading_order():
    "Notebooks go to their sections in number order; a notebook no section names still gets a page"
    pytest.importorskip('execnb', reason="tools/docs.py reads notebooks with execnb (the dev extra)")
    from docs import make_nav
    titles = {'02b_cyclegan': 'CycleGAN', '03a_networks': 'Networks', '02a_pix2pix': 'Pix2pix', '02_gans': 'The four GANs',
              '04a_folders': 'Folders', '00_your_data': 'Your data', '99_new': 'New'}
    nav = make_nav(titles)
    assert [list(o)[0] for o in nav] == ['Get started', 'The four GANs', 'Networks and losses', 'Data', 'More']
    assert nav[0]['Get started'] == [{'Home': 'index.md'}, {'Your data': '00_your_data.ipynb'}]
    assert nav[1]['The four GANs'] == [{'The four GANs': '02_gans.ipynb'}, {'Pix2pix': '02a_pix2pix.ipynb'}, {'CycleGAN': '02b_cyclegan.ipynb'}]
    assert nav[-1]['More'] == [{'New': '99_new.ipynb'}]

def test_every_notebook_has_a_section_in_number_order():
    "The site's navigation lists the notebooks of nbs/ in the order of their numbers, none left under 'More'"
    pytest.importorskip('execnb', reason="tools/docs.py reads notebooks with execnb (the dev extra)")
    from docs import make_nav
    names = sorted(p.stem for p in (root/'nbs').glob('*.ipynb') if p.stem != 'index')
    nav = make_nav({n: n for n in names})
    assert 'More' not in [list(o)[0] for o in nav]
    assert [v[:-len('.ipynb')] for o in nav for d in list(o.values())[0] for v in d.values() if v != 'index.md'] == names

def test_readme_lists_every_wing_and_each_wing_page_its_notebooks():
    "The README's 'What is where' has a row per section's first notebook, in number order; each wing's first page links its notebooks"
    import re
    text = (root/'README.md').read_text()
    table = text[text.index('## What is where'):]
    rows = re.findall(r'^\| \[`(\w+)`\]\(nbs/\1\.ipynb\) \|', table, flags=re.M)
    nbs = sorted(p.stem for p in (root/'nbs').glob('*.ipynb') if p.stem != 'index')
    assert rows == [n for n in nbs if re.match(r'\d+_', n)]
    pytest.importorskip('execnb', reason="the wings' pages are read with execnb (the dev extra)")
    from execnb.nbio import read_nb
    for n in rows:
        links = set(re.findall(r'\]\((\w+)\.ipynb\)', '\n'.join(c.source for c in read_nb(root/'nbs'/f'{n}.ipynb').cells)))
        wing = [m for m in nbs if m[:2] == n[:2] and m != n]
        if (root/'gan_callbacks'/n.split('_', 1)[1]).is_dir(): assert set(wing) <= links, (n, sorted(set(wing) - links))

def test_links_to_the_readme_notebook_go_to_the_home_page():
    "A notebook's link to `index.ipynb` (the README's source) becomes the site's home page, anchors kept"
    pytest.importorskip('execnb', reason="tools/docs.py reads notebooks with execnb (the dev extra)")
    from docs import page_names
    pages = page_names([root/'nbs'/'02b_cyclegan.ipynb'])
    assert pages['index.ipynb'] == 'index.html'
    assert pages['02b_cyclegan.ipynb'] == pages['cyclegan.html'] == '02b_cyclegan.html'
