"""
routing_plot.py: which routed layers took which token of one text, in causal routing, drawn as routing.png.
sample.py calls it with --show_routing=True:

    python sample.py --out_dir=out --show_routing=True          # the first sample's routing, into out/routing.png
    python sample.py --out_dir=out --show_routing=True --start=FILE:text.txt --max_new_tokens=0 --num_samples=1

Two views of the same tokens: (1) the text, each token on a background coloured by its realised routed depth (how
many routed layers took it); (2) a (routed layers x positions) grid, dark where a layer took a token.
`routed_depth` is the model's side and `draw_routing` only draws what it returns, so a test can check the picture's
numbers against an independent forward. Only block_size tokens fit one forward: the first ones are drawn.
"""
import numpy as np
import torch


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
    routed = [(l, a['mask'][0]) for l, a in enumerate(aux['layers']) if 'mask' in a]   # each mask (T,)
    layers = [l for l, _ in routed]
    mask = torch.stack([m for _, m in routed]).cpu().numpy() if routed else np.zeros((0, T), bool)   # (R, T)
    return dict(ids=idx[0].tolist(), layers=layers, mask=mask, depth=mask.sum(0))


def describe(routing, capacity):
    """A few lines about the drawn depth: its spread against c*R (what balancing aims at) and each layer's rate."""
    depth, mask, layers = routing['depth'], routing['mask'], routing['layers']
    R, T = mask.shape
    counts = np.bincount(depth, minlength=R + 1)
    return '\n'.join([
        f"routed depth over {T} tokens ({R} routed layers): mean {depth.mean():.2f} (c*R = {capacity * R:.2f}), "
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


def draw_routing(path, routing, pieces, title, width=100, dpi=100):
    """routing: routed_depth's dict; pieces: each drawn token's text (decoded alone). Writes a PNG at path."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    depth, mask, layers = routing['depth'], routing['mask'], routing['layers']
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
    if T <= 160:                                          # the tokens themselves, when they fit
        ax_grid.set_xticks(range(T))
        ax_grid.set_xticklabels([shown(p)[:3] for p in pieces], fontsize=6, family='monospace')
        ax_grid.tick_params(axis='x', length=0)
    ax_grid.set_xlabel('position (dark: the layer took the token)')
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
