"""
tools/downstream.py: a trained run on multiple-choice tasks, scored by the log-likelihood of each ending under the model
with causal routing (the honest mode: no routed layer looks at a later position). Writes out_dir/downstream.json.

    python tools/downstream.py --out_dir=out-xmod                                  # shakespeare_next_line
    python tools/downstream.py --out_dir=out-xmod --task_file=hellaswag_val.jsonl  # and HellaSwag, from its JSONL file

The scoring is a contract, HellaSwag's as GPT-2-scale reproductions report it:
  - each ending is encoded as ' ' + ending and appended to the encoded context;
  - the window is cut on the left to the model's block_size;
  - acc takes the ending with the highest summed log-probability of its tokens; acc_norm the one with the highest
    mean per token (HellaSwag's length normalisation, taken per token).
Each accuracy comes with its 95% Wilson interval.

Tasks:
  shakespeare_next_line  built from the validation split of data/shakespeare (--task_data), which holds whole
                         held-out works (coriolanus, john, much_ado_about_nothing, taming_of_the_shrew; see
                         data/shakespeare/prepare.py): a context of CONTEXT_LINES lines, then four candidate next
                         lines, the true one and three other lines of the held-out works of about its length. The
                         line break before the candidate is inside a speech, a soft wrap that ' ' stands for. Built
                         on every use from a fixed seed (no cached file to go stale); chance is 25%.
  hellaswag              --task_file=PATH: HellaSwag's JSONL (the fields ctx, endings, label), encoded with the
                         checkpoint's own tokenizer (its meta); an item with a character the tokenizer lacks (a
                         char model) is skipped and counted.
Exit code 2 on bad input, with a one-line message.
"""
import json
import math
import os
import random
import sys
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root
sys.path.insert(0, ROOT)
from configurator import UserError, configure, defaults_of, one_line, run_main
from run_folder import load_model, write_json

# -----------------------------------------------------------------------------------------------------------------
out_dir = 'out'             # the run folder holding ckpt.pt; downstream.json is written there
task_file = ''              # a HellaSwag-format JSONL file (ctx, endings, label): the task 'hellaswag'
next_line_items = 2000      # shakespeare_next_line items (0 = skip the task)
task_data = ''              # the prepared folder whose val split builds shakespeare_next_line ('' = data/shakespeare)
seed = 0                    # the draw of shakespeare_next_line's items and distractors
batch_size = 64             # rows (context + one ending) per forward pass
device = ''                 # '' = auto: cuda, then mps, then cpu
dtype = ''                  # '' = bfloat16 autocast on CUDA, float32 elsewhere
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())

CONTEXT_LINES = 4           # lines of context before the candidate next line
CHOICES = 4
MIN_CHARS = 20              # a candidate line has at least this many characters: shorter ones carry little text
LENGTH_SLACK = 0.15         # a distractor's length is within 15% of the true line's (at least 2 characters)


# -----------------------------------------------------------------------------------------------------------------
# the tasks: a list of {'ctx': str, 'endings': [str, ...], 'label': int}, HellaSwag's fields

def val_text(folder):
    """The decoded validation split of a prepared data folder, and a line saying where it comes from."""
    from data.tokenizers import DataError, from_meta, load_meta
    try:
        meta = load_meta(os.path.join(folder, 'meta.pkl'))
        ids = np.fromfile(os.path.join(folder, 'val.bin'), dtype=np.uint16)
        text = from_meta(meta)[1](ids.tolist())
    except (OSError, DataError, KeyError, ValueError) as e:
        raise UserError(f"cannot read the validation split of {folder} ({one_line(e)}); prepare it with: python "
                        f"data/shakespeare/prepare.py") from None
    works = meta.get('val_works')
    source = (f"held-out works {', '.join(works)}" if works else
              f"the val split of {meta.get('source', folder)} (the text after its 90% cut)")
    return text, source


def is_speech(line):
    """A line of a speech: not blank, not a speaker's name (VIRGILIA.), not a stage direction ([Exit.], Enter ...)."""
    s = line.strip()
    return bool(s) and not (s.isupper() and s.endswith('.')) and not s.startswith(('[', 'Enter ', 'Exit', 'Exeunt'))


