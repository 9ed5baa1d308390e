"fastai's everyday tools on the GAN learners: predict, show_results, get_preds, loggers after a failed fit, summary, lr_find."
import contextlib, io, warnings
import pytest, torch
from fastai.basics import Learner, Callback, L1LossFlat
from fastai.callback.progress import CSVLogger
import fastai.callback.schedule  # Learner.lr_find
from gan_callbacks.nets.networks import UnetGenerator, PatchDiscriminator
from gan_callbacks.gans.pix2pix import pix2pix_learner
from helpers import batches, paired_dls as make_dls, pix2pix_on, tiny_cyclegan


def tiny_pix2pix(n=2, **kw):
    torch.manual_seed(0)
    return pix2pix_learner(make_dls(batches(n=n)), UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2), **kw)

class Boom(Callback):
    "Raises in the first training batch"
    def __init__(self, exc=RuntimeError): self.exc = exc
    def after_batch(self):
        if self.training: raise self.exc('boom')

@pytest.mark.parametrize('exc', [RuntimeError, KeyboardInterrupt])
def test_failed_fit_leaves_the_loggers_as_they_were(tmp_path, exc):
    learn = tiny_pix2pix(path=tmp_path)
    before = learn.logger, [(cb, cb.__dict__.get('old_logger')) for cb in learn.cbs]
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(exc): learn.fit(1, 1e-3, cbs=[CSVLogger(), Boom(exc)])
    assert learn.logger is before[0]
    assert [(cb, cb.__dict__.get('old_logger')) for cb in learn.cbs] == before[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out): learn.fit(1, 1e-3, cbs=CSVLogger())   # a plain fit after it: rows once
    rows = [l for l in (tmp_path/'history.csv').read_text().splitlines() if l]
    assert len(rows) == 2 and rows[0].startswith('epoch')
    assert [l.split()[0] for l in out.getvalue().splitlines()] == ['epoch', '0']   # the table printed once


# --- predict, get_preds and show_results

from PIL import Image
from fastai.vision.all import PILImage, DataBlock, ImageBlock, IntToFloatTensor, Normalize, get_image_files, RandomSplitter
from gan_callbacks.data.folders import Pix2pixDataLoaders, UnpairedDataLoaders
from gan_callbacks.data.samples import sample_pairs, sample_unpaired
from gan_callbacks.nets.networks import ResnetGenerator
from gan_callbacks.gans.cyclegan import cyclegan_learner

