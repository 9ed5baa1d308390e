"""Make the README's demo pictures from a `make demo` run: nbs/images/demo_grid.png, its first and last per-epoch
sample grids (titled, labelled) side by side, and nbs/images/demo_hero.jpg, four rows of the last one in two columns."""
import sys
from pathlib import Path
import numpy as np
from PIL import Image

def bands(im, min_height=32):
    "The (top, bottom) rows of each horizontal band of `im` holding a picture row, skipping text lines and white gaps"
    ink = (np.asarray(im.convert('L')) < 250).any(1)
    edges = np.flatnonzero(np.diff(np.r_[0, ink.astype(np.int8), 0]))
    return [(a, b) for a, b in zip(edges[::2], edges[1::2]) if b - a >= min_height]

def hero(last, rows=(0, 1, 3, 6), gap=16):
    "Rows `rows` (input | output | target) of the last epoch's grid `last`, with its column labels, in two columns"
    bs = bands(last)
    label = last.crop((0, bs[0][0] - 14, last.width, bs[0][0]))   # the 'input output target' line above the first row
    picked = [last.crop((0, bs[i][0], last.width, bs[i][1])) for i in rows if i < len(bs)]
    h = max(p.height for p in picked)
    half = (len(picked) + 1) // 2
    res = Image.new('RGB', (2 * last.width + gap, label.height + half * (h + 4)), 'white')
    for col in range(2):
        res.paste(label, (col * (last.width + gap), 0))
        for j, p in enumerate(picked[col * half:(col + 1) * half]):
            res.paste(p, (col * (last.width + gap), label.height + j * (h + 4)))
    return res

def demo_grid(out='demo_out', dest='nbs/images/demo_grid.png', hero_dest='nbs/images/demo_hero.jpg', gap=24):
    files = sorted(Path(out).glob('samples_epoch*.png'))
    if not files: sys.exit(f"{out}/: no samples_epoch*.png; run `make demo` first")
    first, last = (Image.open(f).convert('RGB') for f in (files[0], files[-1]))
    res = Image.new('RGB', (first.width + gap + last.width, max(first.height, last.height)), 'white')
    res.paste(first, (0, 0)); res.paste(last, (first.width + gap, 0))
    res.save(dest)
    hero(last).save(hero_dest, quality=88)   # a JPEG: a photograph's grid is a third of its PNG
    print(f"wrote {dest} from {files[0].name} and {files[-1].name}, and {hero_dest} from {files[-1].name}")

if __name__ == '__main__': demo_grid(*sys.argv[1:])
