"PSNR, SSIM, FID and KID against independent implementations (scikit-image, SciPy), in the Learner, and `evaluate`."
import contextlib, csv, io, json
from pathlib import Path
import numpy as np, pytest, scipy.linalg, torch
from torch import nn
import torch.nn.functional as F
from PIL import Image
import skimage.data
from skimage.metrics import peak_signal_noise_ratio, structural_similarity
from skimage.filters import gaussian
from fastai.basics import Learner, DataLoaders, L1LossFlat
from torchvision.models.inception import InceptionA
from gan_callbacks.metrics.scores import psnr, ssim, psnr_per_image, ssim_per_image, frechet_distance, feature_stats, kernel_distance, fid, kid, image_features, PSNR, SSIM
from gan_callbacks.nets.inception import FIDInception, fid_inception, fid_weights_name
from gan_callbacks.metrics.evaluation import evaluate
from gan_callbacks.deploy.interop import load_generator, export_reference
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import Pix2pixTrainer, pix2pix_learner
from gan_callbacks.trainer.optim import pix2pix_adam
from gan_callbacks.trainer.test_mode import paper_test_mode
from gan_callbacks.data.samples import sample_pairs
from gan_callbacks.cli.parser import main
from gan_callbacks.callback.grids import plot_training
from helpers import HostReads, batches, paired_dls as make_dls, pix2pix_nets as nets

SK_SSIM = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=2)

def sk_scores(p, t):
    "Per-image PSNR and SSIM from scikit-image, images (N, C, H, W) in [-1, 1]"
    p, t = p.double().numpy(), t.double().numpy()
    return (np.array([peak_signal_noise_ratio(b, a, data_range=2) for a, b in zip(p, t)]),
            np.array([structural_similarity(b, a, channel_axis=0, **SK_SSIM) for a, b in zip(p, t)]))

def photo_pairs():
    "Structured images: crops of photographs (RGB and grey, square and not) and degraded versions of them"
    rgb = torch.from_numpy(skimage.data.astronaut()[:96, 100:228].copy()).permute(2, 0, 1).double() / 127.5 - 1
    grey = torch.from_numpy(skimage.data.camera()[200:264, 100:164].copy())[None].double() / 127.5 - 1
    out = []
    for t in (rgb, grey):
        blur = torch.from_numpy(gaussian(t.numpy(), sigma=(0, 1.5, 1.5)))
        noisy = (t + 0.1 * torch.randn(t.shape, generator=torch.Generator().manual_seed(0), dtype=t.dtype)).clamp(-1, 1)
        out.append((torch.stack([blur, noisy, -t, t.roll(3, -1)]), t.expand(4, *t.shape)))
    return out

def random_pairs():
    g = torch.Generator().manual_seed(1)
    res = []
    for shape in [(4, 3, 32, 32), (3, 1, 11, 17), (2, 3, 45, 30)]:
        t = torch.rand(shape, generator=g) * 2 - 1
        res.append(((t + torch.linspace(0.05, 0.8, shape[0]).view(-1, 1, 1, 1) * torch.randn(shape, generator=g)).clamp(-1, 1), t))
    return res


@pytest.mark.parametrize('p,t', random_pairs() + photo_pairs())
def test_psnr_ssim_match_scikit_image(p, t):
    ps, ss = sk_scores(p, t)
    np.testing.assert_allclose(psnr_per_image(p, t).numpy(), ps, atol=1e-3, rtol=0)
    np.testing.assert_allclose(ssim_per_image(p, t).numpy(), ss, atol=2e-3, rtol=0)
    assert abs(psnr(p, t).item() - ps.mean()) < 1e-3 and abs(ssim(p, t).item() - ss.mean()) < 2e-3   # per image, then the mean
    assert np.abs(ssim_per_image(p, t).numpy() - ss).max() < 1e-6   # in fact much closer than asked

def test_float32_input_and_single_images():
    p, t = random_pairs()[0]
    ps, ss = sk_scores(p, t)
    assert abs(psnr(p[0].float(), t[0].float()).item() - ps[0]) < 1e-3
    assert abs(ssim(p[0].float(), t[0].float()).item() - ss[0]) < 2e-3