def red_blue(fn, w=64, h=32):
    "A `w` x `h` image, left half red, right half blue"
    im = Image.new('RGB', (w, h), (255, 0, 0)); im.paste((0, 0, 255), (w // 2, 0, w, h)); im.save(fn)
    return fn

def seen_by(model):
    "The inputs `model` is called with, kept in a list"
    seen = []
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
    return seen

def test_pix2pix_predict_translates_a_whole_file_at_its_own_size(pairs, tmp_path):
    learn = pix2pix_on(pairs)
    seen, fn = seen_by(learn.model), red_blue(tmp_path/'rb.png')
    for item in (fn, str(fn), PILImage.create(fn)):
        dec, pred, raw = learn.predict(item)
        x = seen[-1][0]
        assert x.shape == (3, 32, 64)                           # the whole image, not its left half
        assert x[0, :, :32].mean() > 0.9 and x[2, :, 32:].mean() > 0.9   # red on the left, blue on the right reach G
        assert dec.shape == pred.shape == (3, 32, 64)
    # a size the U-Net cannot take: resized for G, and back
    dec, pred, _ = learn.predict(red_blue(tmp_path/'odd.png', w=50, h=40))
    assert seen[-1].shape[-2:] == (32, 64) and dec.shape == pred.shape == (3, 40, 50)
    # the A half of an A|B file, asked for
    b = learn.dls.test_dl([fn], aligned=True).one_batch()[0]
    assert b.shape == (1, 3, 32, 32) and b[0, 0].mean() > 0.9 and b[0, 2].mean() < -0.9

def test_predict_takes_whatever_pilimage_create_takes(pairs, unpaired, tmp_path):
    "Unconverted PNGs and JPEGs, bytes, uint8 arrays and tensors, floats in [0, 1] translate as their file does; other inputs get one line naming them"
    import numpy as np
    from fastai.vision.all import TensorImage
    rgb = np.random.default_rng(0).integers(0, 256, (32, 64, 3), dtype=np.uint8)
    png, jpg = tmp_path/'x.png', tmp_path/'x.jpg'
    Image.fromarray(rgb).save(png); Image.fromarray(rgb).save(jpg, quality=95)
    chw = torch.from_numpy(rgb).permute(2, 0, 1)
    for learn in (pix2pix_on(pairs), tiny_cyclegan(unpaired)):
        seen = seen_by(learn.model if not hasattr(learn.model, 'g_a') else learn.model.g_a)
        def g_input(item): learn.predict(item); return seen[-1][0]
        want = g_input(png)
        assert want.shape == (3, 32, 64)
        for item in (Image.open(png), png.read_bytes(), png.open('rb'), rgb, chw, TensorImage(chw), chw.permute(1, 2, 0),
                     chw.float() / 255, rgb / 255.):
            torch.testing.assert_close(g_input(item), want, atol=1e-6, rtol=0, msg=lambda m: f"{type(item).__name__}: {m}")
        jpeg = np.asarray(Image.open(jpg).convert('RGB'))   # Pillow's decode of the JPEG
        torch.testing.assert_close(g_input(Image.open(jpg)), torch.from_numpy(jpeg).permute(2, 0, 1).float() / 127.5 - 1, atol=1e-6, rtol=0)
        assert g_input(rgb[..., 0]).shape == (3, 32, 64)   # a gray array, converted to the input's channels
        for bad, msg in ((3, 'int'), (None, 'NoneType'), ({'a': 1}, 'dict'), (chw.float() * 2 - 1, r'\[0, 1\]'),
                         (rgb.astype(np.int32), 'int32'), (np.zeros((2, 3, 4, 5), np.uint8), r'\(2, 3, 4, 5\)')):
            with pytest.raises((TypeError, ValueError), match=msg) as e: learn.predict(bad)
            assert '\n' not in str(e.value) and len(str(e.value)) < 250

def test_imageblock_targets_are_caught_at_the_first_batch(pairs):
    def dls(batch_tfms):
        blk = DataBlock(blocks=(ImageBlock, ImageBlock), get_items=get_image_files, get_y=lambda f: f,
                        splitter=RandomSplitter(0.25, seed=0), batch_tfms=batch_tfms)
        return blk.dataloaders(pairs/'train', bs=2, device='cpu')
    mk = lambda d: pix2pix_learner(d, UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2))
    with pytest.warns(UserWarning, match=r'Normalize\.from_stats\(0\.5, 0\.5\)'), contextlib.redirect_stdout(io.StringIO()):
        mk(dls(None)).fit(1, 1e-3)                                # fastai's ImageBlock: [0, 1]
    with pytest.raises(ValueError, match=r'outside the generator.*Normalize\.from_stats\(0\.5, 0\.5\)'), contextlib.redirect_stdout(io.StringIO()):
        mk(dls(Normalize.from_stats([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))).fit(1, 1e-3)   # ImageNet statistics
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        with contextlib.redirect_stdout(io.StringIO()): mk(dls(Normalize.from_stats(0.5, 0.5))).fit(1, 1e-3)   # [-1, 1]: no word

def test_cyclegan_get_preds_and_show_results(unpaired):
    learn = tiny_cyclegan(unpaired)
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
    m, (a, b) = learn.model, learn.dls.valid.new(shuffle=False, bs=2).one_batch()
    preds, targs = learn.get_preds()
    assert targs is None and preds.shape == (2, 3, 32, 32)
    with torch.no_grad(): torch.testing.assert_close(preds, m.eval().g_a(a).as_subclass(torch.Tensor), atol=1e-6, rtol=0)
    m.direction = 'BtoA'
    with torch.no_grad(): torch.testing.assert_close(learn.get_preds()[0], m.eval().g_b(b).as_subclass(torch.Tensor), atol=1e-6, rtol=0)
    m.direction = 'AtoB'
    learn.cycle_gan_trainer.raw_preds = True
    raw = learn.get_preds()[0]
    learn.cycle_gan_trainer.raw_preds = False
    assert len(raw) == 6 and raw[0].shape == (2, 3, 32, 32)
    for out in (preds, raw):
        x, y, its, outs = learn.dls.valid.show_results((a, b), out, show=False)
        assert len(its) == len(outs) == 2 and outs[0][0].shape == (3, 32, 32)
    import matplotlib; matplotlib.use('Agg')
    ctxs = learn.dls.valid.show_results((a, b), preds, max_n=2)
    assert [c.get_title() for c in ctxs[:3]] == ['A', 'G_A(A)', 'B (unpaired)']
    ctxs = learn.dls.valid.show_results((a, b), preds, max_n=2, direction='BtoA')
    assert [c.get_title() for c in ctxs[:3]] == ['B', 'G_B(B)', 'A (unpaired)']

def test_cyclegan_test_dl_of_files_strings_and_images(unpaired, tmp_path):
    learn, fn = tiny_cyclegan(unpaired), red_blue(tmp_path/'rb.png', w=36, h=28)
    seen = seen_by(learn.model)
    preds = learn.get_preds(dl=learn.dls.test_dl([fn, str(fn), PILImage.create(fn)], bs=1))[0]
    assert preds.shape == (3, 3, 28, 36) and all(s.shape == (1, 3, 28, 36) for s in seen)   # a multiple of 4: as it is
    torch.testing.assert_close(preds[0], preds[2]); torch.testing.assert_close(preds[0], preds[1])


# --- fastai's TensorBoardCallback beside the trainers

def test_fastais_tensorboard_callback_runs_beside_the_trainers(pairs, unpaired, tmp_path):
    from fastai.callback.tensorboard import TensorBoardCallback
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from gan_callbacks.trainer.optim import pix2pix_adam
    def tags(d):
        ea = EventAccumulator(str(d)); ea.Reload()
        return ea.Tags()
    quiet = lambda: contextlib.redirect_stdout(io.StringIO())
    learn = pix2pix_on(pairs)
    with quiet(): learn.fit(1, 1e-3, cbs=TensorBoardCallback(tmp_path/'p'))
    assert {'train_loss', 'lr_0', 'g_l1', 'valid_loss'} <= set(tags(tmp_path/'p')['scalars'])
    plain = Learner(learn.dls, UnetGenerator(3, 3, num_downs=5, ngf=4), loss_func=L1LossFlat(), opt_func=pix2pix_adam)
    with quiet(): plain.fit(1, 1e-3, cbs=TensorBoardCallback(tmp_path/'plain'))
    assert 'lr_0' in tags(tmp_path/'plain')['scalars']
    learn = tiny_cyclegan(unpaired)
    with quiet(), pytest.warns(UserWarning, match='trace_model switched off'): learn.fit(1, 1e-3, cbs=TensorBoardCallback(tmp_path/'c'))
    assert {'train_loss', 'lr_0', 'cycle_a', 'd_b'} <= set(tags(tmp_path/'c')['scalars'])
    from gan_callbacks.data.label_maps import LabelDataLoaders, sample_labels
    from gan_callbacks.gans.pix2pixhd import pix2pixhd_learner
    from gan_callbacks.nets.hd_networks import GlobalGenerator
    dls = LabelDataLoaders.from_folder(sample_labels(tmp_path/'l', n_train=4, n_valid=2, size=32), label_nc=8, load_size=32, bs=2, device='cpu')
    learn = pix2pixhd_learner(dls, GlobalGenerator(dls.in_ch, 3, ngf=4, n_downsampling=2, n_blocks=1), trainer_kwargs=dict(ndf=4, vgg=None))
    with quiet(): learn.fit(1, 1e-3, cbs=TensorBoardCallback(tmp_path/'hd'))   # label maps: their own figure
    assert {'train_loss', 'g_gan', 'valid_loss'} <= set(tags(tmp_path/'hd')['scalars']) and 'Sample results' in tags(tmp_path/'hd')['images']


# --- save/load with the discriminators

def _same(a, b):
    "Two state dicts (or optimizer states) equal bitwise"
    if isinstance(a, dict): return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if torch.is_tensor(a): return torch.equal(a, b)
    return a == b

def _continue(learn):
    "One more epoch from fixed random states"
    from fastai.torch_core import set_seed
    set_seed(7); learn.dls.train.rng.seed(7)
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)

def test_save_load_keep_the_discriminators_and_their_optimizer(pairs, tmp_path):
    learn = pix2pix_on(pairs); learn.path = tmp_path
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
    learn.save('m')
    t = learn.pix2pix_trainer
    torch.manual_seed(5)
    learn2 = pix2pix_on(pairs); learn2.path = tmp_path   # a new learner, its networks freshly initialised
    learn2.load('m')
    t2 = learn2.pix2pix_trainer
    assert _same(t2.discriminator.state_dict(), t.discriminator.state_dict())
    assert _same(t2.d_opt.state_dict(), t.d_opt.state_dict()) and _same(learn2.opt.state_dict(), learn.opt.state_dict())
    assert len(t2.hist) == len(t.hist) and all(torch.equal(a, b) for a, b in zip(t2.hist, t.hist))
    _continue(learn); _continue(learn2)   # the same training afterwards, bitwise
    assert _same(learn2.model.state_dict(), learn.model.state_dict())
    assert _same(t2.discriminator.state_dict(), t.discriminator.state_dict())
    # without the optimizers: the weights of G and D
    learn.save('w', with_opt=False)
    torch.manual_seed(6)
    learn3 = pix2pix_on(pairs); learn3.path = tmp_path
    learn3.load('w', with_opt=False)
    assert _same(learn3.pix2pix_trainer.discriminator.state_dict(), t.discriminator.state_dict())
    assert _same(learn3.model.state_dict(), learn.model.state_dict())
    # a file of fastai's own format (G only) still loads, with a word
    torch.save(learn.model.state_dict(), tmp_path/'models'/'old.pth')
    learn4 = pix2pix_on(pairs); learn4.path = tmp_path
    with pytest.warns(UserWarning, match='generator only'): learn4.load('old', with_opt=False)
    assert _same(learn4.model.state_dict(), learn.model.state_dict())

def test_save_model_callback_keeps_the_cyclegan_discriminators(unpaired, tmp_path):
    from fastai.callback.tracker import SaveModelCallback
    learn = tiny_cyclegan(unpaired); learn.path = tmp_path
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3, cbs=SaveModelCallback(monitor='cycle_a', with_opt=True, fname='best'))
    t = learn.cycle_gan_trainer
    learn2 = tiny_cyclegan(unpaired); learn2.path = tmp_path
    t2 = learn2.cycle_gan_trainer
    learn2.load('best')
    for k in ('d_a', 'd_b'): assert _same(getattr(t2, k).state_dict(), getattr(t, k).state_dict())
    assert _same(t2.d_opt.state_dict(), t.d_opt.state_dict()) and len(t2.pool_a) == len(t.pool_a) > 0