def next_line_task(text, n, seed):
    """n items from the text's lines, deterministically from seed. An item's true line continues a speech from the
    line before it; its context is the CONTEXT_LINES lines before it (speakers and blank lines included); its three
    distractors are other such lines, of the true line's length within LENGTH_SLACK, never its own text."""
    lines = text.split('\n')
    pool = [i for i in range(CONTEXT_LINES, len(lines))
            if is_speech(lines[i]) and is_speech(lines[i - 1]) and len(lines[i].strip()) >= MIN_CHARS]
    by_length = {}
    for i in pool:
        by_length.setdefault(len(lines[i]), []).append(i)
    rng = random.Random(seed)
    items = []
    for i in sorted(rng.sample(pool, min(n, len(pool)))):
        L, slack = len(lines[i]), max(2, round(LENGTH_SLACK * len(lines[i])))
        near = [j for k in range(L - slack, L + slack + 1) for j in by_length.get(k, [])
                if lines[j] != lines[i]]
        texts = sorted({lines[j] for j in near})       # distinct texts, in a fixed order before the draw
        if len(texts) < CHOICES - 1:
            continue
        endings = rng.sample(texts, CHOICES - 1)
        label = rng.randrange(CHOICES)
        endings.insert(label, lines[i])
        items.append({'ctx': '\n'.join(lines[i - CONTEXT_LINES:i]), 'endings': endings, 'label': label})
    return items


def read_hellaswag(path):
    """HellaSwag's JSONL: one item a line, with ctx (str), endings (a list of str) and label (an index)."""
    items = []
    try:
        with open(path, encoding='utf-8') as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    item = {'ctx': d['ctx'], 'endings': list(d['endings']), 'label': int(d['label'])}
                except (ValueError, KeyError, TypeError) as e:
                    raise UserError(f"{path}, line {n}: not a HellaSwag item (ctx, endings, label): "
                                    f"{type(e).__name__}: {one_line(e)}") from None
                if not 0 <= item['label'] < len(item['endings']):
                    raise UserError(f"{path}, line {n}: label {item['label']} is not an index of its "
                                    f"{len(item['endings'])} endings")
                items.append(item)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--task_file={path}: cannot read it: {one_line(e)}") from None
    if not items:
        raise UserError(f"--task_file={path}: no items in it")
    return items


# -----------------------------------------------------------------------------------------------------------------
# scoring

def rows_of(item, encode, T):
    """Each ending's row: (input ids, target ids, how many of the last targets are the ending's), its window cut on
    the left to T. An ending longer than T keeps its last T tokens scored."""
    ctx = encode(item['ctx'])
    rows = []
    for ending in item['endings']:
        end = encode(' ' + ending)
        full = ctx + end
        x, y = full[:-1][-T:], full[1:][-T:]
        rows.append((x, y, min(len(end), len(y))))
    return rows


@torch.no_grad()
def score(model, rows, batch_size, dev, ctx):
    """(summed log-probability, token count) of each row's ending, under causal routing. Rows are right-padded in
    a batch: causal attention and causal routing (each token's own router score against a fixed threshold) keep a
    position blind to everything after it, padding included."""
    out = []
    for b in range(0, len(rows), batch_size):
        chunk = rows[b:b + batch_size]
        L = max(len(x) for x, _, _ in chunk)
        x = torch.zeros(len(chunk), L, dtype=torch.long)
        y = torch.full((len(chunk), L), -1, dtype=torch.long)
        for r, (xi, yi, _) in enumerate(chunk):
            x[r, :len(xi)], y[r, :len(yi)] = torch.tensor(xi), torch.tensor(yi)
        with ctx:
            logits, _ = model(x.to(dev), y.to(dev), routing='causal')
        # each target's log-probability gathered on the device: (B, L) to the host, not (B, L, V) (1.3 GB a batch
        # at GPT-2's vocabulary); padding targets (-1) read id 0 and are never summed
        logp = F.log_softmax(logits.float(), dim=-1)
        target = logp.gather(2, y.to(dev).clamp_min(0).unsqueeze(-1)).squeeze(-1).cpu()    # (B, L)
        for r, (xi, yi, n) in enumerate(chunk):
            out.append((target[r, len(yi) - n:len(yi)].sum().item(), n))
    return out


