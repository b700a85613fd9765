"""
Tests of the routing picture: `python sample.py --show_routing=True` writes out_dir/routing.png, and the depth it
draws is the model's own causal routing of the drawn tokens, checked against an independent forward (the naive
impl, which selects with boolean masks instead of the fast path's attention mask). A tiny untrained model in a
checkpoint made here, no training, no data folder.
"""
import os
import sys
from dataclasses import asdict

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
import harness
import routing_plot
import sample
from data.tokenizers import from_meta, meta_for
from xmod import GPT, GPTConfig

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
    harness.save_checkpoint({'model': model.state_dict(), 'optimizer': {}, 'config': {}, 'model_args': asdict(cfg),
                             'step': 0, 'rng': [], 'meta': meta}, os.path.join(out_dir, 'ckpt.pt'))
    return cfg, model.state_dict(), encode


def test_routing_png_draws_the_causal_depth(tmp_path, capsys, monkeypatch):
    out = str(tmp_path / 'run')
    cfg, state, encode = save_run(out, 'xmod')
    drawn = []

    def spy(path, routing, pieces, title, **kw):
        drawn.append(dict(routing=routing, pieces=pieces, title=title))
        return draw(path, routing, pieces, title, **kw)
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
    assert got['routing']['ids'] == ids and got['pieces'] == list(text[:32])
    assert 'first 32 of 45 tokens' in got['title']

    # an independent forward: the naive impl, the same weights, causal routing
    naive = GPT(GPTConfig(**{**asdict(cfg), 'impl': 'naive'}))
    naive.load_state_dict(state)
    naive.eval()
    with torch.no_grad():
        _, _, aux = naive(torch.tensor([ids]), routing='causal', return_aux=True)
    masks = [a['mask'][0].numpy() for a in aux['layers'] if 'mask' in a]          # each (T,) bool
    assert got['routing']['layers'] == [1, 2, 3]                                   # DrrrD
    assert np.array_equal(got['routing']['mask'], np.stack(masks))
    depth = np.sum(masks, axis=0)
    assert np.array_equal(got['routing']['depth'], depth)
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


def test_a_model_without_routed_layers_is_refused(tmp_path, capsys):
    out = str(tmp_path / 'run')
    save_run(out, 'dense')
    rc = sample.main([f'--out_dir={out}', '--show_routing=True', '--device=cpu'])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and 'no routed layer' in err[0], err
    assert not os.path.exists(os.path.join(out, 'routing.png'))


def test_help_lists_show_routing(capsys):
    with pytest.raises(SystemExit) as e:
        sample.main(['--help'])
    assert e.value.code == 0 and '--show_routing=False  also write out_dir/routing.png' in capsys.readouterr().out