def test_typed_tensors_of_different_kinds():
    "A G's output on label maps keeps its input's fastai type; it is scored against the photos all the same"
    from fastai.vision.all import TensorImage
    from gan_callbacks.data.label_maps import TensorLabelInput
    p, t = random_pairs()[0]
    assert psnr(TensorLabelInput(p), TensorImage(t)) == psnr(p, t) and ssim(TensorLabelInput(p), TensorImage(t)) == ssim(p, t)

def test_bad_shapes():
    with pytest.raises(ValueError, match='same shape'): psnr(torch.zeros(1, 3, 16, 16), torch.zeros(1, 3, 16, 17))
    with pytest.raises(ValueError, match='at least 11x11'): ssim(torch.zeros(1, 3, 10, 40), torch.zeros(1, 3, 10, 40))
    with pytest.raises(ValueError, match='expected images'): psnr(torch.zeros(16, 16), torch.zeros(16, 16))


def fd_scipy(a, b):
    "The closed form of the Frechet distance through `scipy.linalg.sqrtm`, on features `a`, `b` (N, D)"
    m1, m2, s1, s2 = a.mean(0), b.mean(0), np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    return ((m1 - m2)**2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(scipy.linalg.sqrtm(s1 @ s2).real)

@pytest.mark.parametrize('n1,n2,d', [(300, 200, 16), (500, 400, 64), (100, 100, 3)])
def test_frechet_distance_matches_scipy(n1, n2, d):
    rng = np.random.default_rng(d)
    a = rng.normal(size=(n1, d)) @ rng.normal(size=(d, d))
    b = rng.normal(0.3, 1.5, size=(n2, d)) @ rng.normal(size=(d, d)) + 1
    ref = fd_scipy(a, b)
    got = frechet_distance(*feature_stats(a), *feature_stats(b))
    assert abs(got - ref) <= 1e-4 * abs(ref)
    np.testing.assert_allclose(feature_stats(a)[1].numpy(), np.cov(a, rowvar=False), rtol=1e-12, atol=1e-12)
    assert abs(frechet_distance(*feature_stats(a), *feature_stats(a))) < 1e-6 * abs(ref)

def mmd_numpy(x, y):
    "Unbiased MMD^2 with the cubic polynomial kernel, written out with loops over the pairs"
    d = x.shape[1]
    k = lambda a, b: (a @ b / d + 1) ** 3
    m, n = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(x[i], y[j]) for i in range(m) for j in range(n)) / (m * n)
    return xx + yy - 2 * xy

def test_kernel_distance():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 5)), rng.normal(0.5, 1, size=(25, 5))
    m, s = kernel_distance(x, y)
    assert s == 0 and abs(m - mmd_numpy(x, y)) < 1e-10
    sub = kernel_distance(x, y, n_subsets=20, subset_size=10, seed=3)
    assert sub == kernel_distance(x, y, n_subsets=20, subset_size=10, seed=3) and sub[1] > 0
    same = rng.normal(size=(400, 5)), rng.normal(size=(400, 5))   # two samples of one distribution: near 0
    assert abs(kernel_distance(*same)[0]) < 0.1 * m


def extractor():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3, stride=2), nn.BatchNorm2d(6), nn.ReLU(), nn.AdaptiveAvgPool2d(2))

