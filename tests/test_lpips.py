"LPIPS from local files: the formula of `lpips.LPIPS` (v0.1) written out, 0 on identical images, torchvision's layouts, the missing-file message, `evaluate --lpips-weights`."
import warnings
import pytest, torch
from torchvision.models import alexnet, vgg16
from gan_callbacks.nets.lpips import LPIPS, LPIPSMetric, lpips_net, lpips_nets

def random_lpips(net, seed=0):
    torch.manual_seed(seed)
    m = LPIPS(net)
    for p in m.parameters(): p.data.uniform_(0, 0.1)
    return m

def write_files(m, d):
    "`m`'s weights in the files' layouts: torchvision's state dict (with its classifier) and the lpips package's"
    tv = {'alex': alexnet, 'vgg': vgg16}[m.net]()
    tv.features[:len(m.features)].load_state_dict(m.features.state_dict())
    torch.save(tv.state_dict(), d/lpips_nets[m.net]['file'])
    torch.save({f'lin{i}.model.1.weight': l.weight.detach().clone() for i, l in enumerate(m.lins)}, d/f'{m.net}.pth')
    return tv

def reference(tv_features, lins, slices, x, y):
    "`lpips.LPIPS.forward` (version 0.1, not spatial), with torchvision's network"
    shift, scale = torch.tensor([-.030, -.088, -.188]).view(1, 3, 1, 1), torch.tensor([.458, .448, .450]).view(1, 3, 1, 1)
    hx, hy, val, a = (x - shift) / scale, (y - shift) / scale, 0, 0
    for lin, b in zip(lins, slices):
        hx, hy = tv_features[a:b](hx), tv_features[a:b](hy); a = b
        nx = hx / (torch.sqrt(torch.sum(hx ** 2, dim=1, keepdim=True)) + 1e-10)
        ny = hy / (torch.sqrt(torch.sum(hy ** 2, dim=1, keepdim=True)) + 1e-10)
        val = val + lin((nx - ny) ** 2).mean([2, 3], keepdim=True)
    return val.flatten()

@pytest.mark.parametrize('net', ['alex', 'vgg'])
def test_formula_and_files(tmp_path, net):
    m = random_lpips(net)
    tv = write_files(m, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore'); loaded = lpips_net(net, tmp_path)   # random weights: not torchvision's SHA-256
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1, torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    with torch.no_grad():
        got, want = loaded(x, y), reference(tv.eval().features, m.lins, lpips_nets[net]['slices'], x, y)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-7) and (got > 0).all()
        assert torch.equal(loaded(x, x), torch.zeros(2))
        assert torch.allclose(loaded(x[:, :1], y[:, :1]), loaded(x[:, :1].expand(-1, 3, -1, -1), y[:, :1].expand(-1, 3, -1, -1)))

@pytest.mark.slow
def test_missing_and_wrong_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"LPIPS needs torchvision's alexnet-owt-7be5be79.pth, not found at .*curl -L -o .*download.pytorch.org"):
        lpips_net('alex', tmp_path)
    write_files(random_lpips('alex'), tmp_path)
    (tmp_path/'alex.pth').unlink()
    with pytest.raises(FileNotFoundError, match=r"LPIPS needs LPIPS's v0.1 alex.pth.*PerceptualSimilarity"): lpips_net('alex', tmp_path)
    torch.save(vgg16().state_dict(), tmp_path/'alexnet-owt-7be5be79.pth')
    torch.save({}, tmp_path/'alex.pth')
    with pytest.raises(ValueError, match="does not hold torchvision's alex features"), warnings.catch_warnings():
        warnings.simplefilter('ignore'); lpips_net('alex', tmp_path)

