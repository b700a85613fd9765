"""
tools/routing_plot.py: which routed layers took which token of one text, in causal routing, drawn as routing.png.
sample.py calls it with --show_routing=True:

    python sample.py --out_dir=out-xmod --show_routing=True          # the first sample's routing, into out-xmod/routing.png
    python sample.py --out_dir=out-xmod --show_routing=True --start=FILE:text.txt --max_new_tokens=0 --num_samples=1

Two views of the same tokens: (1) the text, each token on a background coloured by its realised routed depth (how
many routed layers took it); (2) a (routed layers x positions) grid, dark where a layer took a token.
`routed_depth` is the model's side and `draw_routing` only draws what it returns, so a test can check the picture's
numbers against an independent forward. Only block_size tokens fit one forward: the first ones are drawn, and the
title and describe's first line say how many of the text's tokens that is.

Run as a script it asks of trained runs whether their routed layers take the same tokens (layer_overlap):

    python tools/routing_plot.py results/cpu_lr/runs/xmod_* --out DIR      # DIR/overlap.json, overlap.png

and what one trained X-MoD's routed layers learn to skip (skip_report), on its own validation windows:

    python tools/routing_plot.py --skip XMOD_RUN --dense DENSE_RUN --out DIR  # DIR/skip.json, skip.png, snippet.png

each position's routed depth against its loss under the dense run of the same seed (Spearman and Pearson, with a
bootstrap interval over windows), the share of each token class the routed layers take (code: whitespace, brackets
and operators, identifiers, other; prose: spaces and punctuation, letters), and the routing picture of the first
validation window (for pycode, the start of a source file).

The command line is configurator.py's: RUN_DIRS... are the bare arguments (run folders or globs; folders without a
ckpt.pt or without routed layers are passed over), --key=value or --key value; --out is required, and --skip takes
no RUN_DIRS.
"""
import glob
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root
sys.path.insert(0, ROOT)
from configurator import UserError, configure, defaults_of, run_main  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------------
# the command line (configurator.py): RUN_DIRS... are bare arguments; --key=value or --key value
out = ''            # folder for overlap.json and overlap.png, or with --skip skip.json, skip.png and snippet.png (required)
above = 0.5         # a pair of routed layers overlapping more than this (causal or top-k Jaccard) is called collapsed
skip = ''           # a trained X-MoD run folder: what its routed layers take (instead of RUN_DIRS)
dense = ''          # with --skip: the dense run whose per-token loss measures difficulty (default: the X-MoD run's own
                    # loss)
classes = 'auto'    # with --skip: token classes: code or prose (auto: code for --dataset=pycode runs)
boot = 1000         # with --skip: bootstrap resamples of the windows
seed = 0            # with --skip: seed of the bootstrap
snippet = 0         # with --skip: the validation window drawn into snippet.png
# ----------------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())


@torch.no_grad()
def routed_pass(model, idx, targets=None, routing='causal'):
    """One forward of token ids idx (B, T) in eval mode (thresholds frozen, no dropout: what sampling uses). Returns
    a dict: layers [R] the routed layers' indices, mask (R, B, T) bool numpy (mask[j, b, t]: layer layers[j] took
    token t of row b), and with targets (B, T) loss (B, T) float numpy, each position's cross-entropy."""
    was_training = model.training
    model.eval()
    logits, _, aux = model(idx, targets, routing=routing, return_aux=True)
    model.train(was_training)
    layers = [l for l, layer in enumerate(model.transformer.h) if layer.kind == 'routed']
    mask = (torch.stack([aux['layers'][l].mask for l in layers]).cpu().numpy() if layers
            else np.zeros((0, *idx.shape), bool))                                               # (R, B, T)
    out = dict(layers=layers, mask=mask)
    if targets is not None:
        out['loss'] = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction='none').cpu().numpy()
    return out