# --- trackers read the GAN columns the right way round

def test_trackers_know_the_direction_of_every_column(pairs, tmp_path):
    import numpy as np
    from fastai.callback.tracker import SaveModelCallback, EarlyStoppingCallback
    from gan_callbacks.metrics.scores import PSNR
    learn = pix2pix_on(pairs, metrics=[PSNR()]); learn.path = tmp_path
    cbs = [SaveModelCallback(monitor=m, fname=m) for m in ('g_l1', 'd_fake', 'psnr')] + [EarlyStoppingCallback(monitor='g_l1', patience=5)]
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(3, 1e-3, cbs=cbs)
    assert [cb.comp for cb in cbs] == [np.less, np.less, np.greater, np.less]
    names = list(learn.recorder.metric_names[1:])
    col = lambda n: [v[names.index(n)] for v in learn.recorder.values]
    assert cbs[0].best == min(col('g_l1')) and cbs[1].best == min(col('d_fake')) and cbs[2].best == max(col('psnr'))


# --- summary and lr_find

def test_summary_shows_both_players_and_lr_find_prints_no_table(pairs):
    import fastai.callback.hook   # Learner.summary
    learn = pix2pix_on(pairs)
    out = io.StringIO()
    with contextlib.redirect_stdout(out): s = learn.summary()
    assert 'None' not in out.getvalue() + s and 'UnetGenerator' in s and 'PatchDiscriminator' in s
    out = io.StringIO()
    with contextlib.redirect_stdout(out): learn.lr_find(num_it=12, show_plot=False)
    assert 'epoch' not in out.getvalue() and 'train_loss' not in out.getvalue()