def test_fid_kid_with_a_small_extractor(tmp_path):
    ex = extractor().train()
    g = torch.Generator().manual_seed(0)
    real, fake = torch.rand(30, 3, 20, 20, generator=g) * 2 - 1, torch.rand(26, 3, 20, 20, generator=g) ** 2 * 2 - 1
    ex.eval()
    with torch.no_grad(): fr, ff = ex(real).flatten(1).double().numpy(), ex(fake).flatten(1).double().numpy()
    ex.train()
    ref = fd_scipy(fr, ff)
    assert abs(fid(real, fake, ex, bs=7) - ref) <= 1e-4 * abs(ref)
    assert ex.training   # left as it was
    assert abs(kid(real, fake, ex)[0] - mmd_numpy(fr, ff)) < 1e-9
    # from folders of image files: the same as from the images read back
    for name, ims in (('real', real), ('fake', fake)):
        (tmp_path/name).mkdir()
        for i, t in enumerate(ims): Image.fromarray(((t + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()).save(tmp_path/name/f'{i:02d}.png')
    q = lambda t: ((t + 1) * 127.5).round() / 127.5 - 1
    assert fid(tmp_path/'real', tmp_path/'fake', ex) == pytest.approx(fid(q(real), q(fake), ex), rel=1e-6)


def test_fid_inception_weights(tmp_path, monkeypatch):
    monkeypatch.delenv('GAN_CALLBACKS_FID_WEIGHTS', raising=False)
    monkeypatch.setenv('GAN_CALLBACKS_HOME', str(tmp_path/'home'))
    with pytest.raises(FileNotFoundError) as e: fid_inception()
    msg = str(e.value)
    assert fid_weights_name in msg and '--fid-weights' in msg and 'GAN_CALLBACKS_FID_WEIGHTS' in msg and str(tmp_path/'home') in msg
    net = FIDInception()
    torch.save(net.net.state_dict(), tmp_path/'w.pth')
    monkeypatch.setenv('GAN_CALLBACKS_FID_WEIGHTS', str(tmp_path/'w.pth'))
    loaded = fid_inception()
    assert not loaded.training
    sd = loaded.net.state_dict()
    assert all(torch.equal(v, sd[k]) for k, v in net.net.state_dict().items())
    with torch.no_grad(): assert loaded(torch.rand(1, 3, 40, 30) * 2 - 1).shape == (1, 2048)
    torch.save({'fc.weight': torch.zeros(1000, 2048)}, tmp_path/'bad.pth')
    with pytest.raises(ValueError, match='does not hold the FID Inception weights'): fid_inception(tmp_path/'bad.pth')

def test_fid_inception_pooling():
    "The FID graph's blocks: torchvision's, except the average pools leave the padding out (and Mixed_7c max-pools)"
    net = FIDInception().eval()
    tv = InceptionA(192, pool_features=32).eval()
    tv.load_state_dict(net.net.Mixed_5b.state_dict())
    x = torch.rand(1, 192, 9, 9)
    with torch.no_grad(): a, b = net.net.Mixed_5b(x), tv(x)
    torch.testing.assert_close(a[..., 1:-1, 1:-1], b[..., 1:-1, 1:-1])   # inside: the same
    assert not torch.allclose(a[..., 0, :], b[..., 0, :])                 # on the border: not
    assert net.net.Mixed_7b.pool is not net.net.Mixed_7c.pool


def learner(valid, test_mode='eval', metrics=True, bs=2, fn=Learner):
    G, D = nets()
    dls = make_dls(batches(n=2, bs=bs), valid=valid)
    kw = dict(metrics=[PSNR(), SSIM()] if metrics else [])
    if fn is Learner: return Learner(dls, G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=Pix2pixTrainer(D, test_mode=test_mode), **kw)
    return pix2pix_learner(dls, generator=G, discriminator=D, trainer_kwargs=dict(test_mode=test_mode), **kw)

def valid_items(n, seed=5):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(3, 32, 32, generator=g) * 2 - 1, torch.rand(3, 32, 32, generator=g) * 2 - 1) for _ in range(n)]

@pytest.mark.parametrize('test_mode', ['eval', 'paper'])
def test_learner_metrics_equal_the_functions(test_mode):
    items = valid_items(5)   # batches of 2, 2 and 1: the mean is over images, not batches
    learn = learner(items, test_mode)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    names = list(learn.recorder.metric_names)
    assert names[1:5] == ['train_loss', 'valid_loss', 'psnr', 'ssim']
    G = learn.model.eval()
    outs = []
    with torch.no_grad(), (paper_test_mode(G) if test_mode == 'paper' else contextlib.nullcontext()):
        for i in range(0, 5, 2): outs.append(G(torch.stack([x for x, _ in items[i:i+2]])))   # the same batches
    out, y = torch.cat(outs), torch.stack([t for _, t in items])
    vals = learn.recorder.values[-1]
    assert vals[2] == pytest.approx(psnr(out, y).item(), abs=1e-5)
    assert vals[3] == pytest.approx(ssim(out, y).item(), abs=1e-6)
    assert isinstance(vals[2], float)
    v = learn.validate()   # and with `validate`
    assert v[1] == pytest.approx(vals[2], abs=1e-5) and v[2] == pytest.approx(vals[3], abs=1e-6)

