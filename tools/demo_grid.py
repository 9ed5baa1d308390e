"Make nbs/images/demo_grid.png from a `make demo` run: its first and last per-epoch sample grids (titled, labelled) side by side."
import sys
from pathlib import Path
from PIL import Image

def demo_grid(out='demo_out', dest='nbs/images/demo_grid.png', gap=24):
    files = sorted(Path(out).glob('samples_epoch*.png'))
    if not files: sys.exit(f"{out}/: no samples_epoch*.png; run `make demo` first")
    first, last = (Image.open(f).convert('RGB') for f in (files[0], files[-1]))
    res = Image.new('RGB', (first.width + gap + last.width, max(first.height, last.height)), 'white')
    res.paste(first, (0, 0)); res.paste(last, (first.width + gap, 0))
    res.save(dest)
    print(f"wrote {dest} from {files[0].name} and {files[-1].name}")

if __name__ == '__main__': demo_grid(*sys.argv[1:])