def routed_depth(model, ids):
    """The first min(len(ids), block_size) token ids in causal routing (token t's route depends on tokens 0..t only,
    as when sampling). Returns a dict: ids (T,) the tokens drawn, layers [R] the routed layers' indices, mask (R, T)
    bool numpy (mask[j, t]: layer layers[j] took token t), depth (T,) int = mask.sum(0)."""
    T = min(len(ids), model.config.block_size)
    idx = torch.tensor(list(ids[:T]), dtype=torch.long, device=model.lm_head.weight.device)[None]   # (1, T)
    out = routed_pass(model, idx)
    mask = out['mask'][:, 0]                                                                  # (R, T)
    return dict(ids=idx[0].tolist(), layers=out['layers'], mask=mask, depth=mask.sum(0))


def describe(selection, capacity, total=None):
    """A few lines about the drawn depth: its spread against c*R (what balancing aims at) and each layer's rate.
    total: how many tokens the text had, when only the first T of them were drawn (one forward holds block_size)."""
    depth, mask, layers = selection['depth'], selection['mask'], selection['layers']
    R, T = mask.shape
    counts = np.bincount(depth, minlength=R + 1)
    drawn = f"the first {T} of {total} tokens" if total is not None and total > T else f"{T} tokens"
    return '\n'.join([
        f"routed depth over {drawn} ({R} routed layers): mean {depth.mean():.2f} (c*R = {capacity * R:.2f}), "
        f"std {depth.std():.2f}, max {depth.max()}",
        'tokens at depth ' + ', '.join(f"{d}: {n}" for d, n in enumerate(counts) if n),
        'rate per layer ' + ', '.join(f"{l}: {r:.2f}" for l, r in zip(layers, mask.mean(1))),
    ])


def shown(piece):
    """A token's text as drawn: a space is a middle dot and a newline an arrow, so that they have a visible cell."""
    return piece.replace(' ', '\u00b7').replace('\t', '\u2192').replace('\r', '').replace('\n', '\u21b5')


def text_cells(pieces, depth, width):
    """Lay the tokens out in rows of at most `width` characters, a new row after each newline. Returns the
    (rows, width) depth grid (NaN where empty) and the list of (row, col, char) to write."""
    cells = []
    row, col = 0, 0
    for piece, d in zip(pieces, depth):
        text = shown(piece) or '?'
        if col + len(text) > width and col > 0:
            row, col = row + 1, 0
        for ch in text[:width]:
            cells.append((row, col, ch, d))
            col += 1
        if '\n' in piece:
            row, col = row + 1, 0
    rows = (cells[-1][0] + 1) if cells else 1
    grid = np.full((rows, width), np.nan)
    for r, c, _, d in cells:
        grid[r, c] = d
    return grid, [(r, c, ch) for r, c, ch, _ in cells]


