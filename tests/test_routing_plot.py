"""
Tests of the routing picture: `python sample.py --show_routing=True` writes out_dir/routing.png, and the depth it
draws is the model's own causal routing of the drawn tokens, checked against an independent forward (the naive
impl, which selects with boolean masks instead of the fast path's attention mask). A tiny untrained model in a
checkpoint made here, no training, no data folder.
"""
import os
from dataclasses import asdict

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import run_folder
import sample
from conftest import assert_bad_input
from data.tokenizers import from_meta, meta_for
from tools import routing_plot
from xmod import GPT, GPTConfig

# these tests route causally on models no training step calibrated, on purpose (routing's mechanics, not its
# thresholds): xmod.py's one warning about it is expected here, and test_xmod.py checks that it is given
pytestmark = pytest.mark.filterwarnings('ignore:causal routing with thresholds that were never calibrated')

TEXT = 'to be or not to be, that is the question:\nwhether tis nobler in the mind to suffer\n'
SEP = '\n---------------\n'


def save_run(out_dir, model_name):
    """A checkpoint the way train.py writes one (the keys sample.py reads), of a tiny model whose causal thresholds
    were calibrated by a few top-k forwards, so that a routed layer takes some tokens and not others."""
    meta = meta_for('char', TEXT)
    encode, _ = from_meta(meta)
    torch.manual_seed(0)
    cfg = GPTConfig(model=model_name, n_layer=5, n_embd=32, n_head=2, block_size=32, vocab_size=meta['vocab_size'],
                    capacity=0.25)
    model = GPT(cfg)
    data = torch.tensor(encode(TEXT * 4))
    with torch.no_grad():
        for s in range(0, 96, 32):
            model(data[s:s + 32][None], data[s + 1:s + 33][None])      # training mode: updates the thresholds
    os.makedirs(out_dir, exist_ok=True)
    run_folder.save_checkpoint({'model': model.state_dict(), 'optimizer': {}, 'config': {}, 'model_args': asdict(cfg),
                             'step': 0, 'rng': [], 'meta': meta}, os.path.join(out_dir, 'ckpt.pt'))
    return cfg, model.state_dict(), encode


def test_routing_png_draws_the_causal_depth(tmp_path, capsys, monkeypatch):
    out = str(tmp_path / 'run')
    cfg, state, encode = save_run(out, 'xmod')
    drawn = []

    def spy(path, selection, pieces, title, **kw):
        drawn.append(dict(selection=selection, pieces=pieces, title=title))
        return draw(path, selection, pieces, title, **kw)
    draw = routing_plot.draw_routing
    monkeypatch.setattr(routing_plot, 'draw_routing', spy)
    rc = sample.main([f'--out_dir={out}', '--start=to be', '--num_samples=1', '--max_new_tokens=40',
                      '--show_routing=True', '--device=cpu'])
    stdout = capsys.readouterr().out
    assert rc == 0
    path = os.path.join(out, 'routing.png')
    with open(path, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    assert f"wrote {path}" in stdout

    # the text drawn: the printed sample's first block_size = 32 of its 45 tokens, each token's own character
    text = stdout.split(SEP)[0]
    assert len(text) == len('to be') + 40
    ids = encode(text)[:32]
    (got,) = drawn
    assert got['selection']['ids'] == ids and got['pieces'] == list(text[:32])
    assert 'first 32 of 45 tokens' in got['title']
    assert 'routed depth over the first 32 of 45 tokens (3 routed layers)' in stdout    # what is drawn, said twice

    # an independent forward: the naive impl, the same weights, causal routing
    naive = GPT(GPTConfig(**{**asdict(cfg), 'impl': 'naive'}))
    naive.load_state_dict(state)
    naive.eval()
    with torch.no_grad():
        _, _, aux = naive(torch.tensor([ids]), routing='causal', return_aux=True)
    masks = [a.mask[0].numpy() for a in aux['layers'] if a is not None]            # each (T,) bool
    assert got['selection']['layers'] == [1, 2, 3]                                   # DrrrD
    assert np.array_equal(got['selection']['mask'], np.stack(masks))
    depth = np.sum(masks, axis=0)
    assert np.array_equal(got['selection']['depth'], depth)
    assert 0 < depth.sum() < 3 * 32                     # some tokens taken, not all: the picture shows a choice
    assert f"mean {depth.mean():.2f}" in stdout


def test_a_given_text_is_drawn_with_max_new_tokens_0(tmp_path, capsys):
    out = str(tmp_path / 'run')
    save_run(out, 'xmod')
    rc = sample.main([f'--out_dir={out}', '--start=to be or not', '--max_new_tokens=0', '--num_samples=1',
                      '--show_routing=True', '--device=cpu'])
    stdout = capsys.readouterr().out
    assert rc == 0 and stdout.startswith('to be or not' + SEP)
    assert 'routed depth over 12 tokens (3 routed layers)' in stdout


def test_the_grid_holds_each_tokens_character_and_few_position_labels(tmp_path, monkeypatch):
    """The layers x positions grid: every cell carries its token's character (white where the layer took it), so a
    row reads as the text; under it a position number every 8 (T <= 64) instead of one label per token."""
    import matplotlib.figure
    figures = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', lambda fig, *a, **kw: (figures.append(fig),
                                                                                   save(fig, *a, **kw)))
    pieces = list('to be or not\nto be')                                  # 18 tokens, a newline among them
    mask = np.zeros((2, 18), bool)
    mask[0, [0, 3, 12]] = mask[1, [5, 17]] = True
    selection = dict(ids=list(range(18)), layers=[1, 3], mask=mask, depth=mask.sum(0))
    routing_plot.draw_routing(str(tmp_path / 'r.png'), selection, pieces, 'title')
    (fig,) = figures
    grid = fig.axes[2]                                                     # text, colour bar, grid
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in grid.texts}
    assert len(cells) == 2 * 18
    for j in range(2):
        assert ''.join(cells[j, t].get_text() for t in range(18)) == routing_plot.shown(''.join(pieces))
        assert [t for t in range(18) if cells[j, t].get_color() == 'white'] == list(np.flatnonzero(mask[j]))
    assert [int(x) for x in grid.get_xticks()] == [0, 8, 16]


