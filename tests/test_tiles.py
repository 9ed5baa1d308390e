"Translating images of any size: whole at their own size, or in blended tiles with memory bounded by the tile."
import numpy as np
import pytest, torch
from torch import nn
from PIL import Image
import skimage.data
from gan_callbacks.nets.networks import UnetGenerator, ResnetGenerator
from gan_callbacks.deploy.inference import run_tiled, run_padded, tile_starts, blend_ramp, from_pil, to_pil
from gan_callbacks.trainer.test_mode import run_generator
from gan_callbacks.cli.parser import main
from helpers import run_cli as run



class Local(nn.Module):
    "Stride-1 convolutions: each output pixel sees `3 * k // 2` pixels around it"
    multiple = 1
    def __init__(self, k=3):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, k, padding=k//2), nn.ReLU(), nn.Conv2d(8, 8, k, padding=k//2), nn.ReLU(),
                                 nn.Conv2d(8, 3, k, padding=k//2), nn.Tanh())
    def forward(self, x): return self.net(x)

@pytest.mark.parametrize('k, tile, overlap, size', [(3, 32, 16, (100, 77)), (3, 40, 12, (64, 200)), (5, 64, 24, (130, 130)),
                                                    (3, 256, 16, (50, 60))])
def test_tiled_equals_whole_when_the_receptive_field_fits_the_overlap(k, tile, overlap, size):
    torch.manual_seed(0)
    G, x = Local(k).eval(), torch.randn(3, *size)
    assert 3 * (k // 2) <= overlap // 4   # the receptive radius fits in the part of the overlap a tile's weight is 0
    torch.testing.assert_close(run_tiled(G, x, tile, overlap, bs=3), run_generator(G, x[None])[0], atol=1e-5, rtol=0)

def test_ramps_of_neighbours_sum_to_one():
    for o in (1, 4, 16, 64):
        r = blend_ramp(o)
        torch.testing.assert_close(r + r.flip(0), torch.ones(o)); assert (r[:o//4] == 0).all()
    assert tile_starts(3000, 512, 64) == [0, 448, 896, 1344, 1792, 2240, 2488] and tile_starts(100, 512, 64) == [0]

def _status(key): return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024

def _peak_during(f):
    "Bytes the process's resident memory grew to above where it was, while `f` ran, and `f`'s result"
    open('/proc/self/clear_refs', 'w').write('5')   # reset the peak (VmHWM) to the current size
    base = _status('VmRSS'); out = f()
    return _status('VmHWM') - base, out

def _edges(n, tile, overlap):
    "The columns on both sides of each tile edge inside the image: where a seam would be"
    return sorted({c for s in tile_starts(n, tile, overlap)
                   for c in ((s - 1, s) if s > 0 else ()) + ((s + tile - 2, s + tile - 1) if s + tile < n else ())})

def seam_ratio(e, tile, overlap, r=32):
    "Mean |e[:, :, c+1] - e[:, :, c]| over the columns c at tile edges, over that of the other columns within `r` of them"
    n = e.shape[-1]
    d = (e[:, :, 1:] - e[:, :, :-1]).abs().mean((0, 1))
    at = _edges(n, tile, overlap)
    near = sorted({c for k in at for c in range(k - r, k + r + 1) if 0 <= c < n - 1} - set(at))
    return float(d[at].mean() / d[near].mean())

@pytest.mark.parametrize('kind', ['unet', 'resnet'])
def test_3000x2000_in_tiles(kind):
    torch.manual_seed(0)
    G = (UnetGenerator(num_downs=5, ngf=4) if kind == 'unet' else ResnetGenerator(ngf=4, n_blocks=2)).eval()
    x = from_pil(Image.fromarray(skimage.data.astronaut()).resize((3000, 2000), Image.Resampling.BICUBIC))
    seen = []
    h = G.register_forward_pre_hook(lambda m, a: seen.append(a[0].numel() // a[0].shape[1]))
    tile, overlap, bs = 512, 64, 4
    try:
        one, _ = _peak_during(lambda: run_generator(G, torch.randn(bs, 3, tile, tile)))   # one batch of tiles
        peak, y = _peak_during(lambda: run_tiled(G, x, tile, overlap, bs=bs))
    finally: h.remove()
    assert y.shape == (3, 2000, 3000) and y.abs().max() <= 1
    assert max(seen) == bs * tile * tile   # the network never sees more than a batch of tiles
    buffers = (3 + 1) * 4 * 3000 * 2000   # the float output and one weight per pixel
    bound = one + buffers + 64 * 2**20
    whole_peak, whole = _peak_during(lambda: run_padded(G, x[None])[0])
    print(f"{type(G).__name__}: peak {peak / 2**20:.0f} MB while tiling 3000x2000 (whole image at once: {whole_peak / 2**20:.0f} MB), "
          f"bound {bound / 2**20:.0f} MB = a batch of tiles {one / 2**20:.0f} MB + output and weights {buffers / 2**20:.0f} MB + 64 MB")
    assert peak <= bound
    # no seam: what tiling changed (tiled - whole) steps across tile edges no more than next to them (5%: the measure's noise)
    e = y - whole
    cols, rows = seam_ratio(e, tile, overlap), seam_ratio(e.transpose(1, 2), tile, overlap)
    print(f"  seam ratio (1: none) columns {cols:.3f}, rows {rows:.3f}; |tiled - whole| mean {e.abs().mean():.2e}, max {e.abs().max():.2e}")
    assert cols <= 1.05 and rows <= 1.05

def test_seam_measure_finds_unblended_tiles():
    "The measure above is far above 1 for tiles pasted side by side without overlap"
    torch.manual_seed(0)
    x = from_pil(Image.fromarray(skimage.data.astronaut()).resize((1024, 256), Image.Resampling.BICUBIC))
    for G in (UnetGenerator(num_downs=5, ngf=4).eval(), ResnetGenerator(ngf=4, n_blocks=2).eval()):
        whole = run_padded(G, x[None])[0]
        assert seam_ratio(run_tiled(G, x, 256, 0) - whole, 256, 0) > 1.05
        assert seam_ratio(run_tiled(G, x, 256, 64) - whole, 256, 64) <= 1.05

def test_translate_keeps_the_size_without_resizing(tmp_path):
    "Without --tile, the image runs whole at its own size (padded to the network's multiple and cropped back)"
    torch.manual_seed(0)
    G = ResnetGenerator(ngf=4, n_blocks=1).eval()
    torch.save(G.state_dict(), tmp_path/'g.pth')
    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (37, 50, 3), dtype=np.uint8)); im.save(tmp_path/'in.png')
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'in.png', '--output', tmp_path/'o', '--test-mode', 'eval']) == 0
    x = torch.nn.functional.pad(from_pil(im)[None], (0, 2, 0, 3), mode='reflect')
    with torch.no_grad(): want = to_pil(G(x)[0, :, :37, :50])
    got = Image.open(tmp_path/'o'/'in.png')
    assert got.size == (50, 37) and np.array_equal(np.asarray(got), np.asarray(want))
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'in.png', '--output', tmp_path/'t', '--test-mode', 'eval',
                '--tile', 16, '--overlap', 8]) == 0
    assert Image.open(tmp_path/'t'/'in.png').size == (50, 37)
    # --preprocess resize: today's behaviour, resized to the load size and back
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'in.png', '--output', tmp_path/'r', '--test-mode', 'eval',
                '--preprocess', 'resize', '--load-size', 32]) == 0
    with torch.no_grad(): y = G(from_pil(im.resize((32, 32), Image.Resampling.BICUBIC))[None])[0]
    assert np.array_equal(np.asarray(Image.open(tmp_path/'r'/'in.png')), np.asarray(to_pil(y).resize((50, 37), Image.Resampling.BICUBIC)))

@pytest.mark.parametrize('args, msg', [(['--tile', 512, '--preprocess', 'resize'], 'leave out --preprocess'),
                                       (['--tile', 512, '--load-size', 256], 'leave out --preprocess and --load-size'),
                                       (['--tile', 0], '--tile must be at least 1'), (['--tile', 64, '--overlap', -1], '--overlap must be >= 0')])
def test_tile_arguments(args, msg, tmp_path, capsys):
    torch.save(ResnetGenerator(ngf=4, n_blocks=1).state_dict(), tmp_path/'g.pth')
    Image.new('RGB', (8, 8)).save(tmp_path/'in.png')
    assert run(['translate', '--model', tmp_path/'g.pth', '--input', tmp_path/'in.png', '--output', tmp_path/'o', *args]) == 2
    assert msg in capsys.readouterr().err and not (tmp_path/'o').exists()