def test_cut_predict_get_preds_and_show_results(unpaired):
    "CUT's G translates A: `get_preds` gives G(A) in eval mode, `predict` a file, `show_results` its rows"
    from gan_callbacks.gans.cut import cut_learner
    dls = UnpairedDataLoaders.from_folder(unpaired, load_size=32, crop_size=32, bs=2, valid='test', device='cpu')
    torch.manual_seed(0)
    G = ResnetGenerator(3, 3, ngf=4, n_blocks=1, antialias=True, antialias_up=True)
    learn = cut_learner(dls, G, PatchDiscriminator(3, ndf=4, n_layers=1, norm='instance', antialias=True),
                        trainer_kwargs=dict(nce_layers=(0, 4, 8, 12), num_patches=16))
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
    a, _ = learn.dls.valid.new(shuffle=False, bs=2).one_batch()
    preds = learn.get_preds()[0]
    assert preds.shape == (2, 3, 32, 32)
    with torch.no_grad(): torch.testing.assert_close(preds, learn.model.eval()(a).as_subclass(torch.Tensor), atol=1e-6, rtol=0)
    f = sorted((unpaired/'testA').iterdir())[0]
    dec, pred, _ = learn.predict(f)
    assert pred.shape == (3, 32, 32) and -1 <= pred.min() and pred.max() <= 1
    import matplotlib; matplotlib.use('Agg')
    with contextlib.redirect_stdout(io.StringIO()): learn.show_results(max_n=2)


# --- CUT: predict at any size, TensorBoard's graph tracing

def tiny_cut(path, mode='cut', **kw):
    from gan_callbacks.gans.cut import cut_learner
    dls = UnpairedDataLoaders.from_folder(path, load_size=32, crop_size=32, bs=2, valid='test', device='cpu')
    torch.manual_seed(0)
    G = ResnetGenerator(3, 3, ngf=4, n_blocks=1, antialias=True, antialias_up=True)
    return cut_learner(dls, G, PatchDiscriminator(3, ndf=4, n_layers=1, norm='instance', antialias=True), mode=mode,
                       trainer_kwargs=dict(nce_layers=(0, 4, 8, 12), num_patches=16), **kw)

@pytest.mark.parametrize('mode', ['cut', 'fastcut'])
def test_cut_predict_takes_any_size(unpaired, tmp_path, mode):
    learn = tiny_cut(unpaired, mode)
    seen = seen_by(learn.model)
    dec, pred, raw = learn.predict(red_blue(tmp_path/'odd.png', w=53, h=37))
    assert seen[-1].shape[-2:] == (36, 52) and dec.shape == pred.shape == (3, 37, 53)   # resized for G, and back
    assert pred[0, :, :20].mean() != pred[0, :, -20:].mean()
    dec, pred, _ = learn.predict(red_blue(tmp_path/'even.png', w=36, h=28))
    assert seen[-1].shape[-2:] == (28, 36) and pred.shape == (3, 28, 36)   # a multiple of 4: as it is

