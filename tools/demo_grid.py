"Make nbs/images/demo_grid.png from a `make demo` run (or e.g. `cyclegan_demo_out nbs/images/cyclegan_demo.png 'A | G_A(A) | true B'` from `make demo-cyclegan`): its first and last per-epoch sample grids side by side, captioned."
import sys
from pathlib import Path
from PIL import Image, ImageDraw

def demo_grid(out='demo_out', dest='nbs/images/demo_grid.png', columns='A | output | B', scale=2, gap=24, top=22):
    files = sorted(Path(out).glob('samples_epoch*.png'))
    if not files: sys.exit(f"{out}/: no samples_epoch*.png; run `make demo` first")
    first, last = (Image.open(f).convert('RGB') for f in (files[0], files[-1]))
    w, h = first.width * scale, first.height * scale
    res = Image.new('RGB', (2 * w + gap, h + top), 'white')
    draw = ImageDraw.Draw(res)
    for i, (im, f) in enumerate(((first, files[0]), (last, files[-1]))):
        x = i * (w + gap)
        res.paste(im.resize((w, h), Image.Resampling.NEAREST), (x, top))
        epoch = int(f.stem.removeprefix('samples_epoch')) + 1
        draw.text((x + 4, 5), f"after epoch {epoch}: {columns}", fill='black')
    res.save(dest)
    print(f"wrote {dest} from {files[0].name} and {files[-1].name}")

if __name__ == '__main__': demo_grid(*sys.argv[1:])