def test_evaluate_column_and_command_line(tmp_path):
    from gan_callbacks.cli.parser import main
    from gan_callbacks.nets.networks import UnetGenerator
    from gan_callbacks.data.samples import sample_pairs
    from gan_callbacks.metrics.evaluation import evaluate
    from gan_callbacks.deploy.model_folder import write_model_folder
    m, w = random_lpips('alex'), tmp_path/'w'
    w.mkdir(); write_files(m, w)
    data = sample_pairs(tmp_path/'pairs', n_train=2, n_valid=4, size=64)
    G = UnetGenerator(3, 3, num_downs=5, ngf=4)
    s = evaluate(G, data, tmp_path/'ev', lpips=m, device='cpu', quiet=True)
    rows = (tmp_path/'ev'/'metrics.csv').read_text().splitlines()
    assert rows[0] == 'image,l1,psnr,ssim,lpips' and abs(s['lpips'] - sum(float(r.split(',')[-1]) for r in rows[1:]) / 4) < 1e-5
    folder = write_model_folder(G, tmp_path/'g', dict(size=64, test_mode='eval'), sample=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        main(['evaluate', '--model', str(folder), '--data', str(data), '--out', str(tmp_path/'ev2'), '--lpips-weights', str(w)])
    assert 'lpips' in (tmp_path/'ev2'/'metrics.csv').read_text().splitlines()[0]
    with pytest.raises(SystemExit):
        main(['evaluate', '--model', str(folder), '--data', str(data), '--out', str(tmp_path/'ev3'), '--lpips-weights', str(tmp_path/'none')])

def test_validation_metric():
    from fastai.basics import Learner, DataLoaders
    from fastai.losses import L1LossFlat
    g = torch.Generator().manual_seed(0)
    A = torch.rand(8, 3, 32, 32, generator=g) * 2 - 1
    items = list(zip(A, A.flip(-1)))
    dls = DataLoaders.from_dsets(items, items[:4], bs=2, device='cpu')
    m = random_lpips('alex')
    class Same(torch.nn.Module):   # the input as output, with a parameter for fastai to find the device by
        def __init__(self): super().__init__(); self.w = torch.nn.Parameter(torch.ones(()))
        def forward(self, x): return x * self.w
    learn = Learner(dls, Same(), loss_func=L1LossFlat(), metrics=LPIPSMetric(m))
    with learn.no_bar(), learn.no_logging(): loss, lp = learn.validate()
    with torch.no_grad(): want = m(A[:4], A[:4].flip(-1)).mean().item()
    assert abs(lp - want) < 1e-6 and LPIPSMetric.lower_is_better

def test_train_with_an_lpips_term_from_local_files(tmp_path, capsys):
    "`train --perceptual lpips` reads the folder's files and logs G's perceptual term; a folder without them stops before any training"
    import csv, json
    from gan_callbacks.cli.parser import main
    from gan_callbacks.data.samples import sample_pairs
    from gan_callbacks.deploy.model_folder import config_file
    w = tmp_path/'w'; w.mkdir(); write_files(random_lpips('alex'), w)
    data = sample_pairs(tmp_path/'sample', n_train=8, n_valid=2, size=32)
    args = lambda out, weights: [str(a) for a in ['train', '--data', data, '--out', out, '--epochs', 1, '--epochs-decay', 0, '--bs', 4,
                                                  '--load-size', 36, '--crop-size', 32, '--ngf', 8, '--n-samples', 2,
                                                  '--perceptual', 'lpips', '--lambda-perceptual', 5, '--perceptual-weights', weights]]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore'); main(args(tmp_path/'run', w))   # random weights: not torchvision's SHA-256
    rows = list(csv.DictReader(open(tmp_path/'run'/'history.csv')))
    assert len(rows) == 1 and float(rows[0]['g_perceptual']) > 0
    training = json.loads((tmp_path/'run'/'generator'/config_file).read_text())['training']
    assert training['perceptual'] == 'lpips' and training['perceptual_weights'] == str(w)
    with pytest.raises(SystemExit): main(args(tmp_path/'none', tmp_path/'empty'))
    assert "LPIPS needs torchvision's alexnet-owt-7be5be79.pth" in capsys.readouterr().err
    assert not (tmp_path/'none'/'generator.pkl').exists()
