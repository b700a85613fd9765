"""cpu_small: the scaling-law sweep at laptop scale, about 80-90 minutes on 2 CPU cores (2 runs at a time, 1 thread
each). Char-level Shakespeare, width 128 for the X-MoD grid, context 128 unless said, one fixed validation set.

    python sweep.py sweeps/cpu_small.py
    python fit_law.py results/cpu_small/runs --out results/cpu_small --holdout "stride==8"

Every X-MoD point is FLOP-matched (within 2%) to a dense run of the same width, context and token budget whose depth
is the X-MoD point's active-equivalent depth (train.py: dense_layers, then n_layer fixed and capacity solved). The
capacities are the solved ones nearest to the grid's 0.125 / 0.25 / 0.5, not exactly those."""

name = 'cpu_small'
jobs = 2
M = 1_000_000
TOKENS_PER_ITER = 2048           # batch_size * block_size, the same at every context length

common = dict(dataset='shakespeare', n_head=4, learning_rate=2e-3, min_lr=2e-4, warmup_iters=50,
              weight_decay=0.1, dropout=0.0, eval_tokens=32768, device='cpu', compile=False)


def run(name, tokens=2 * M, block_size=128, seed=0, **kw):
    iters = tokens // TOKENS_PER_ITER
    return dict(name=name if seed == 0 else f'{name}_seed{seed}', max_tokens=tokens, block_size=block_size,
                batch_size=TOKENS_PER_ITER // block_size, eval_interval=max(1, iters // 4), seed=seed,
                n_embd=kw.pop('n_embd', 128), **kw)


def dense(n_layer, n_embd=128, tokens=2 * M, **kw):
    tag = f"{tokens / M:g}M" + (f"_T{kw['block_size']}" if 'block_size' in kw else '')
    return run(f'dense_L{n_layer}_d{n_embd}_{tag}', tokens, model='dense', n_layer=n_layer, n_embd=n_embd, **kw)


def xmod(stride, n_layer, dense_layers, tokens=2 * M, tag='', **kw):
    """n_layer > 0: total depth fixed, capacity solved for the FLOP match; n_layer=0: depth chosen too."""
    label = f"xmod_s{stride}_L{n_layer or 'auto'}_D{dense_layers}_{tokens / M:g}M{tag}"
    return run(label, tokens, model='xmod', stride=stride, n_layer=n_layer, dense_layers=dense_layers, **kw)


runs = [
    # first what answers the main question, so a partial sweep is already useful: the reference pair and its seeds
    dense(4), xmod(4, 12, 4),
    *[dense(4, seed=s) for s in (1, 2)], *[xmod(4, 12, 4, seed=s) for s in (1, 2)],
    # ablations of X-MoD's two training devices, on the reference point
    xmod(4, 12, 4, gate='plain', tag='_plaingate'),
    xmod(4, 12, 4, balance=0.0, tag='_nobalance'),
    # MoD (alternating, plain gate, no balancing) at the capacity FLOP matching allows against 4 dense layers
    run('mod_L6_D4_2M', model='mod', n_layer=6, dense_layers=4),     # c 0.367
    # MoE at matched active parameters (8 experts, top-2, hidden 2*n_embd)
    run('moe_L4_2M', model='moe', n_layer=4),
    # the X-MoD grid: stride {2, 4, 8} x capacity near {0.125, 0.25, 0.5}   (solved capacity in the comment)
    xmod(2, 5, 4),        # c 0.531
    xmod(4, 6, 4),        # c 0.531
    xmod(8, 11, 3),       # c 0.125
    xmod(8, 11, 4),       # c 0.250
    xmod(8, 7, 4),        # c 0.531
    xmod(4, 12, 5),       # c 0.250
    dense(3), dense(5),                                             # their other dense partners
    # context lengths 64 and 256 for the reference point (depth and capacity solved at each context)
    *[xmod(4, 0, 4, capacity=0.125, block_size=T, tag=f'_T{T}') for T in (64, 256)],
    *[dense(4, block_size=T) for T in (64, 256)],
    # the dense law: 3 widths x 2-3 budgets (width 128 at 2M is above)
    *[dense(4, d, t * M) for d in (64, 128) for t in (0.5, 1, 2) if (d, t) != (128, 2)],
    *[dense(4, 192, t * M) for t in (0.5, 1)],
    # added once the first 29 ran faster than planned: width 192 at 2M, stride 2 at c~0.28, a larger budget pair
    dense(4, 192, 2 * M), xmod(2, 8, 5), dense(4, 128, 4 * M), xmod(4, 12, 4, tokens=4 * M),
    # and then stride 2 at c~0.16 against 8 dense layers, with MoD in the same layout
    dense(8), xmod(2, 14, 8),       # c 0.164 (stride 2 cannot get nearer 0.125 below 8 dense layers)
    run('mod_L14_D8_2M', model='mod', n_layer=14, dense_layers=8),   # c 0.164, the layout of xmod_s2_L14_D8
]
# Cut from the first plan to fit the 90 minutes: contexts for a second grid point (sweeps/gpu_small.py has them).