def test_cut_beside_fastais_tensorboard_callback(unpaired, tmp_path):
    from fastai.callback.tensorboard import TensorBoardCallback
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    learn = tiny_cut(unpaired)
    with contextlib.redirect_stdout(io.StringIO()), pytest.warns(UserWarning, match='trace_model switched off'):
        learn.fit(1, 1e-3, cbs=TensorBoardCallback(tmp_path/'cut'))
    ea = EventAccumulator(str(tmp_path/'cut')); ea.Reload()
    assert {'train_loss', 'lr_0', 'nce', 'd_real'} <= set(ea.Tags()['scalars'])


# --- pix2pix_learner sizes G and D from the data's channels

def test_pix2pix_learner_on_grayscale_datablock(pairs):
    from fastai.vision.all import PILImageBW, Resize
    blk = DataBlock(blocks=(ImageBlock(PILImageBW), ImageBlock(PILImageBW)), get_items=get_image_files, get_y=lambda f: f,
                    splitter=RandomSplitter(0.25, seed=0), item_tfms=Resize(32), batch_tfms=Normalize.from_stats(0.5, 0.5))
    dls = blk.dataloaders(pairs/'train', bs=2, device='cpu')
    learn = pix2pix_learner(dls)
    assert (learn.model.in_ch, learn.model.out_ch) == (1, 1)
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
    assert learn.pix2pix_trainer.discriminator.in_ch == 2
    dec, pred, _ = learn.predict(pairs/'val'/'0000.png')
    assert pred.shape == (1, 32, 32)


# --- a plain Learner with a trainer saves and loads the discriminators

def test_plain_learner_with_a_trainer_keeps_the_discriminator(pairs, tmp_path):
    from gan_callbacks.gans.pix2pix import Pix2pixTrainer
    from gan_callbacks.trainer.optim import pix2pix_adam
    dls = Pix2pixDataLoaders.from_folder(pairs, load_size=32, crop_size=32, bs=2, device='cpu')
    def plain(seed):
        torch.manual_seed(seed)
        G, D = UnetGenerator(3, 3, num_downs=5, ngf=4), PatchDiscriminator(6, ndf=4, n_layers=2)
        return Learner(dls, G, loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=[Pix2pixTrainer(D)], path=tmp_path)
    learn = plain(0)
    with contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-3)
    learn.save('m')
    learn2 = plain(1)
    D, D2 = learn.pix2pix_trainer.discriminator, learn2.pix2pix_trainer.discriminator
    assert not _same(D2.state_dict(), D.state_dict())
    learn2.load('m')
    assert _same(D2.state_dict(), D.state_dict()) and _same(learn2.model.state_dict(), learn.model.state_dict())
    assert _same(learn2.pix2pix_trainer.d_opt.state_dict(), learn.pix2pix_trainer.d_opt.state_dict())
    # a trainer added to a Learner after it was made: from its next fit on
    learn3 = Learner(dls, UnetGenerator(3, 3, num_downs=5, ngf=4), loss_func=L1LossFlat(), opt_func=pix2pix_adam, path=tmp_path)
    learn3.add_cb(Pix2pixTrainer(PatchDiscriminator(6, ndf=4, n_layers=2)))
    with contextlib.redirect_stdout(io.StringIO()): learn3.fit(1, 1e-3)
    learn3.load('m')
    assert _same(learn3.pix2pix_trainer.discriminator.state_dict(), D.state_dict())
    # a trainer without D builds one for the data: a saved D of another architecture is a clear error
    learn5 = Learner(dls, UnetGenerator(3, 3, num_downs=5, ngf=4), loss_func=L1LossFlat(), opt_func=pix2pix_adam, cbs=[Pix2pixTrainer()], path=tmp_path)
    with pytest.raises(ValueError, match=r"m\.pth: its discriminators do not fit those of Pix2pixTrainer \(discriminator"): learn5.load('m')
    # a Learner of another class: a word, not a silent loss
    class MyLearner(Learner): pass
    with pytest.warns(UserWarning, match='keep the generator only'):
        MyLearner(dls, UnetGenerator(3, 3, num_downs=5, ngf=4), loss_func=L1LossFlat(), cbs=[Pix2pixTrainer()])


# --- fastai's GradientAccumulation and GradientClip act on the trainers' own updates

from fastai.basics import DataLoaders
from fastai.callback.training import GradientAccumulation, GradientClip
from gan_callbacks.gans.cut import cut_learner
from gan_callbacks.nets.networks import PatchSampleF
from fastai.optimizer import SGD
from helpers import Unpaired

KINDS = ['pix2pix', 'cyclegan', 'cut']

