"""gpu_small: the cpu_small sweep at about 15x its compute, for one GPU (about an hour on one H100/H200-class GPU; not
yet measured). Char-level Shakespeare (4.5M training tokens, so the largest budgets repeat the data a few times),
width 256 for the X-MoD grid, context 256 unless said, bf16 autocast, torch.compile.

    python sweep.py sweeps/gpu_small.py
    python fit_law.py results/gpu_small/runs --out results/gpu_small --holdout "stride==8"

Every X-MoD point is FLOP-matched (within 2%) to a dense run of the same width, context and token budget whose depth
is the X-MoD point's active-equivalent depth (train.py: dense_layers, then n_layer fixed and capacity solved). The
capacities are the solved ones nearest to the grid's 0.125 / 0.25 / 0.5, not exactly those."""

name = 'gpu_small'
jobs = 1
M = 1_000_000
TOKENS_PER_ITER = 16384          # batch_size * block_size, the same at every context length

common = dict(dataset='shakespeare', n_head=8, learning_rate=1.5e-3, min_lr=1.5e-4, warmup_iters=100,
              weight_decay=0.1, dropout=0.0, eval_tokens=262144, device='cuda', compile=True)


def run(name, tokens=16 * M, block_size=256, seed=0, **kw):
    iters = tokens // TOKENS_PER_ITER
    return dict(name=name if seed == 0 else f'{name}_seed{seed}', max_tokens=tokens, block_size=block_size,
                batch_size=TOKENS_PER_ITER // block_size, eval_interval=max(1, iters // 4), seed=seed,
                n_embd=kw.pop('n_embd', 256), **kw)


def dense(n_layer, n_embd=256, tokens=16 * M, **kw):
    tag = f"{tokens / M:g}M" + (f"_T{kw['block_size']}" if 'block_size' in kw else '')
    return run(f'dense_L{n_layer}_d{n_embd}_{tag}', tokens, model='dense', n_layer=n_layer, n_embd=n_embd, **kw)


def xmod(stride, n_layer, dense_layers, tokens=16 * M, tag='', **kw):
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
    # MoD (alternating, plain gate, no balancing), the nearest capacity to 0.125 FLOP matching allows, and at 4
    run('mod_L14_D8_16M', model='mod', n_layer=14, dense_layers=8),   # c 0.164, the layout of xmod_s2_L14_D8
    run('mod_L6_D4_16M', model='mod', n_layer=6, dense_layers=4),     # c 0.367
    # MoE at matched active parameters (8 experts, top-2, hidden 2*n_embd)
    run('moe_L4_16M', model='moe', n_layer=4),
    # the X-MoD grid: stride {2, 4, 8} x capacity near {0.125, 0.25, 0.5}   (solved capacity in the comment)
    xmod(2, 14, 8),       # c 0.164 (stride 2 cannot get nearer 0.125 below 8 dense layers)
    xmod(2, 8, 5),        # c 0.281
    xmod(2, 5, 4),        # c 0.531
    xmod(4, 12, 5),       # c 0.250
    xmod(4, 6, 4),        # c 0.531
    xmod(8, 11, 3),       # c 0.125
    xmod(8, 11, 4),       # c 0.250
    xmod(8, 7, 4),        # c 0.531
    dense(3), dense(5), dense(8),                                   # their other dense partners
    # context lengths 64 and 256 for two grid points (depth and capacity solved at each context)
    *[xmod(4, 0, 4, capacity=0.125, block_size=T, tag=f'_T{T}') for T in (128, 512)],
    *[xmod(8, 0, 4, capacity=0.25, block_size=T, tag=f'_T{T}') for T in (128, 512)],
    *[dense(4, block_size=T) for T in (128, 512)],
    # the dense law: 3 widths x 3 budgets (width 256 at 16M is above), and a 32M budget at width 256
    *[dense(4, d, t * M) for d in (128, 256, 384) for t in (4, 8, 16) if (d, t) != (256, 16)],
    dense(4, 256, 32 * M),
    # a larger budget, held out by fit_law --holdout "tokens==max_tokens_all"
    xmod(4, 12, 4, tokens=32 * M),
]