def wilson(k, n, z=1.96):
    """The 95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return [0.0, 1.0]
    p, d = k / n, 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(mid - half, 4), round(mid + half, 4)]


def evaluate(model, items, encode, cfg, dev, ctx):
    """acc, acc_norm (with intervals), n and skipped of a task; correct/correct_norm: one '0' or '1' per item, for
    comparisons paired by item."""
    T = model.config.block_size
    rows, kept = [], []
    for item in items:
        try:
            rows.append(rows_of(item, encode, T))
        except ValueError:                # a character the char tokenizer lacks
            continue
        kept.append(item)
    scores = score(model, [r for item_rows in rows for r in item_rows], cfg.batch_size, dev, ctx)
    correct, correct_norm, at = [], [], 0
    for item in kept:
        s = scores[at:at + len(item['endings'])]
        at += len(item['endings'])
        correct.append(int(max(range(len(s)), key=lambda i: s[i][0]) == item['label']))
        correct_norm.append(int(max(range(len(s)), key=lambda i: s[i][0] / s[i][1]) == item['label']))
    n = len(kept)
    return {'acc': round(sum(correct) / max(1, n), 4), 'acc_norm': round(sum(correct_norm) / max(1, n), 4), 'n': n,
            'acc_ci95': wilson(sum(correct), n), 'acc_norm_ci95': wilson(sum(correct_norm), n),
            'chance': round(sum(1 / len(i['endings']) for i in kept) / max(1, n), 4),
            'skipped': len(items) - n, 'correct': ''.join(map(str, correct)),
            'correct_norm': ''.join(map(str, correct_norm))}


def downstream(argv):
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__)
    if cfg.next_line_items < 0 or cfg.batch_size < 1:
        raise UserError("--next_line_items: expected >= 0 (0 = skip); --batch_size: expected >= 1")
    dev = cfg.device or ('cuda' if torch.cuda.is_available() else
                         'mps' if torch.backends.mps.is_available() else 'cpu')
    dtype = cfg.dtype or ('bfloat16' if dev.startswith('cuda') and torch.cuda.is_bf16_supported() else 'float32')
    if dtype not in ('float32', 'bfloat16', 'float16'):
        raise UserError(f"--dtype={dtype!r}: expected '' (auto) | float32 | bfloat16 | float16")
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(dev.split(':')[0], dtype=getattr(torch, dtype))
    tasks = {}
    if cfg.next_line_items:
        text, source = val_text(cfg.task_data or os.path.join(ROOT, 'data', 'shakespeare'))
        tasks['shakespeare_next_line'] = (next_line_task(text, cfg.next_line_items, cfg.seed),
                                          {'source': source, 'seed': cfg.seed})
    if cfg.task_file:
        tasks['hellaswag'] = (read_hellaswag(cfg.task_file), {'source': os.path.abspath(cfg.task_file)})
    if not tasks:
        raise UserError("no task: give --task_file=PATH, or leave --next_line_items above 0")
    model, ckpt = load_model(cfg.out_dir, dev)
    from data.tokenizers import DataError, from_meta
    try:
        encode = from_meta(ckpt['meta'], allow_special=False)[0]
    except DataError as e:
        raise UserError(str(e)) from None
    path = os.path.join(cfg.out_dir, 'downstream.json')
    try:
        with open(path) as f:
            results = json.load(f)      # a task scored earlier (say hellaswag) stays beside one scored now
    except (OSError, ValueError):
        results = {}
    print(f"{cfg.out_dir}: {ckpt['model_args']['model']} at step {ckpt['step']:,}, causal routing, window "
          f"{model.config.block_size}")
    print(f"{'task':24s} {'n':>6s} {'acc':>7s} {'95% interval':>15s} {'acc_norm':>9s} {'95% interval':>15s} "
          f"{'chance':>7s}")
    for name, (items, about) in tasks.items():
        r = {**evaluate(model, items, encode, cfg, dev, ctx), **about, 'step': ckpt['step']}
        results[name] = r
        print(f"{name:24s} {r['n']:6d} {r['acc']:7.4f} {str(r['acc_ci95']):>15s} {r['acc_norm']:9.4f} "
              f"{str(r['acc_norm_ci95']):>15s} {r['chance']:7.4f}" + (f"  ({r['skipped']} skipped: characters "
                                                                      f"the tokenizer lacks)" if r['skipped'] else ''))
    write_json(path, results)
    print(f"wrote {path}")
    return 0


def main(argv=None):
    return run_main('tools/downstream.py', downstream, argv)


if __name__ == '__main__':
    sys.exit(main())
