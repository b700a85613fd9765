"""gpu_ladder: the compute ladder, Delta = X-MoD - dense from about 1e13 to 2.5e15 training FLOPs per run, in one
call of at most 6 minutes on one H200 (sweeps/gpu_ladder.sh runs it and its analysis, law/ladder.py; docs/ladder.md).

Arms, each FLOP-matched to the 4-layer dense model of its width (within 2%): dense (4 layers), X-MoD stride 4
(12 layers, c 0.125 at width 128, 0.117 wider) and X-MoD stride 2 (MoD's layout: 6 layers, c 0.367 to 0.344).
Widths 128, 256, 512 at T=128, head dim 32. Every run takes 488 steps; the batch grows with width (4096 tokens a
step at width 128, x4 per doubling) so that tokens per active parameter stay 2.54 (width 128's 2M tokens over 0.79M
active parameters, the CPU studies' reference point): 2M, 8M, 32M tokens. Cosine to lr / 10 after 50 warmup steps,
evaluated at steps 0, 244 and 488; bf16 autocast, eager. Peak rates, one per width except at 256:
  128: 4e-3, both arms' tuned rate at width 128 (results/cpu_lr: the grid 1e-3 to 8e-3, 5 seeds);
  256: 2e-3 and 2.83e-3 (4e-3 x 128 / width and sqrt(2) times that): on the first H200 run the higher one was
       better by 0.007 for dense and 0.008 for X-MoD s2, a tie for s4, so the rate rule chooses here;
  512: 1e-3 (4e-3 x 128 / width): on the first H200 run 1e-3 and 1.41e-3 tied for every arm (dense 1.4130 against
       1.4114, two seeds; the X-MoD runs within 0.002 at the step they reached).
Seeds 0-3 at widths 128 and 256, 0-1 at 512: 6 + 24 + 12 = 42 runs.

    python sweeps/gpu_ladder.py --dry_run               # the runs and their FLOPs
    bash sweeps/gpu_ladder.sh "$OUT"                    # the runs and their analysis, one GPU, 6 minutes
    GPU_LADDER_SMOKE=1 bash sweeps/gpu_ladder.sh /tmp/ladder    # the same at toy sizes on the CPU (a test runs it)

Two phases (GPU_LADDER_PHASE; sweeps/gpu_ladder.sh runs them one after the other): `top`, the 6 width-512 runs alone
on the GPU, then `rest`, widths 256 and 128 (in that order, seed by seed), 16 at once.

Sizing, from the first H200 run (results/gpu_ladder: 82935b4, 60 runs, 20 at once; it finished 27 in its 320 s).
Training FLOPs (sweeps/sweep.py --dry_run; 3 x forward FLOPs/token x tokens):
  width 512: 2.53e15 a run x 6 = 1.52e16    width 256: 1.65e14 x 24 = 3.95e15    width 128: 1.11e13 x 12 = 1.3e14
  in all 1.92e16 (the first run: 3.46e16). At the 8.3e13 FLOP/s all 20 runs logged together over that sweep, 231 s
  of GPU (the first run: 417 s).
Runs on one GPU time-share it: with 20 at once a width-512 X-MoD s4 run logged 70k tokens/s (5.6e12 FLOP/s) and
reached step 244 of 488 in 239 s, so its work is about 478 s / 20 = 24 s of the whole GPU; dense 292 / 20 = 14.6 s,
X-MoD s2 370 / 20 = 18.5 s (step 366 at 278 s). The first run's 12 width-512 runs, 20 at once, were its long pole.
  top: 2 seeds x (14.6 + 18.5 + 24) = 114 s, plus about 15 s for 6 processes to start: about 130 s. (The 12
    width-512 runs logged 8.6e13 FLOP/s on 12/20 of the GPU's time, 1.4e14 on all of it: 1.52e16 in 108 s.)
    Together the 6 runs share the GPU to their end, so the longest, X-MoD s4, ends the phase, not later.
  rest: a run's time with 20 at once, measured, with the 13-15 s between a slot freeing and its first step:
    dense / s2 / s4 at 256 74 / 100 / 128 s; at 128 dense 30 s, X-MoD about 90-100 s (started last, cut: s2 reached
    step 122 in 18 s, s4's step-0 evaluation took 12 s). 8 x (74 + 100 + 128) + 4 x (30 + 90 + 100) = 3,300 run-
    seconds on 20 slots: 165 s; on 16 (one CPU core a run: the first run put 20 on 16 cores) each run gets 20/16 of
    the GPU's time, the same 165 s. Two evaluations fewer per run (0, 244, 488 instead of every 122) are not counted.
  130 + 165 = 295 s against the 320 s the script gives the two phases (360 less 10 s of kill grace and 30 s of
  analysis; the first run's analysis and packing took 5 s). A phase cut at the deadline leaves its finished runs,
  which the analysis reads; the last to start, so the first cut, are width 128's seed-3 runs.
The 512 runs use 2 micro-batches of 256 x 128 tokens (gradient accumulation): 4.4 (dense) to 8.5 GB (X-MoD s4) of
saved activations a run in bf16 (bench.saved_bytes, measured on the CPU), far below the H200's 139 GiB.
"""
import os
import runpy
import sys

