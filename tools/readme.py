"Write README.md from nbs/index.ipynb: markdown cells as they are (image links made relative to the root), code cells as python blocks, hidden cells left out."
import re, sys
from pathlib import Path
from execnb.nbio import read_nb

def render(nb_path):
    out = []
    for c in read_nb(nb_path).cells:
        src = c.source.strip()
        if not src or src.startswith('#| hide'): continue
        if c.cell_type == 'markdown':   # links relative to the repository root
            out.append(re.sub(r'\]\((\w+\.ipynb)', r'](nbs/\1', src.replace('](images/', '](nbs/images/')))
        elif c.cell_type == 'code':
            src = '\n'.join(l for l in src.splitlines() if not l.startswith('#|'))
            out.append(f"```python\n{src}\n```")
    return '\n\n'.join(out) + '\n'

if __name__ == '__main__':
    root = Path(__file__).parent.parent
    text = render(root/'nbs'/'index.ipynb')
    dest = root/'README.md'
    if '--check' in sys.argv:
        if dest.read_text() != text: sys.exit("README.md differs from nbs/index.ipynb: run `make readme` and commit")
    else: dest.write_text(text)