def test_metrics_add_no_host_read_per_batch():
    "The metrics' reads happen once per validation, whatever the number of batches"
    def reads(n_valid, metrics):
        learn = learner(valid_items(n_valid), metrics=metrics, fn=pix2pix_learner)
        with HostReads() as h, contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
        return h.n
    one, many, none = reads(2, True), reads(8, True), reads(2, False)   # 1 and 4 validation batches
    assert one['library'] == many['library'] == none['library'] + 2   # one read per metric and validation
    assert many['other'] - one['other'] == reads(8, False)['other'] - none['other']   # fastai's own (its valid loss), unchanged


# `evaluate` and the command line

@pytest.fixture(scope='module')
def run_dir(tmp_path_factory):
    home = tmp_path_factory.mktemp('home')
    data = sample_pairs(home/'sample', n_train=8, n_valid=5, size=32)
    out = tmp_path_factory.mktemp('run')
    with contextlib.redirect_stdout(io.StringIO()):
        main(['train', '--data', str(data), '--out', str(out), '--epochs', '1', '--epochs-decay', '1', '--bs', '4',
              '--load-size', '36', '--crop-size', '32', '--ngf', '8', '--lr', '1e-3', '--n-samples', '1'])
    return data, out

def test_train_reports_psnr_ssim(run_dir):
    data, out = run_dir
    rows = list(csv.DictReader(open(out/'history.csv')))
    assert {'psnr', 'ssim'} <= set(rows[0])
    s = json.loads((out/'summary.json').read_text())
    assert s['final_valid_psnr'] == pytest.approx(float(rows[-1]['psnr']), rel=1e-5)
    assert s['first_valid_ssim'] == pytest.approx(float(rows[0]['ssim']), rel=1e-5)
    for k in ('mean_image_psnr', 'mean_image_ssim', 'input_psnr', 'input_ssim'): assert np.isfinite(s[k])
    # returning the (grey) input, recomputed here from the files
    _, a, b = read_pairs(data)
    ps, ss = sk_scores(a, b)
    assert s['input_psnr'] == pytest.approx(ps.mean(), abs=1e-3) and s['input_ssim'] == pytest.approx(ss.mean(), abs=2e-3)

def read_pairs(data):
    files = sorted((data/'val').iterdir())
    ab = [torch.from_numpy(np.asarray(Image.open(f).convert('RGB')).copy()).permute(2, 0, 1).float() / 127.5 - 1 for f in files]
    return [f.name for f in files], torch.stack([t[..., :32] for t in ab]), torch.stack([t[..., 32:] for t in ab])

def test_evaluate_scores_the_generator(run_dir, tmp_path):
    data, out = run_dir
    names, a, b = read_pairs(data)
    ex = extractor()
    s = evaluate(out/'generator.pkl', data, tmp_path/'pkl', extractor=ex, test_mode='eval', n_show=2, device='cpu', quiet=True, trust_pickle=True)
    G = load_generator(out/'generator.pkl', device='cpu', trust_pickle=True)
    with torch.no_grad(): fake = G(a)
    rows = list(csv.DictReader(open(tmp_path/'pkl'/'metrics.csv')))
    assert [r['image'] for r in rows] == names
    ps, ss = sk_scores(fake, b)
    np.testing.assert_allclose([float(r['psnr']) for r in rows], ps, atol=1e-3)
    np.testing.assert_allclose([float(r['ssim']) for r in rows], ss, atol=2e-3)
    np.testing.assert_allclose([float(r['l1']) for r in rows], (fake - b).abs().mean((1, 2, 3)).numpy(), atol=1e-5)
    assert s['ssim'] == pytest.approx(ss.mean(), abs=2e-3) and s['n_images'] == 5 and s['size'] == 32
    assert s['fid'] == pytest.approx(fd_scipy(*(ex.eval()(t).flatten(1).double().detach().numpy() for t in (b, fake))), rel=1e-4)
    assert s['best'] == [names[i] for i in np.argsort(-ss)[:2]] and s['worst'] == [names[i] for i in np.argsort(ss)[:2][::-1]]
    assert Image.open(tmp_path/'pkl'/'best_worst.png').size == (3 * 34 + 2, 4 * 34 + 2)   # 2 best, 2 worst; 2px padding around
    # the same generator from the last checkpoint, as a module, and as a reference state dict (its size read from the images)
    ck = sorted((out/'checkpoints').glob('*.pth'))[-1]
    export_reference(G, tmp_path/'latest_net_G.pth')
    for model in (ck, G, tmp_path/'latest_net_G.pth'):
        s2 = evaluate(model, data, tmp_path/'other', test_mode='eval', device='cpu', quiet=True)
        assert s2['psnr'] == pytest.approx(s['psnr'], abs=1e-6) and s2['ssim'] == pytest.approx(s['ssim'], abs=1e-6)
        assert s2['size'] == 32