def tiny(kind, bs=2, d_lr_mult=1., seed=1, **kw):
    "A tiny learner of `kind` on 4 items, without batch statistics (instance norm or none), dropout, pools or random patches"
    g = torch.Generator().manual_seed(0)
    size = 32 if kind == 'pix2pix' else 16
    items = [(torch.rand(3, size, size, generator=g)*2-1, torch.rand(3, size, size, generator=g)*2-1) for _ in range(4)]
    if kind != 'pix2pix': items = Unpaired(items)
    dls = DataLoaders.from_dsets(items, items[:2] if kind == 'pix2pix' else Unpaired(items[:2]), bs=bs, shuffle=False, device='cpu')
    tk = dict(d_lr_mult=d_lr_mult, **kw.pop('trainer_kwargs', {}))
    torch.manual_seed(seed)
    if kind == 'pix2pix':
        return pix2pix_learner(dls, UnetGenerator(3, 3, num_downs=5, ngf=4, norm='none', use_dropout=False),
                               PatchDiscriminator(6, ndf=4, n_layers=2, norm='instance'), trainer_kwargs=tk, **kw)
    if kind == 'cyclegan':
        G, D = lambda: ResnetGenerator(3, 3, ngf=4, n_blocks=1), lambda: PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance')
        return cyclegan_learner(dls, G(), G(), D(), D(), pool_size=0, trainer_kwargs=tk, **kw)
    G = ResnetGenerator(ngf=4, n_blocks=1, antialias=True, antialias_up=True)
    D = PatchDiscriminator(3, ndf=4, n_layers=2, norm='instance', antialias=True)
    Fs = PatchSampleF(nc=16).create_mlp([3, 8, 16, 16])
    return cut_learner(dls, G, D, Fs, trainer_kwargs=dict(nce_layers=(0, 4, 8, 12), num_patches=512, **tk), **kw)   # every location

def quiet_fit(learn, n=1, lr=1e-3, **kw):
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore'); learn.fit(n, lr, **kw)

def trainer(learn):
    from gan_callbacks.trainer.base import find_trainer
    return find_trainer(learn)

def assert_states_close(a, b, atol=1e-4):   # float sums in another order differ by ~5e-5 relative; two SGD steps at lr 0.1 move weights by 0.3; skipping accumulation, by 1
    assert a.keys() == b.keys()
    for k in a: torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-4, msg=lambda m: f'{k}: {m}')

@pytest.mark.parametrize('kind', KINDS)
def test_gradient_accumulation_makes_the_updates_of_the_big_batch(kind):
    "n_acc=4 at bs=2 updates G and D as bs=4 does. pix2pix and CUT update D first: G's earlier batches see D before its update, so G is compared with D held still, D after one update"
    for d_lr_mult in ((1.,) if kind == 'cyclegan' else (1., 0.)):
        # SGD: Adam would blow up the float noise of gradients that are zero in theory (a bias before an instance norm)
        big, acc = (tiny(kind, bs=bs, d_lr_mult=d_lr_mult, opt_func=SGD) for bs in (4, 2))
        g0 = {k: v.clone() for k, v in big.model.state_dict().items()}
        n = 2 if kind == 'cyclegan' or d_lr_mult == 0 else 1   # epochs, one update each
        quiet_fit(big, n, 0.1); quiet_fit(acc, n, 0.1, cbs=GradientAccumulation(4))
        tb, ta = trainer(big), trainer(acc)
        assert len(ta.hist) == 2 * len(tb.hist) == 2 * n   # a row per batch
        for k in tb.d_names: assert_states_close(getattr(ta, k).state_dict(), getattr(tb, k).state_dict())
        if kind == 'cyclegan' or d_lr_mult == 0:
            assert not torch.allclose(big.model.state_dict()[next(iter(g0))], g0[next(iter(g0))])   # G did move
            assert_states_close(acc.model.state_dict(), big.model.state_dict())
            if kind == 'cut': assert_states_close(ta.sampler.state_dict(), tb.sampler.state_dict())
    # the columns show each batch's losses, not the scaled ones: the mean of two halves is the whole
    i = list(tb.cols).index('g_l1' if kind == 'pix2pix' else 'cycle_a' if kind == 'cyclegan' else 'nce')
    big, acc = tiny(kind, bs=4), tiny(kind, bs=2)
    quiet_fit(big); quiet_fit(acc, cbs=GradientAccumulation(4))
    torch.testing.assert_close(trainer(acc).hist[1][i], trainer(big).hist[0][i], rtol=0.02, atol=0)

def test_gradient_accumulation_with_several_critic_updates_is_refused():
    learn = tiny('pix2pix', trainer_kwargs=dict(n_critic=2))
    with pytest.raises(ValueError, match='n_critic=2'): quiet_fit(learn, cbs=GradientAccumulation(4))

@pytest.mark.parametrize('kind', KINDS)
def test_gradient_accumulation_with_lazy_r1_is_refused(kind):
    "R1/R2 steps of their own would land in the middle of an accumulated sum: the fit refuses at its start"
    learn = tiny(kind, trainer_kwargs=dict(r1_gamma=1.))
    with pytest.raises(ValueError, match='R1/R2'): quiet_fit(learn, cbs=GradientAccumulation(4))

@pytest.mark.parametrize('kind', KINDS)
def test_gradient_clip_holds_the_generator(kind):
    "fastai's `GradientClip(1e-12)` keeps G (the Learner's model) where it was, as for any Learner; D is clipped by `clip_d` only"
    learn = tiny(kind)
    g0 = {k: v.clone() for k, v in learn.model.state_dict().items()}
    quiet_fit(learn, cbs=GradientClip(1e-12))
    free = tiny(kind); quiet_fit(free)
    moved = lambda m: max((m.state_dict()[k] - g0[k]).abs().max().item() for k in g0)
    assert moved(learn.model) < 1e-3 * moved(free.model)