def test_a_model_without_routed_layers_is_refused(tmp_path, capsys):
    out = str(tmp_path / 'run')
    save_run(out, 'dense')
    rc = sample.main([f'--out_dir={out}', '--show_routing=True', '--device=cpu'])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and 'no routed layer' in err[0], err
    assert not os.path.exists(os.path.join(out, 'routing.png'))


@pytest.mark.parametrize('arg', ['--max_new_tokens=-5', '--num_samples=0', '--top_k=-1', '--temperature=-1'])
def test_a_bad_sampling_setting_is_one_line_before_the_checkpoint_is_read(arg, tmp_path, capsys):
    rc = sample.main([f'--out_dir={tmp_path / "nothing_here"}', arg])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and arg.split('=')[0] in err[0], err


def test_help_lists_show_routing(capsys):
    with pytest.raises(SystemExit) as e:
        sample.main(['--help'])
    assert e.value.code == 0 and '--show_routing=False  also write out_dir/routing.png' in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------------------
# do routed layers take the same tokens? (layer_overlap, python tools/routing_plot.py RUNS --out DIR)

def test_layer_overlap_sees_layers_that_take_the_same_tokens():
    """Routed blocks that change nothing (zero output projections) leave every routed layer the same input. Two
    routers with the same weight then take the same tokens (Jaccard 1, cosine 1); a router with the opposite weight
    takes none of them in top-k at c = 0.25 (Jaccard 0, cosine -1)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(model='xmod', n_layer=5, n_embd=32, n_head=2, block_size=32, vocab_size=48, stride=5,
                          capacity=0.25))                                  # DrrrrL: layers 1-4 routed
    with torch.no_grad():
        for l in (1, 2, 3, 4):
            block = model.transformer.h[l].block
            block.attn.c_proj.weight.zero_()
            block.mlp.c_proj.weight.zero_()
        r1, r2, r3 = (model.transformer.h[l].router for l in (1, 2, 3))
        r2.weight.copy_(r1.weight)
        r3.weight.copy_(-r1.weight)
        for r in (r1, r2, r3):
            r.thr_sum.fill_(0.0)
            r.thr_steps.fill_(1)                                            # the same causal threshold, 0
    idx = torch.randint(0, 48, (4, 32), generator=torch.Generator().manual_seed(1))
    ov = routing_plot.layer_overlap(model, idx)
    assert list(ov['layers']) == [1, 2, 3, 4] and model.training
    J, Jc, cos = ov['jaccard_topk'], ov['jaccard_causal'], ov['router_cosine']
    assert np.allclose(J, J.T) and np.allclose(np.diag(J), 1)
    assert J[0, 1] == pytest.approx(1) and Jc[0, 1] == pytest.approx(1) and cos[0, 1] == pytest.approx(1, abs=1e-6)
    assert J[0, 2] == 0 and cos[0, 2] == pytest.approx(-1, abs=1e-6)
    assert ov['rate_topk'] == pytest.approx([0.25] * 4)
    assert routing_plot.collapsed_pairs(ov, 'topk') == [(1, 2, pytest.approx(1.0))]
    assert routing_plot.independent_jaccard(0.125, 0.125) == pytest.approx(1 / 15)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """A tiny trained X-MoD run and a dense one on the same char-level text: {model: run folder}."""
    from conftest import TINY, TRAIN, run
    from data.shakespeare.prepare import prepare
    base = tmp_path_factory.mktemp('trained')
    (base / 'input.txt').write_text(TEXT * 200)
    prepare('char', input=str(base / 'input.txt'), out_dir=str(base / 'data'))
    for model in ('xmod', 'dense'):
        r = run(TRAIN, f'--data_dir={base / "data"}', f'--model={model}', f'--out_dir={base / "runs" / model}', *TINY)
        assert r.returncode == 0, r.stderr
    return {model: base / 'runs' / model for model in ('xmod', 'dense')}


def test_overlap_script_on_trained_runs(trained, tmp_path, capsys):
    """python tools/routing_plot.py RUN_DIRS --out DIR on a trained X-MoD run and a dense one (passed over): overlap.json
    with a matrix per routed run, overlap.png, and one line per run."""
    capsys.readouterr()
    assert routing_plot.main([str(trained['xmod'].parent / '*'), '--out', str(tmp_path / 'ov')]) == 0
    out = capsys.readouterr().out
    assert out.startswith('xmod: causal rates') and 'dense' not in out.split('wrote')[0]
    import json
    got = json.load(open(tmp_path / 'ov' / 'overlap.json'))
    assert list(got) == ['xmod'] and np.array(got['xmod']['jaccard_causal']).shape == (9, 9)
    assert (tmp_path / 'ov' / 'overlap.png').stat().st_size > 0
    # the --key=value forms give the same file; a glob and a folder named twice are read once
    assert routing_plot.main([f'--out={tmp_path / "ov2"}', '--above=0.5', str(trained['xmod']),
                              str(trained['xmod'].parent / '*')]) == 0
    assert json.load(open(tmp_path / 'ov2' / 'overlap.json')) == got


# ----------------------------------------------------------------------------------------------------------------------
# what the router learns to skip (skip_report, python tools/routing_plot.py --skip RUN --dense RUN --out DIR)

CODE = 'def f(x_1):\n    return [x_1 + 2] * 3  # "done"\n\tpass\n'


def hand_routed_model():
    """A byte-level X-MoD (DrrrD, routed layers 1-3 and the anchor 4 unused: stride 4, 5 layers) whose blocks change
    nothing (zero output projections), so every router sees the token's embedding. Embedding dimension 0 is +1 on
    identifier bytes (letters, digits, _) and -1 elsewhere, dimension 1 the same for whitespace; routers 1 and 2
    score dimension 0, router 3 dimension 1; the causal thresholds are 0. So an identifier has routed depth 2, a
    whitespace byte 1, anything else 0."""
    meta = meta_for('bytes', eot=True)
    _, decode = from_meta(meta)
    model = GPT(GPTConfig(model='xmod', n_layer=5, n_embd=16, n_head=2, block_size=32, vocab_size=257, stride=4,
                          capacity=0.25))
    table = routing_plot.class_table(257, decode, 'code')
    with torch.no_grad():
        for layer in model.transformer.h:
            block = getattr(layer, 'block', layer)
            block.attn.c_proj.weight.zero_()
            block.mlp.c_proj.weight.zero_()
        wte = model.transformer.wte.weight
        wte.zero_()
        wte[:, 0] = torch.tensor(np.where(table == 2, 1.0, -1.0))
        wte[:, 1] = torch.tensor(np.where(table == 0, 1.0, -1.0))
        for l, dim in ((1, 0), (2, 0), (3, 1)):
            router = model.transformer.h[l].router
            router.weight.zero_()
            router.weight[0, dim] = 1.0
            router.thr_sum.fill_(0.0)
            router.thr_steps.fill_(1)
    return model, table, meta


def test_token_classes():
    _, decode = from_meta(meta_for('bytes', eot=True))
    code = routing_plot.class_table(257, decode, 'code')
    names = routing_plot.CLASSES['code']
    assert [names[code[ord(ch)]] for ch in ' \n\t(]+:,.aZ9_#"\\'] == (
        ['whitespace'] * 3 + ['brackets and operators'] * 6 + ['identifiers'] * 4 + ['other'] * 3)
    assert names[code[256]] == 'other' and names[code[0xc3]] == 'other'          # end of document, a non-ASCII byte
    prose = [routing_plot.token_class(ch, 'prose') for ch in 'a ,\nZ3']
    assert [routing_plot.CLASSES['prose'][k] for k in prose] == ['letters', 'spaces and punctuation',
                                                                 'spaces and punctuation', 'spaces and punctuation',
                                                                 'letters', 'spaces and punctuation']


def test_skip_report_on_a_model_built_to_take_one_class():
    """The hand-built model above on windows of CODE: the depth it routes is the one it was built for; each class's
    share is known (identifiers 2 of 3 routed layers, whitespace 1 of 3, the rest none); a loss that is high where
    the routers take identifiers correlates positively with depth, its negation negatively, both with intervals
    that exclude 0."""
    model, table, meta = hand_routed_model()
    encode, _ = from_meta(meta)
    text = np.array(encode(CODE * 30))
    starts = np.random.default_rng(0).integers(0, len(text) - 33, 24)
    x = torch.tensor(np.stack([text[s:s + 32] for s in starts]))                   # (24, 32)
    y = torch.tensor(np.stack([text[s + 1:s + 33] for s in starts]))
    out = routing_plot.routed_pass(model, x, y)
    assert out['layers'] == [1, 2, 3] and out['mask'].shape == (3, 24, 32) and out['loss'].shape == (24, 32)
    depth, classes = out['mask'].sum(0), table[x.numpy()]
    assert np.array_equal(depth, np.select([classes == 2, classes == 0], [2, 1], 0))
    hard = np.where(classes == 2, 3.0, 1.0) + np.random.default_rng(1).normal(0, 0.3, depth.shape)
    names = routing_plot.CLASSES['code']
    report = routing_plot.skip_report(depth, classes, names, 3, {'dense': hard, 'easy': -hard}, n_boot=200)
    shares = {n: c['taken'] for n, c in report['classes'].items()}
    assert shares == pytest.approx({'whitespace': 1 / 3, 'brackets and operators': 0, 'identifiers': 2 / 3,
                                    'other': 0})
    assert report['taken'] == pytest.approx(depth.mean() / 3)
    assert sum(c['tokens'] for c in report['classes'].values()) == report['tokens'] == 24 * 32
    assert [r['tokens'] for r in report['by_depth']] == [int((depth == d).sum()) for d in range(4)]
    for loss, sign in (('dense', 1), ('easy', -1)):
        for stat in ('spearman', 'pearson'):
            c = report['correlation'][loss][stat]
            assert sign * c['low'] > 0.3 and c['low'] <= c['value'] <= c['high'], (loss, stat, c)
    # the loss of each class: high where identifiers are
    assert report['classes']['identifiers']['loss']['dense'] > 2.5 > report['classes']['other']['loss']['dense']


def test_skip_script_on_trained_runs(trained, tmp_path, capsys):
    """python tools/routing_plot.py --skip XMOD --dense DENSE --out DIR: skip.json (prose classes for a char-level run,
    the dense run's loss first, the X-MoD's own beside it), skip.png, snippet.png and the lines it prints."""
    import json
    capsys.readouterr()
    out = tmp_path / 'skip'
    assert routing_plot.main(['--skip', str(trained['xmod']), '--dense', str(trained['dense']), '--out', str(out),
                              '--boot=50']) == 0
    printed = capsys.readouterr().out
    report = json.load(open(out / 'skip.json'))
    assert report['scheme'] == 'prose' and report['primary'] == 'dense'
    assert list(report['correlation']) == ['dense', 'xmod'] and list(report['classes']) == list(
        routing_plot.CLASSES['prose'])
    assert report['tokens'] == 512 and report['routed_layers'] == 9
    assert 'against the loss under dense (primary): spearman' in printed
    for name in ('skip.png', 'snippet.png'):
        with open(out / name, 'rb') as f:
            assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    # the same command in --key=value form, the options in another order: the same report
    again = tmp_path / 'again'
    assert routing_plot.main(['--boot=50', f'--out={again}', f'--dense={trained["dense"]}', '--seed=0',
                              f'--skip={trained["xmod"]}', '--classes', 'auto']) == 0
    assert json.load(open(again / 'skip.json')) == report
    # a snippet window the run does not have: refused in one line before anything is written
    capsys.readouterr()
    assert_bad_input(routing_plot.main(['--skip', str(trained['xmod']), '--out', str(tmp_path / 'no'),
                                        '--snippet=100000']), capsys.readouterr().err,
                     '--snippet=100000: the run evaluates on windows 0..')
    assert not (tmp_path / 'no').exists()


@pytest.mark.parametrize('args, needle', [
    (['--skip', 'no/such/run'], 'has no ckpt.pt'),
    (['--skip=no/such/run'], 'has no ckpt.pt'),
    (['--skip', 'a', 'b'], '--skip takes one run folder, not RUN_DIRS as well'),
    (['--dense', 'x'], '--dense goes with --skip'),
    (['--dense=x', 'a'], '--dense goes with --skip'),
    ([], 'give RUN_DIRS or --skip RUN'),
    (['a', '--classes=words'], "--classes='words': expected auto | code | prose"),
    (['a', '--boot', '0'], '--boot=0: expected at least 1'),
    (['a', '--above=high'], '--above=high: expected float'),
    (['a', '--seed=-1'], '--seed=-1: expected a seed >= 0'),
    (['a', '--skp=a'], "unknown key 'skp' on the command line; did you mean --skip?"),
    (['no/such/run'], 'no run folder with a ckpt.pt of a model with routed layers'),
])
def test_script_refuses_in_one_line(args, needle, tmp_path, capsys):
    """Each bad command line: one line on stderr, exit 2 (configurator.run_main), nothing written."""
    assert_bad_input(routing_plot.main([*args, '--out', str(tmp_path / 'o')]), capsys.readouterr().err, needle)
    assert not (tmp_path / 'o').exists()


@pytest.mark.parametrize('args', [['a'], ['--skip', 'a'], ['--skip=a', '--dense=b']])
def test_out_is_required(args, capsys):
    assert_bad_input(routing_plot.main(args), capsys.readouterr().err, '--out DIR is required')


def test_script_help_lists_every_key(capsys):
    with pytest.raises(SystemExit) as e:
        routing_plot.main(['--help'])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith('tools/routing_plot.py: which routed layers')
    for key in routing_plot.DEFAULTS:
        assert f'  --{key}=' in out, key


def test_skip_script_refuses_a_run_whose_data_is_not_here(trained, tmp_path, capsys):
    """A run trained on a corpus this checkout has not prepared: one line that names the prepare command, exit 2,
    no traceback and nothing written."""
    import shutil
    run = tmp_path / 'moved'
    shutil.copytree(trained['xmod'], run)
    ckpt = torch.load(run / 'ckpt.pt', map_location='cpu', weights_only=False)
    ckpt['config'] = {**ckpt['config'], 'dataset': 'pycode', 'data_dir': str(tmp_path / 'no_data')}
    torch.save(ckpt, run / 'ckpt.pt')
    capsys.readouterr()
    assert routing_plot.main(['--skip', str(run), '--out', str(tmp_path / 'o')]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'no val.bin here' in err and 'python data/pycode/prepare.py' in err, err
    assert not (tmp_path / 'o').exists()