def test_evaluate_command_on_a_reference_state_dict(run_dir, tmp_path, capsys):
    "`evaluate --model latest_net_G.pth`: the reference's test default ('paper' mode) at the images' size; --netG reaches the loader"
    data, out = run_dir
    G = load_generator(out/'generator.pkl', device='cpu', trust_pickle=True)
    export_reference(G, tmp_path/'latest_net_G.pth')
    torch.manual_seed(0)
    assert main(['evaluate', '--model', str(tmp_path/'latest_net_G.pth'), '--data', str(data), '--out', str(tmp_path/'ev')]) is None
    assert '5 pairs' in capsys.readouterr().out
    s = json.loads((tmp_path/'ev'/'summary.json').read_text())
    _, a, b = read_pairs(data)
    torch.manual_seed(0)   # the same dropout masks: one batch of 5, as `evaluate` runs it
    with torch.no_grad(), paper_test_mode(G): fake = G(a)
    assert s['size'] == 32 and s['psnr'] == pytest.approx(psnr(fake, b).item(), abs=1e-4)
    with pytest.raises(SystemExit) as e:
        main(['evaluate', '--model', str(tmp_path/'latest_net_G.pth'), '--data', str(data), '--out', str(tmp_path/'ev2'), '--netG', 'unet_256'])
    assert e.value.code == 2 and 'num_downs=5, but num_downs=8 was asked for' in capsys.readouterr().err
    assert not (tmp_path/'ev2').exists()

def test_plot_training_has_a_psnr_ssim_panel():
    import matplotlib.pyplot as plt
    for metrics in (True, False):
        learn = learner(valid_items(2), metrics=metrics, fn=pix2pix_learner)
        with learn.no_bar(), learn.no_logging(): learn.fit(2, 1e-3)
        fig = plot_training(learn)
        plt.close(fig)
        titles, ylabels = [ax.get_title() for ax in fig.axes], [ax.get_ylabel() for ax in fig.axes]
        if not metrics: assert len(fig.axes) == 3 and titles[2] == 'L1(G(A), B)'   # losses of G and D, L1
        else:
            assert len(fig.axes) == 5 and titles[3] == 'validation PSNR and SSIM' and ylabels[3:] == ['PSNR (dB)', 'SSIM']   # and a twin axis
            names = list(learn.recorder.metric_names[1:])
            plotted = [ax.get_lines()[0].get_ydata().tolist() for ax in fig.axes[3:]]
            assert plotted == [[v[names.index(n)] for v in learn.recorder.values] for n in ('psnr', 'ssim')]

def test_evaluate_command(run_dir, tmp_path, capsys):
    data, out = run_dir
    assert main(['evaluate', '--trust-pickle', '--model', str(out/'generator.pkl'), '--data', str(data), '--out', str(tmp_path/'ev')]) is None
    text = capsys.readouterr().out
    assert '5 pairs' in text and 'PSNR' in text and 'SSIM' in text
    assert sorted(f.name for f in (tmp_path/'ev').iterdir()) == ['best_worst.png', 'metrics.csv', 'summary.json']

@pytest.mark.parametrize('argv,msg', [
    (['--model', '/no/such.pkl'], '--model /no/such.pkl: no such file'),
    (['--data', '/no/such/dir'], '--data /no/such/dir: no such directory'),
    (['--fid-weights', '/no/inception.pth'], fid_weights_name),
])
def test_evaluate_bad_input(run_dir, tmp_path, argv, msg, capsys):
    data, out = run_dir
    args = dict(zip(['--model', '--data', '--out'], [str(out/'generator.pkl'), str(data), str(tmp_path/'ev')]))
    args.update(dict(zip(argv[::2], argv[1::2])))
    with pytest.raises(SystemExit) as e: main(['evaluate', '--trust-pickle', *[x for kv in args.items() for x in kv]])
    assert e.value.code == 2 and msg in capsys.readouterr().err
    assert not (tmp_path/'ev').exists()   # nothing written