# --- fastai's own training callbacks beside each trainer, and their effect
# (GradientAccumulation and GradientClip: the tests above)

def g_col(kind): return {'pix2pix': 'g_l1', 'cyclegan': 'cycle_a', 'cut': 'nce'}[kind]

def col(learn, name):
    "The values of column `name` in the Recorder, one per epoch"
    names = list(learn.recorder.metric_names[1:-1])
    return [v[names.index(name)] for v in learn.recorder.values]

@pytest.mark.parametrize('kind', KINDS)
def test_mixed_precision_beside_the_trainers(kind):
    "`to_bf16`: G and D run in bfloat16, and train; `to_fp16` on the CPU: a clear refusal (fp16 needs CUDA here)"
    learn = tiny(kind).to_bf16()
    t, seen = trainer(learn), []
    G, D = learn.model.g_a if kind == 'cyclegan' else learn.model, getattr(t, t.d_names[0])
    for m in (G, D): m.register_forward_hook(lambda m, i, o: seen.append((m, o.dtype)) if torch.is_tensor(o) and m.training else None)
    g0 = {k: v.clone() for k, v in learn.model.state_dict().items()}
    quiet_fit(learn)
    assert {m for m, _ in seen} == {G, D} and all(d == torch.bfloat16 for _, d in seen)
    assert t.precision.dtype == torch.bfloat16 and not t.precision.scalers
    assert any(not torch.equal(v, g0[k]) for k, v in learn.model.state_dict().items())
    assert all(v.isfinite().all() for v in learn.model.state_dict().values())
    with pytest.raises(ValueError, match=r'fp16 mixed precision needs a CUDA device.*to_bf16'): quiet_fit(tiny(kind).to_fp16())

@pytest.mark.parametrize('kind', KINDS)
def test_show_graph_callback_beside_the_trainers(kind):
    from fastai.callback.progress import ShowGraphCallback
    graphs = []
    class Graphs(Callback):
        "Keeps what is drawn: outside a notebook, the bar's `update_graph` draws nothing"
        order = 61   # after the bar made its `mbar`
        def before_fit(self): self.learn.progress.mbar.update_graph = lambda g, *a, **k: graphs.append(g)
    learn = tiny(kind)
    quiet_fit(learn, 2, cbs=[ShowGraphCallback(), Graphs()])
    assert len(graphs) == 2   # once per epoch
    (iters, losses), (ends, val_losses) = graphs[-1]
    assert len(losses) == 2 * len(learn.dls.train) and ends == [2, 4] and len(val_losses) == 2

@pytest.mark.parametrize('kind', KINDS)
def test_save_model_callback_keeps_the_discriminators(kind, tmp_path):
    from fastai.callback.tracker import SaveModelCallback
    learn = tiny(kind, path=tmp_path)
    quiet_fit(learn, 2, cbs=SaveModelCallback(monitor=g_col(kind), fname='best', with_opt=True))
    assert (tmp_path/'models'/'best.pth').exists()
    t, learn2 = trainer(learn), tiny(kind, path=tmp_path, seed=5)
    t2 = trainer(learn2)
    learn2.load('best')
    for k in t.d_names: assert _same(getattr(t2, k).state_dict(), getattr(t, k).state_dict())
    assert _same(learn2.model.state_dict(), learn.model.state_dict()) and _same(t2.d_opt.state_dict(), t.d_opt.state_dict())

@pytest.mark.parametrize('kind', KINDS)
def test_early_stopping_callback_beside_the_trainers(kind):
    from fastai.callback.tracker import EarlyStoppingCallback
    learn = tiny(kind)
    quiet_fit(learn, 5, cbs=EarlyStoppingCallback(monitor=g_col(kind), min_delta=1e9, patience=0))   # nothing is enough of a gain
    assert len(learn.recorder.values) == 2 and len(trainer(learn).hist) == 2 * len(learn.dls.train)

@pytest.mark.parametrize('kind', KINDS)
def test_reduce_lr_on_plateau_lowers_g_and_d_rates(kind):
    from fastai.callback.tracker import ReduceLROnPlateau
    learn = tiny(kind)
    quiet_fit(learn, 3, 1e-3, cbs=ReduceLROnPlateau(monitor=g_col(kind), min_delta=1e9, patience=0, factor=10))
    assert learn.opt.hypers[-1]['lr'] == pytest.approx(1e-5)   # lowered after epochs 1 and 2
    assert trainer(learn).d_opt.hypers[0]['lr'] == pytest.approx(1e-4)   # D followed in epoch 2

@pytest.mark.parametrize('kind', KINDS)
def test_csv_logger_writes_the_trainers_columns(kind, tmp_path):
    import csv
    learn = tiny(kind, path=tmp_path)
    quiet_fit(learn, 2, cbs=CSVLogger())
    rows = list(csv.DictReader(open(tmp_path/'history.csv')))
    assert len(rows) == 2 and set(trainer(learn).cols) <= set(rows[0])
    assert [float(r[g_col(kind)]) for r in rows] == pytest.approx(col(learn, g_col(kind)), rel=1e-5)

