"""tools/downstream.py: HellaSwag-style scoring checked against a computation by hand (each ending's log-probability
summed one prefix at a time, without batching or padding), the window cut on the left, the JSON it writes, and
shakespeare_next_line built deterministically from the validation split alone."""
import json
import os
import random

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import downstream
import xmod
from data.tokenizers import from_meta, load_meta, meta_for

# these tests route causally on models no training step calibrated, on purpose (routing's mechanics, not its
# thresholds): xmod.py's one warning about it is expected here, and test_xmod.py checks that it is given
pytestmark = pytest.mark.filterwarnings('ignore:causal routing with thresholds that were never calibrated')

TEXT = "the cat sat on a mat. a dog ran far away, then home again!\n"


@pytest.fixture(autouse=True)
def one_thread():
    """One thread, restored afterwards: tiny models on a busy 2-core machine oversubscribe badly with two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def save_run(folder, model_name, meta=None):
    """A run folder with a random tiny model's checkpoint (the keys load_checkpoint asks for); an X-MoD's causal
    thresholds calibrated once, as one training step would."""
    meta = meta or meta_for('char', text=TEXT)
    torch.manual_seed(0)
    cfg = xmod.GPTConfig(model=model_name, n_layer=4, n_head=2, n_embd=32, block_size=24, vocab_size=meta['vocab_size'],
                         capacity=0.5)
    model = xmod.GPT(cfg)
    if model_name == 'xmod':
        _, _, aux = model(torch.randint(0, cfg.vocab_size, (8, 24)), torch.randint(0, cfg.vocab_size, (8, 24)),
                          return_aux=True)
        model.calibrate([aux['layers']])
    os.makedirs(folder)
    from dataclasses import asdict
    torch.save({'model': model.state_dict(), 'optimizer': {}, 'config': {}, 'model_args': asdict(cfg), 'step': 7,
                'rng': [], 'meta': meta}, os.path.join(folder, 'ckpt.pt'))
    return model.eval(), meta


def by_hand(model, encode, ctx, ending, T):
    """Sum and count of log p(token) over the tokens of ' ' + ending in the window of context + ending cut on the
    left to T + 1 tokens (T inputs), each token from its own prefix of that window, one forward pass apiece."""
    ids = (encode(ctx) + encode(' ' + ending))[-(T + 1):]
    n = len(encode(' ' + ending))
    total = 0.0
    for t in range(len(ids) - n, len(ids)):
        prefix = torch.tensor(ids[:t])[None]
        logits, _ = model(prefix, routing='causal')
        total += F.log_softmax(logits[0, -1], -1)[ids[t]].item()
    return total, n


@pytest.mark.parametrize('model_name', ['dense', 'xmod'])
def test_hellaswag_scoring_matches_a_computation_by_hand(tmp_path, model_name):
    out = str(tmp_path / 'run')
    model, meta = save_run(out, model_name)
    encode = from_meta(meta)[0]
    rng = random.Random(1)
    words = TEXT.split()
    items = [{'ctx': ' '.join(rng.choice(words) for _ in range(n)),
              'endings': [' '.join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(4)],
              'label': rng.randrange(4)} for n in (2, 5, 12)]         # 12 words: longer than the 24-token window
    items.append({'ctx': 'a cat', 'endings': ['sat', 'ran', 'Q is not in the vocabulary', 'dog'], 'label': 0})
    task = tmp_path / 'hellaswag.jsonl'
    task.write_text(''.join(json.dumps(dict(i, ind=k, activity_label='x')) + '\n' for k, i in enumerate(items)))
    assert downstream.main([f'--out_dir={out}', f'--task_file={task}', '--next_line_items=0', '--batch_size=3',
                            '--device=cpu']) == 0
    got = json.load(open(os.path.join(out, 'downstream.json')))['hellaswag']
    want, want_norm = '', ''
    with torch.no_grad():
        for item in items[:3]:
            s = [by_hand(model, encode, item['ctx'], e, 24) for e in item['endings']]
            want += str(int(max(range(4), key=lambda i: s[i][0]) == item['label']))
            want_norm += str(int(max(range(4), key=lambda i: s[i][0] / s[i][1]) == item['label']))
    assert (got['correct'], got['correct_norm']) == (want, want_norm)
    assert got['n'] == 3 and got['skipped'] == 1 and got['chance'] == 0.25
    assert got['acc'] == round(want.count('1') / 3, 4) and got['acc_norm'] == round(want_norm.count('1') / 3, 4)
    assert got['acc_ci95'] == downstream.wilson(want.count('1'), 3)
    # the scores themselves, not only the choices: the batched, padded, left-cut rows give the by-hand numbers
    rows = downstream.rows_of(items[2], encode, 24)
    with torch.no_grad():
        batched = downstream.score(model, rows, 2, 'cpu', torch.no_grad())
        for (total, n), ending in zip(batched, items[2]['endings']):
            assert n == len(ending) + 1
            assert total == pytest.approx(by_hand(model, encode, items[2]['ctx'], ending, 24)[0], abs=1e-4)


def test_wilson_interval():
    assert downstream.wilson(50, 100) == [0.4038, 0.5962]       # the textbook value
    lo, hi = downstream.wilson(0, 20)
    assert lo == 0 and 0.1 < hi < 0.2


def test_bad_task_file(tmp_path, capsys):
    out = str(tmp_path / 'run')
    save_run(out, 'dense')
    bad = tmp_path / 'bad.jsonl'
    bad.write_text('{"ctx": "a", "endings": ["b", "c"], "label": 5}\n')
    assert downstream.main([f'--out_dir={out}', f'--task_file={bad}', '--next_line_items=0']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'line 1' in err[0] and 'label 5' in err[0]
    assert not os.path.exists(os.path.join(out, 'downstream.json'))


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    """A prepared char corpus (prepare.py --input): speeches of random lines, so the val split has lines to draw."""
    from data.shakespeare.prepare import prepare
    folder = tmp_path_factory.mktemp('corpus')
    rng = random.Random(0)
    words = 'thou art the sun and moon my lord what light through yonder window breaks fair'.split()
    speeches = [f"SPEAKER{'AB'[k % 2]}.\n" + '\n'.join(' '.join(rng.choice(words) for _ in range(rng.randint(5, 9)))
                                                      for _ in range(rng.randint(2, 6))) for k in range(600)]
    (folder / 'input.txt').write_text('\n\n'.join(speeches) + '\n')
    prepare('char', input=str(folder / 'input.txt'), out_dir=str(folder / 'data'))
    return str(folder / 'data')


def test_next_line_task_is_deterministic_and_from_the_val_split_only(prepared):
    text, source = downstream.val_text(prepared)
    assert 'val split' in source
    items = downstream.next_line_task(text, 50, seed=0)
    assert len(items) == 50 and items == downstream.next_line_task(text, 50, seed=0)
    assert items != downstream.next_line_task(text, 50, seed=1)
    lines = set(text.split('\n'))
    for item in items:
        true = item['endings'][item['label']]
        assert item['ctx'] + '\n' + true + '\n' in text        # the true line follows its context in val
        assert len(item['endings']) == 4 and len(set(item['endings'])) == 4
        assert all(e in lines and abs(len(e) - len(true)) <= max(2, round(0.15 * len(true)))
                   for e in item['endings'])
        assert len(item['ctx'].split('\n')) == downstream.CONTEXT_LINES
        assert downstream.is_speech(true) and downstream.is_speech(item['ctx'].split('\n')[-1])
    assert sorted({i['label'] for i in items}) == [0, 1, 2, 3]


def test_next_line_task_end_to_end(prepared, tmp_path, capsys):
    out = str(tmp_path / 'run')
    save_run(out, 'dense', meta=load_meta(os.path.join(prepared, 'meta.pkl')))
    args = [f'--out_dir={out}', f'--task_data={prepared}', '--next_line_items=40', '--device=cpu']
    assert downstream.main(args) == 0
    table = capsys.readouterr().out
    assert 'shakespeare_next_line' in table and 'acc_norm' in table
    got = json.load(open(os.path.join(out, 'downstream.json')))['shakespeare_next_line']
    assert {'acc', 'acc_norm', 'n', 'acc_ci95', 'acc_norm_ci95', 'chance', 'seed', 'source'} <= set(got)
    assert got['n'] == 40 and got['chance'] == 0.25 and len(got['correct']) == 40
    assert got['acc_ci95'][0] <= got['acc'] <= got['acc_ci95'][1]
    assert downstream.main(args) == 0                            # the same items, the same model: the same result
    assert json.load(open(os.path.join(out, 'downstream.json')))['shakespeare_next_line'] == got
