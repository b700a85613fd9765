"""
routing_plot.py: which routed layers took which token of one text, in causal routing, drawn as routing.png.
sample.py calls it with --show_routing=True:

    python sample.py --out_dir=out --show_routing=True          # the first sample's routing, into out/routing.png
    python sample.py --out_dir=out --show_routing=True --start=FILE:text.txt --max_new_tokens=0 --num_samples=1

Two views of the same tokens: (1) the text, each token on a background coloured by its realised routed depth (how
many routed layers took it); (2) a (routed layers x positions) grid, dark where a layer took a token.
`routed_depth` is the model's side and `draw_routing` only draws what it returns, so a test can check the picture's
numbers against an independent forward. Only block_size tokens fit one forward: the first ones are drawn, and the
title and describe's first line say how many of the text's tokens that is.

Run as a script it asks of trained runs whether their routed layers take the same tokens (layer_overlap):

    python routing_plot.py results/cpu_lr/runs/xmod_* --out DIR      # DIR/overlap.json, overlap.png
"""
import os
import sys

import numpy as np
import torch

from xmod import layer_kinds


@torch.no_grad()
def routed_depth(model, ids):
    """One forward of the first min(len(ids), block_size) token ids with causal routing (token t's route depends on
    tokens 0..t only, as when sampling). Returns a dict: ids (T,) the tokens drawn, layers [R] the routed layers'
    indices, mask (R, T) bool numpy (mask[j, t]: layer layers[j] took token t), depth (T,) int = mask.sum(0)."""
    T = min(len(ids), model.config.block_size)
    idx = torch.tensor(list(ids[:T]), dtype=torch.long, device=model.lm_head.weight.device)[None]   # (1, T)
    was_training = model.training
    model.eval()                                          # thresholds frozen, no dropout: what sampling uses
    _, _, aux = model(idx, routing='causal', return_aux=True)
    model.train(was_training)
    routed = [(l, a['mask'][0]) for l, (kind, a) in enumerate(zip(layer_kinds(model.config), aux['layers']))
              if kind == 'routed']                                                      # each mask (T,)
    layers = [l for l, _ in routed]
    mask = torch.stack([m for _, m in routed]).cpu().numpy() if routed else np.zeros((0, T), bool)   # (R, T)
    return dict(ids=idx[0].tolist(), layers=layers, mask=mask, depth=mask.sum(0))


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
    cells, grid_rows = [], []
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


# ----------------------------------------------------------------------------------------------------------------------
# do routed layers take the same tokens? (python routing_plot.py RUN_DIRS... --out DIR)

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
    layers = [l for l, kind in enumerate(layer_kinds(model.config)) if kind == 'routed']
    was_training = model.training
    model.eval()
    masks = {}
    for routing in ('topk', 'causal'):
        _, _, aux = model(idx, routing=routing, return_aux=True)
        masks[routing] = torch.stack([aux['layers'][l]['mask'] for l in layers])             # (R, B, T)
    model.train(was_training)
    routers = [model.transformer.h[l].router for l in layers]
    out = dict(layers=np.array(layers))
    for routing, m in masks.items():
        both = (m[:, None] & m[None]).sum(-1).float()                                          # (R, R, B)
        either = (m[:, None] | m[None]).sum(-1).float()
        out[f'jaccard_{routing}'] = (both / either.clamp_min(1)).mean(-1).cpu().numpy()
        out[f'rate_{routing}'] = m.float().mean((1, 2)).cpu().numpy()
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


def load_run_model(run_dir):
    """The GPT of a run folder's ckpt.pt and the fixed validation windows its run evaluated on (its eval_tokens)."""
    from run_folder import clean_state_dict, load_checkpoint
    from xmod import GPT, GPTConfig
    import train
    ckpt = load_checkpoint(os.path.join(run_dir, 'ckpt.pt'))
    model = GPT(GPTConfig(**ckpt['model_args']))
    model.load_state_dict(clean_state_dict(ckpt['model']))
    cfg = ckpt['config']
    folder = cfg.get('data_dir') or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', cfg['dataset'])
    data = train.open_split(folder, 'val')
    T = model.config.block_size
    starts = train.eval_starts(len(data), T, cfg.get('eval_tokens') or 0)
    x, _ = train.read_windows(data, starts, T, 'cpu')
    return model, x, ckpt


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


def overlap_main(argv=None):
    import argparse
    import glob
    import json
    p = argparse.ArgumentParser(description='Do the routed layers of trained runs take the same tokens? For each '
                                'run folder with a ckpt.pt: the Jaccard index of every pair of routed layers (top-k '
                                'and causal, on the run\'s own validation windows) and the routers\' weight cosine.')
    p.add_argument('runs', nargs='+', help='run folders or globs; folders without ckpt.pt or routed layers are '
                                           'passed over')
    p.add_argument('--out', required=True, help='folder for overlap.json and overlap.png')
    p.add_argument('--above', type=float, default=0.5, help='a pair overlapping more than this is called collapsed')
    cfg = p.parse_args(argv)
    dirs = sorted({d for pat in cfg.runs for d in (glob.glob(pat) or [pat])
                   if os.path.isfile(os.path.join(d, 'ckpt.pt'))})
    results = {}
    for d in dirs:
        model, x, ckpt = load_run_model(d)
        if 'routed' not in layer_kinds(model.config):
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
        print('routing_plot.py: error: no run folder with a ckpt.pt of a model with routed layers', file=sys.stderr)
        return 2
    os.makedirs(cfg.out, exist_ok=True)
    with open(os.path.join(cfg.out, 'overlap.json'), 'w') as f:
        json.dump({n: {k: np.asarray(v).tolist() for k, v in ov.items()} |
                   {'collapsed_causal': collapsed_pairs(ov, 'causal', cfg.above),
                    'collapsed_topk': collapsed_pairs(ov, 'topk', cfg.above)} for n, ov in results.items()},
                  f, indent=1)
    draw_overlap(os.path.join(cfg.out, 'overlap.png'), results)
    print(f"wrote {cfg.out}/overlap.json, overlap.png")
    return 0


if __name__ == '__main__':
    sys.exit(overlap_main())