def draw_routing(path, selection, pieces, title, width=100, dpi=100):
    """selection: routed_depth's dict (which routed layer took which token); pieces: each drawn token's text (decoded alone). Writes a PNG at path."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    depth, mask, layers = selection['depth'], selection['mask'], selection['layers']
    R, T = mask.shape
    # one colour per depth 0..top, depth 0 the palest. Balancing keeps depths near c*R, far below R: a scale up to
    # R would leave everything pale, so it stops at the deepest token drawn (at least 2)
    top = max(2, int(depth.max()))
    cmap = plt.get_cmap('YlGnBu', top + 1)
    grid, chars = text_cells(pieces, depth, width)
    rows = grid.shape[0]
    fig, axes = plt.subplots(2, 2, figsize=(14, 0.32 * rows + 0.35 * R + 2.6), squeeze=False,
                             gridspec_kw=dict(height_ratios=[0.32 * rows + 0.4, 0.35 * R + 0.9],
                                              width_ratios=[1, 0.012]))
    (ax_text, ax_bar), (ax_grid, ax_empty) = axes
    ax_empty.axis('off')
    # (1) the text on its depth
    img = ax_text.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=top + 0.5, aspect='auto',
                         interpolation='nearest')
    for r, c, ch in chars:
        dark = grid[r, c] > top / 2                       # white letters on the darker half of the scale
        ax_text.text(c, r, ch, ha='center', va='center', family='monospace', fontsize=10,
                     color='white' if dark else 'black')
    ax_text.set_xticks([])
    ax_text.set_yticks([])
    ax_text.set_title(title, fontsize=10, loc='left')
    fig.colorbar(img, cax=ax_bar, ticks=range(top + 1)).set_label(f'routed depth (of {R})')
    # (2) the routed layers x positions grid
    ax_grid.imshow(mask, cmap='Greys', vmin=0, vmax=1.4, aspect='auto', interpolation='nearest')
    ax_grid.set_yticks(range(R))
    ax_grid.set_yticklabels([f"layer {l}" for l in layers], fontsize=8)
    # Each cell holds its token's character (white on a taken cell, pale grey elsewhere), so a row reads as the
    # text and shows which characters that layer took; 128 labels under the grid were too small to read. A long
    # token (a BPE piece) shows its first character; past 160 columns a cell is too narrow for any.
    if T <= 160:
        for j in range(R):
            for t, piece in enumerate(pieces):
                ax_grid.text(t, j, (shown(piece) or '?')[0], ha='center', va='center', family='monospace',
                             fontsize=7, color='white' if mask[j, t] else '#8c8c8c')
    step = 8 if T <= 64 else 16                           # position numbers, few enough to read
    ax_grid.set_xticks(range(0, T, step))
    ax_grid.tick_params(axis='x', labelsize=8)
    ax_grid.set_xlabel('position in the text drawn (dark: the layer took the token)')
    ax_grid.set_title(f"which routed layer took which token: {mask.sum()} of {R} x {T}", fontsize=10, loc='left')
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def routing_title(name, drawn, total, block_size, capacity, depth):
    what = f"the first {drawn} of {total} tokens" if drawn < total else f"all {total} tokens"
    reach = f" (one forward holds block_size={block_size})" if drawn < total else ''
    return (f"{name}: causal routing of {what}{reach}; colour = routed depth, mean {depth.mean():.2f}, "
            f"capacity {capacity:.3g}")


def write_routing(path, model, ids, decode, name):
    """The routing picture of the first block_size tokens of ids at path, titled with name, and its depth
    statistics printed (sample.py --show_routing, and the snippet of --skip)."""
    selection = routed_depth(model, ids)
    pieces = [decode([i]) for i in selection['ids']]     # each token's own text
    title = routing_title(name, len(selection['ids']), len(ids), model.config.block_size, model.config.capacity,
                          selection['depth'])
    draw_routing(path, selection, pieces, title)
    print(describe(selection, model.config.capacity, total=len(ids)))
    print(f"wrote {path}")
    return selection


# ----------------------------------------------------------------------------------------------------------------------
# do routed layers take the same tokens? (python tools/routing_plot.py RUN_DIRS... --out DIR)

def independent_jaccard(p, q):
    """The Jaccard index two layers would have if each took a token independently at its own rate p, q (ratio of the
    expected intersection to the expected union): 0.067 at p = q = 0.125."""
    both = p * q
    return both / max(p + q - both, 1e-12)


@torch.no_grad()
def layer_overlap(model, idx):
    """How the routed layers' selections overlap on token ids idx (B, T), in top-k and in causal routing, and how
    alike their routers are. Returns a dict of numpy arrays: layers (R,), rate_topk / rate_causal (R,) the fraction
    each layer took, jaccard_topk / jaccard_causal (R, R) the mean over sequences of |A & B| / |A | B|,
    independent (R, R) what independent choices at the causal rates would give, router_cosine (R, R) the cosine of
    the router weights, threshold (R,) the calibrated causal thresholds."""
    masks = {routing: routed_pass(model, idx, routing=routing) for routing in ('topk', 'causal')}
    layers = masks['causal']['layers']
    routers = [model.transformer.h[l].router for l in layers]
    out = dict(layers=np.array(layers))
    for routing, m in masks.items():
        m = m['mask']                                                                          # (R, B, T)
        both = (m[:, None] & m[None]).sum(-1)                                                  # (R, R, B)
        either = (m[:, None] | m[None]).sum(-1)
        out[f'jaccard_{routing}'] = (both / np.maximum(either, 1)).mean(-1)
        out[f'rate_{routing}'] = m.mean((1, 2))
    rate = out['rate_causal']
    out['independent'] = np.array([[independent_jaccard(p, q) for q in rate] for p in rate])
    w = torch.cat([r.weight for r in routers]).float()                                         # (R, C)
    w = w / w.norm(dim=1, keepdim=True)
    out['router_cosine'] = (w @ w.t()).cpu().numpy()
    out['threshold'] = np.array([float(r.threshold()) for r in routers])
    return out


def collapsed_pairs(overlap, routing='causal', above=0.5):
    """Pairs of routed layers (l1, l2, jaccard) whose selections overlap more than `above` (independent choices at
    c = 0.125: 0.067): the same tokens taken twice, a routed layer spent."""
    J, layers = overlap[f'jaccard_{routing}'], overlap['layers']
    return [(int(layers[i]), int(layers[j]), float(J[i, j])) for i in range(len(layers))
            for j in range(i + 1, len(layers)) if J[i, j] > above]


class Refused(UserError):
    """Input this script cannot use: main prints the message in one line and exits 2 (configurator.run_main)."""


def load_run_model(run_dir):
    """(model, x, y, ckpt): the GPT of a run folder's ckpt.pt and the fixed validation windows its run evaluated on
    (its eval_tokens), x (B, T) and its targets y (B, T)."""
    from data.loader import eval_starts, open_split, read_windows
    from run_folder import clean_state_dict, load_checkpoint
    from xmod import GPT, GPTConfig
    ckpt = load_checkpoint(os.path.join(run_dir, 'ckpt.pt'))
    model = GPT(GPTConfig(**ckpt['model_args']))
    model.load_state_dict(clean_state_dict(ckpt['model']))
    cfg = ckpt['config']
    folder = cfg.get('data_dir') or os.path.join(ROOT, 'data', cfg['dataset'])
    if not os.path.exists(os.path.join(folder, 'val.bin')):
        raise Refused(f"{run_dir} was trained on {folder}, which has no val.bin here: prepare it first "
                        f"(python data/{cfg['dataset']}/prepare.py)")
    data = open_split(folder, 'val')
    T = model.config.block_size
    starts = eval_starts(len(data), T, cfg.get('eval_tokens') or 0)
    x, y = read_windows(data, starts, T, 'cpu')
    return model, x, y, ckpt


def draw_overlap(path, results):
    """One row per run: its Jaccard matrices (top-k, causal; the diagonal blanked) and router cosine matrix."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(results), 3, figsize=(11, 3.4 * len(results)), squeeze=False)
    for row, (name, ov) in zip(axes, results.items()):
        labels = [str(l) for l in ov['layers']]
        for ax, key, title, vmin in zip(row, ('jaccard_topk', 'jaccard_causal', 'router_cosine'),
                                        ('Jaccard, top-k', 'Jaccard, causal', 'router weight cosine'), (0, 0, -1)):
            M = np.array(ov[key], dtype=float)
            if key.startswith('jaccard'):
                np.fill_diagonal(M, np.nan)
            img = ax.imshow(M, vmin=vmin, vmax=1, cmap='viridis' if vmin == 0 else 'RdBu_r')
            ax.set_xticks(range(len(labels)), labels, fontsize=7)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
            ax.set_title(f"{name}\n{title}", fontsize=8)
            fig.colorbar(img, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def overlap_main(cfg):
    """RUN_DIRS... --out DIR: each routed run's overlap, one line each, overlap.json and overlap.png."""
    dirs = sorted({d for pat in cfg.runs for d in (glob.glob(pat) or [pat])
                   if os.path.isfile(os.path.join(d, 'ckpt.pt'))})
    results = {}
    for d in dirs:
        model, x, _, ckpt = load_run_model(d)
        if not model.routed_layers():
            continue
        with torch.no_grad():
            ov = layer_overlap(model, x)
        name = os.path.basename(os.path.normpath(d))
        results[name] = ov
        at = {l: i for i, l in enumerate(ov['layers'])}
        pairs = [f"{a}-{b} {j:.2f} (router cosine {ov['router_cosine'][at[a], at[b]]:.2f})"
                 for a, b, j in collapsed_pairs(ov, 'causal', cfg.above)]
        print(f"{name}: causal rates {', '.join(f'{r:.3f}' for r in ov['rate_causal'])}; pairs with causal "
              f"Jaccard > {cfg.above}: {', '.join(pairs) or 'none'}")
    if not results:
        refuse('no run folder with a ckpt.pt of a model with routed layers')
    os.makedirs(cfg.out, exist_ok=True)
    with open(os.path.join(cfg.out, 'overlap.json'), 'w') as f:
        json.dump({n: {k: np.asarray(v).tolist() for k, v in ov.items()} |
                   {'collapsed_causal': collapsed_pairs(ov, 'causal', cfg.above),
                    'collapsed_topk': collapsed_pairs(ov, 'topk', cfg.above)} for n, ov in results.items()},
                  f, indent=1)
    draw_overlap(os.path.join(cfg.out, 'overlap.png'), results)
    print(f"wrote {cfg.out}/overlap.json, overlap.png")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# what the router learns to skip (python tools/routing_plot.py --skip XMOD_RUN [--dense DENSE_RUN] --out DIR)
#
# Position t of a validation window: its routed depth (how many routed layers took token t in causal routing) and the
# loss of the prediction made there (of token t+1), the prediction that depth serves. If routing spends depth where
# it is needed, the two correlate positively under a model that saw every token at full depth (the dense run of the
# same seed). Token classes are of token t, the one a router sees and takes.

CLASSES = {
    'code': ('whitespace', 'brackets and operators', 'identifiers', 'other'),
    'prose': ('spaces and punctuation', 'letters'),
}
OPERATORS = frozenset('()[]{}+-*/%=<>!&|^~@:.,;')


def token_class(piece, scheme):
    """The index in CLASSES[scheme] of a token whose text is piece. code: whitespace (spaces, tabs, newlines: the
    indentation); brackets and operators (the characters of OPERATORS, delimiters , : ; . among them); identifiers
    (ASCII letters, digits, underscore: names, keywords, numbers); other (quotes, #, backslash, a non-ASCII byte,
    the end-of-document token). prose: letters, else spaces and punctuation (the odd digit too)."""
    if scheme == 'prose':
        return 1 if piece.isalpha() else 0
    if piece.isspace():
        return 0
    if piece and all(ch in OPERATORS for ch in piece):
        return 1
    if piece and all(ch.isascii() and (ch.isalnum() or ch == '_') for ch in piece):
        return 2
    return 3


def class_table(vocab_size, decode, scheme):
    """(vocab_size,) int: each token id's class, from its own text."""
    return np.array([token_class(decode([i]), scheme) for i in range(vocab_size)])


def correlations(depth, loss, n_boot=1000, seed=0):
    """Spearman and Pearson correlation of routed depth and loss, depth and loss (B, T), each as (value, low, high):
    a 95% percentile interval from n_boot resamples of whole windows (a window's positions are not independent).
    NaN where either side is constant."""
    def rankdata(a):
        """Ranks 1..n, ties sharing their mean rank (Spearman's rule; depth takes only a few values)."""
        order = np.argsort(a, kind='stable')
        ranks = np.empty(len(a))
        ranks[order] = np.arange(1, len(a) + 1)
        _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
        return (np.bincount(inverse, ranks) / counts)[inverse]

    def pearson(a, b):
        a, b = a - a.mean(), b - b.mean()
        den = np.sqrt((a * a).sum() * (b * b).sum())
        return float((a * b).sum() / den) if den > 0 else float('nan')

    def both(d, l):
        d, l = d.ravel().astype(float), l.ravel().astype(float)
        return pearson(rankdata(d), rankdata(l)), pearson(d, l)

    B = depth.shape[0]
    rng = np.random.default_rng(seed)
    boots = np.array([both(depth[rows], loss[rows]) for rows in rng.integers(0, B, (n_boot, B))])   # (n_boot, 2)
    out = {}
    for j, (key, value) in enumerate(zip(('spearman', 'pearson'), both(depth, loss))):
        low, high = np.nanpercentile(boots[:, j], [2.5, 97.5]) if np.isfinite(boots[:, j]).any() else (np.nan,) * 2
        out[key] = (value, float(low), float(high))
    return out


def skip_report(depth, classes, names, R, losses, n_boot=1000, seed=0):
    """What routed layers take. depth (B, T) routed depth of each position (0..R); classes (B, T) each token's class
    (an index into names); losses {label: (B, T) loss at each position}. Returns a dict: tokens, routed_layers,
    taken (the share of all (token, routed layer) slots taken: mean depth / R); per class its tokens, fraction of
    all tokens, taken (mean depth / R over its tokens), lift (taken / the overall share) and mean loss under each
    model; per depth 0..R its tokens and mean loss (and its standard error); per loss the correlations with depth."""
    taken = float(depth.mean() / R)
    report = dict(tokens=int(depth.size), routed_layers=R, taken=taken, classes={}, by_depth=[], correlation={})
    for k, name in enumerate(names):
        sel = classes == k
        n = int(sel.sum())
        share = float(depth[sel].mean() / R) if n else float('nan')
        report['classes'][name] = dict(tokens=n, fraction=n / depth.size, taken=share, lift=share / taken
                                       if taken > 0 else float('nan'),
                                       loss={m: float(l[sel].mean()) if n else float('nan') for m, l in losses.items()})
    for d in range(R + 1):
        sel = depth == d
        n = int(sel.sum())
        report['by_depth'].append(dict(depth=d, tokens=n,
                                       loss={m: float(l[sel].mean()) if n else float('nan') for m, l in losses.items()},
                                       loss_se={m: float(l[sel].std() / np.sqrt(n)) if n > 1 else float('nan')
                                                for m, l in losses.items()}))
    for m, l in losses.items():
        report['correlation'][m] = {k: dict(zip(('value', 'low', 'high'), v))
                                    for k, v in correlations(depth, l, n_boot, seed).items()}
    return report


def skip_lines(report, primary):
    """The report in a few lines of text: the correlations, then each class."""
    lines = [f"routed depth over {report['tokens']:,} validation positions ({report['routed_layers']} routed layers, "
             f"{report['taken']:.3f} of the slots taken)"]
    for m, c in report['correlation'].items():
        lines.append(f"  against the loss under {m}{' (primary)' if m == primary else ''}: " + ', '.join(
            f"{k} {v['value']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]" for k, v in c.items()))
    for name, c in report['classes'].items():
        lines.append(f"  {name:<24} {c['fraction']:6.1%} of tokens, taken {c['taken']:.3f} (x{c['lift']:.2f}), "
                     f"loss under {primary} {c['loss'][primary]:.3f}")
    return lines


def draw_skip(path, report, primary, title):
    """Two panels: the mean loss under `primary` at each routed depth (with its token count), and the share of each
    token class that the routed layers take beside the overall share."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, (ax_d, ax_c) = plt.subplots(1, 2, figsize=(12, 4.2))
    rows = [r for r in report['by_depth'] if r['tokens']]
    ax_d.errorbar([r['depth'] for r in rows], [r['loss'][primary] for r in rows],
                  yerr=[r['loss_se'][primary] for r in rows], fmt='o-', color='#225ea8', capsize=3)
    for r in rows:
        ax_d.annotate(f"{r['tokens']:,}", (r['depth'], r['loss'][primary]), textcoords='offset points',
                      xytext=(6, 4), fontsize=7)
    ax_d.set_xticks([r['depth'] for r in rows])
    c = report['correlation'][primary]['spearman']
    ax_d.set_xlabel(f"routed depth (of {report['routed_layers']} routed layers; numbers: tokens)")
    ax_d.set_ylabel('mean loss under the dense run (bars: standard error)')    # its name, long, goes in the title
    ax_d.set_title(f"dense run: {primary}\nSpearman {c['value']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]", fontsize=9,
                   loc='left')
    names = list(report['classes'])
    cl = report['classes']
    ax_c.bar(range(len(names)), [cl[n]['taken'] for n in names], color='#225ea8')
    ax_c.axhline(report['taken'], color='k', ls='--', lw=1, label=f"all tokens {report['taken']:.3f}")
    ax_c.set_xticks(range(len(names)), [f"{n}\n{cl[n]['fraction']:.1%} of tokens" for n in names], fontsize=8)
    ax_c.set_ylabel('share of its (token, routed layer) slots taken')
    ax_c.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def skip_main(cfg):
    """--skip RUN [--dense RUN]: the report on the run's own validation windows, skip.json, skip.png and the routing
    picture of the first block_size tokens of its validation split (snippet.png)."""
    from data.tokenizers import from_meta
    model, x, y, ckpt = load_run_model(cfg.skip)
    if not model.routed_layers():
        refuse(f"{cfg.skip} has no routed layer")
    if not 0 <= cfg.snippet < len(x):                   # refused before anything is written
        refuse(f"--snippet={cfg.snippet}: the run evaluates on windows 0..{len(x) - 1}")
    name = os.path.basename(os.path.normpath(cfg.skip))
    with torch.no_grad():
        own = routed_pass(model, x, y)
    depth, R = own['mask'].sum(0), len(own['layers'])                                    # (B, T), R
    losses = {name: own['loss']}
    if cfg.dense:
        dense, xd, yd, _ = load_run_model(cfg.dense)
        if not torch.equal(x, xd):
            refuse(f"{cfg.dense} evaluates on other windows than {cfg.skip} (another dataset or block_size)")
        dense_name = os.path.basename(os.path.normpath(cfg.dense))
        with torch.no_grad():
            losses = {dense_name: routed_pass(dense, xd, yd)['loss'], **losses}
    primary = next(iter(losses))                                                        # the dense run's when given
    scheme = cfg.classes if cfg.classes != 'auto' else ('code' if ckpt['config'].get('dataset') == 'pycode'
                                                        else 'prose')
    _, decode = from_meta(ckpt['meta'])
    classes = class_table(model.config.vocab_size, decode, scheme)[x.cpu().numpy()]      # (B, T)
    report = skip_report(depth, classes, CLASSES[scheme], R, losses, cfg.boot, cfg.seed)
    report.update(run=name, primary=primary, scheme=scheme)
    print('\n'.join(skip_lines(report, primary)))
    os.makedirs(cfg.out, exist_ok=True)
    with open(os.path.join(cfg.out, 'skip.json'), 'w') as f:
        json.dump(report, f, indent=1)
    draw_skip(os.path.join(cfg.out, 'skip.png'), report, primary,
              f"{name}: what the routed layers take ({scheme} classes), causal routing, {report['tokens']:,} "
              f"validation positions")
    print(f"wrote {cfg.out}/skip.json, skip.png")
    write_routing(os.path.join(cfg.out, 'snippet.png'), model, x[cfg.snippet].tolist(), decode,
                  f"{name}, validation window {cfg.snippet}")
    return 0


def refuse(message):
    """Refuse input this script cannot use: one line on stderr, exit 2 (main, through configurator.run_main)."""
    raise Refused(message)


def routing_plot(argv):
    runs = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=runs)
    cfg.runs = runs
    if cfg.skip and cfg.runs:
        raise UserError('--skip takes one run folder, not RUN_DIRS as well')
    if cfg.dense and not cfg.skip:
        raise UserError('--dense goes with --skip')
    if not cfg.skip and not cfg.runs:
        raise UserError('give RUN_DIRS or --skip RUN (python tools/routing_plot.py RUN_DIRS... --out DIR, or '
                        '--skip RUN [--dense RUN] --out DIR)')
    if not cfg.out:
        raise UserError('--out DIR is required: the folder for ' + ('skip.json, skip.png and snippet.png' if cfg.skip
                                                                     else 'overlap.json and overlap.png'))
    if cfg.classes not in ('auto', *CLASSES):
        raise UserError(f"--classes={cfg.classes!r}: expected {' | '.join(('auto', *CLASSES))}")
    if cfg.boot < 1:
        raise UserError(f"--boot={cfg.boot}: expected at least 1 bootstrap resample")
    if cfg.seed < 0:
        raise UserError(f"--seed={cfg.seed}: expected a seed >= 0")
    if cfg.skip:
        if not os.path.isfile(os.path.join(cfg.skip, 'ckpt.pt')):
            refuse(f"{cfg.skip} has no ckpt.pt")
        if cfg.dense and not os.path.isfile(os.path.join(cfg.dense, 'ckpt.pt')):
            refuse(f"{cfg.dense} has no ckpt.pt")
    return skip_main(cfg) if cfg.skip else overlap_main(cfg)


def main(argv=None):
    return run_main('tools/routing_plot.py', routing_plot, argv)      # bad input: one line on stderr, exit 2


if __name__ == '__main__':
    sys.exit(main())