@pytest.mark.parametrize('kind', KINDS)
def test_tensorboard_callback_writes_the_trainers_columns(kind, tmp_path):
    from fastai.callback.tensorboard import TensorBoardCallback
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    learn = tiny(kind)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); learn.fit(2, 1e-3, cbs=TensorBoardCallback(tmp_path/'tb', log_preds=False))   # tensors, no images to show
    ea = EventAccumulator(str(tmp_path/'tb')); ea.Reload()
    assert {'train_loss', 'valid_loss', 'lr_0', *trainer(learn).cols} <= set(ea.Tags()['scalars'])
    assert [e.value for e in ea.Scalars(g_col(kind))] == pytest.approx(col(learn, g_col(kind)), rel=1e-5)
    traced = kind == 'pix2pix'   # one model input: fastai traces the graph; two: the trainer switches tracing off, with a word
    assert ea.Tags()['graph'] == traced and any('trace_model switched off' in str(x.message) for x in w) != traced

@pytest.mark.parametrize('kind', KINDS)
def test_wandb_callback_logs_the_trainers_columns(kind, tmp_path, monkeypatch):
    import wandb
    from fastai.callback.wandb import WandbCallback
    from helpers import wandb_rows
    monkeypatch.setenv('WANDB_MODE', 'offline'); monkeypatch.setenv('WANDB_SILENT', 'true')
    learn = tiny(kind)
    run = wandb.init(project='gan_callbacks_test', dir=str(tmp_path))
    try: quiet_fit(learn, 2, cbs=WandbCallback(log_preds=False))
    finally: wandb.finish()
    rows = wandb_rows(run.dir.rsplit('/files', 1)[0] if run.dir.endswith('files') else run.dir)
    logged = [r[g_col(kind)] for r in rows if g_col(kind) in r]
    assert logged == pytest.approx(col(learn, g_col(kind)), rel=1e-5)   # once per epoch, the Recorder's values
    assert any('raw_loss' in r for r in rows)   # and fastai's per-batch losses

@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('schedule', ['fit_one_cycle', 'fit_flat_cos'])
def test_save_and_load_after_fastais_schedules(kind, schedule, tmp_path):
    "A scheduled fit leaves numpy floats in the optimizer's hyper-parameters: `save`/`load` (weights only) still round-trip everything"
    learn = tiny(kind, path=tmp_path)
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        getattr(learn, schedule)(1, 1e-3)
    learn.save('x')
    learn2 = tiny(kind, path=tmp_path, seed=5)
    learn2.load('x')
    t, t2 = trainer(learn), trainer(learn2)
    assert _same(learn2.model.state_dict(), learn.model.state_dict()) and _same(t2.d_opt.state_dict(), t.d_opt.state_dict())
    assert learn2.opt.hypers[0]['lr'] == pytest.approx(float(learn.opt.hypers[0]['lr']))

@pytest.mark.parametrize('kind', KINDS)
def test_save_model_callback_with_opt_after_one_cycle(kind, tmp_path):
    "SaveModelCallback's `after_fit` loads what its `save` wrote after a one-cycle fit"
    from fastai.callback.tracker import SaveModelCallback
    learn = tiny(kind, path=tmp_path)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        learn.fit_one_cycle(2, 1e-3, cbs=SaveModelCallback(monitor=g_col(kind), fname='best', with_opt=True))
    assert (tmp_path/'models'/'best.pth').exists()

@pytest.mark.parametrize('kind', KINDS)
def test_a_refused_predict_does_not_hang_the_next(kind):
    "fp16 on the CPU is refused at the start of `get_preds`; after `to_fp32()`, `validate` and `get_preds` run (fastai alone keeps its lock held)"
    import threading
    learn = tiny(kind)
    learn.to_fp16()
    with pytest.raises(ValueError, match='fp16 mixed precision needs a CUDA device'): learn.get_preds(dl=learn.dls.valid)
    learn.to_fp32()
    done = []
    t = threading.Thread(target=lambda: done.append((learn.validate(), learn.get_preds(dl=learn.dls.valid))), daemon=True)
    t.start(); t.join(300)   # a generous bound: a held lock never returns
    assert done and not learn.lock.locked(), 'validate after a refused get_preds waits for the lock forever'

@pytest.mark.parametrize('with_opt', [False, True])
def test_save_and_load_before_any_fit(tmp_path, with_opt):
    "A learner saved before its discriminator exists loads (G's weights) and builds D at its first batch, as a new one does"
    learn = tiny_pix2pix(path=tmp_path)
    trainer(learn).discriminator = None   # built for the data at the first batch
    learn.save('x', with_opt=with_opt)
    learn2 = tiny_pix2pix(path=tmp_path)
    trainer(learn2).discriminator = None
    learn2.load('x', with_opt=with_opt)
    assert _same(learn2.model.state_dict(), learn.model.state_dict())
    quiet_fit(learn2)
    assert trainer(learn2).discriminator is not None