name = 'gpu_ladder'
HERE = os.path.dirname(os.path.abspath(__file__))
SMOKE = os.environ.get('GPU_LADDER_SMOKE', '0') == '1'      # toy sizes on the CPU: checks the pipeline, not a GPU
small = runpy.run_path(os.path.join(HERE, 'cpu_small.py'))
PHASE = os.environ.get('GPU_LADDER_PHASE', '')   # top: the widest width's runs; rest: the others; '': all
PER_GPU = dict(top=6, rest=16)  # sweeps/sweep.py --gpus=0 --per_gpu=PER_GPU[phase] (sweeps/gpu_ladder.sh)
jobs = 2                # the CPU smoke: 2 at a time
BASE_LR = 4e-3          # the tuned rate of both arms at width 128 (results/cpu_lr)

if SMOKE:
    WIDTHS, SEEDS, STEPS, T, HEAD = (24, 48), {24: (0, 1), 48: (0, 1)}, 8, 32, 8
    TWO_RATES = (24,)
    ARMS = ('dense', 'xmod_s4')                          # 12 runs: both rate rules, the pairing, the slope
    common = dict(dataset='shakespeare', warmup_iters=2, weight_decay=0.1, dropout=0.0, eval_tokens=1024,
                  device='cpu', compile=False, dtype='float32', threads=1)
else:
    WIDTHS, SEEDS, STEPS, T, HEAD = (128, 256, 512), {128: (0, 1, 2, 3), 256: (0, 1, 2, 3), 512: (0, 1)}, 488, 128, 32
    TWO_RATES = (256,)                                   # the widths that run two rates (docstring)
    ARMS = ('dense', 'xmod_s4', 'xmod_s2')
    common = dict(dataset='shakespeare', warmup_iters=50, weight_decay=0.1, dropout=0.0, eval_tokens=65536,
                  device='cuda', compile=False, dtype='bfloat16')
if os.environ.get('GPU_LADDER_DATA'):      # a folder with train.bin, val.bin, meta.pkl instead (tests)
    common['data_dir'] = os.environ['GPU_LADDER_DATA']


def rates(width):
    """The peak rates at a width: BASE_LR x 128 / width, and at the widths of TWO_RATES sqrt(2) times that too."""
    lr = BASE_LR * (WIDTHS[0] / width)
    return (lr, lr * 2 ** 0.5) if width in TWO_RATES else (lr,)


def arms(width):
    """(arm, the builder of its run at this width): dense, X-MoD stride 4 and stride 2, FLOP-matched."""
    rows = T * 32 * (width // WIDTHS[0]) ** 2             # tokens a step: x4 per doubling of width
    accum = 2 if width >= 512 else 1                      # 2 micro-batches at 512: 4-9 GB of activations a run
    run, dense, xmod = small['builders'](tokens_per_iter=rows, width=width, tokens=rows * STEPS, block_size=T)
    kw = dict(n_head=width // HEAD, gradient_accumulation_steps=accum)
    return {'dense': lambda **k: dense(4, **kw, **k),
            'xmod_s4': lambda **k: xmod(4, 12, 4, tag=f'_d{width}', **kw, **k),
            'xmod_s2': lambda **k: xmod(2, 6, 4, tag=f'_d{width}', **kw, **k)}


def ladder_run(width, arm, lr, seed):
    r = arms(width)[arm](learning_rate=lr, min_lr=lr / 10, seed=seed)
    if r['gradient_accumulation_steps'] > 1:               # builders size batch_size for one micro-batch a step
        r['batch_size'] //= r['gradient_accumulation_steps']
    r['eval_interval'] = max(1, STEPS // 2)              # steps 0, STEPS / 2, STEPS: the mid point and the end
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = f'{base}_lr{lr:.3g}' + (f'_seed{seed_part}' if seed_part else '')
    return r


# widest first, seed by seed: a phase cut at its deadline loses the last seeds of its narrowest width
runs = [ladder_run(w, arm, lr, seed) for w in sorted(WIDTHS, reverse=True) for seed in SEEDS[w]
        for lr in rates(w) for arm in ARMS]
if PHASE not in ('', 'top', 'rest'):
    raise ValueError(f"GPU_LADDER_PHASE={PHASE!r}: top, rest or empty (all)")
if PHASE:       # top: the widest width alone on the GPU (its runs are the long pole); rest: the others after it
    runs = [r for r in runs if (r['n_embd'] == max(WIDTHS)) == (PHASE == 'top')]


if __name__ == '__main__':          # python sweeps/gpu_ladder.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
