"""gpu_ladder: the compute ladder, Delta = X-MoD - dense from about 1e13 to 2.5e15 training FLOPs per run, in one
call of at most 6 minutes on one H200 (sweeps/gpu_ladder.sh runs it and its analysis, law/ladder.py; docs/ladder.md).

Arms, each FLOP-matched to the 4-layer dense model of its width (within 2%): dense (4 layers), X-MoD stride 4
(12 layers, c 0.125 at width 128, 0.117 wider) and X-MoD stride 2 (MoD's layout: 6 layers, c 0.367 to 0.344).
Widths 128, 256, 512 at T=128, head dim 32. Every run takes 488 steps; the batch grows with width (4096 tokens a
step at width 128, x4 per doubling) so that tokens per active parameter stay 2.54 (width 128's 2M tokens over 0.79M
active parameters, the CPU studies' reference point): 2M, 8M, 32M tokens. Peak rates: 4e-3 x 128 / width and
sqrt(2) times that (a half-octave apart), min_lr = lr / 10, cosine, warmup 50 steps; bf16 autocast, eager.
Seeds 0-3 at widths 128 and 256, seeds 0-1 at 512 (what fits, below); 60 runs.

    python sweeps/gpu_ladder.py --dry_run               # the runs and their FLOPs
    bash sweeps/gpu_ladder.sh "$OUT"                             # the runs and their analysis, one GPU, 6 minutes
    GPU_LADDER_SMOKE=1 bash sweeps/gpu_ladder.sh /tmp/ladder    # the same at toy sizes on the CPU (a test runs it)

Sizing (sweeps/sweep.py --dry_run's FLOPs; 3 x forward FLOPs/token x tokens):
  width 128: 1.11e13 a run x 24 = 2.7e14      width 256: 1.65e14 x 24 = 3.96e15      width 512: 2.53e15 x 12 = 3.0e16
(4 seeds at 512 would be 24 runs, 6.05e16; width 768 at the same tokens per parameter 1.26e16 a run: neither fits.)
Packing and throughput model, from the H200's measurements (15 width-128 reference runs at once, float32 eager,
977 steps each, in about 75 s: launch-bound, about 65 ms a step per run with 15 on 16 cores; one dense run alone
14 ms a step in bf16): runs of one GPU time-share it, so (a) the GPU-bound work adds up: the 512 runs' 3.0e16 FLOPs
at an assumed 2e14 model FLOP/s all runs together (20% of the H200's 989 TFLOP/s bf16 peak, eager, not measured;
gpu_check.sh's bench_768 measures one model's MFU) take 150 s, the smaller widths' 4.2e15 another 21 s; (b) the
launch-bound runs need CPU slots: 48 runs x (488 steps x 65 ms + 15 s of start and evaluation) = 2,240 slot-
seconds, 186 s on the 12 slots the 512 runs leave of PER_GPU = 20. The 512 runs (the longest) come first in the file
(sweeps/sweep.py starts runs in its order), so the GPU-bound and the launch-bound work overlap: about max(171, 186) +
15 s of start = 200 s for the sweep, 30 s for the analysis and packing, against the 320 s the script gives the sweep
(360 less 10 s of kill grace and 30 s of analysis). At 1.2e14 FLOP/s (12% MFU) the sweep would need about 300 s; below
that the deadline stops it, and the analysis reads the runs that finished (run.json's finished) and says which.
The 512 runs use 2 micro-batches of 256 x 128 tokens (gradient accumulation): the tensors saved for backward in bf16
(bench.saved_bytes, measured on the CPU) are 4.4 GB for dense, 8.5 for X-MoD s4 and 5.8 for s2 a run, 75 GB for the
12 at once, with the smaller runs and 20 CUDA contexts beside them about 100 GB of the H200's 139 GiB.
"""
import os
import runpy
import sys

name = 'gpu_ladder'
HERE = os.path.dirname(os.path.abspath(__file__))
SMOKE = os.environ.get('GPU_LADDER_SMOKE', '0') == '1'      # toy sizes on the CPU: checks the pipeline, not a GPU
small = runpy.run_path(os.path.join(HERE, 'cpu_small.py'))
PER_GPU = 20            # sweeps/sweep.py --gpus=0 --per_gpu=PER_GPU (sweeps/gpu_ladder.sh)
jobs = 2                # the CPU smoke: 2 at a time
BASE_LR = 4e-3          # the tuned rate of both arms at width 128 (results/cpu_lr)

if SMOKE:
    WIDTHS, SEEDS, STEPS, T, HEAD = (24, 48), {24: (0, 1), 48: (0, 1)}, 8, 32, 8
    ARMS = ('dense', 'xmod_s4')                          # 16 runs: the rule, the pairing and the slope, quickly
    common = dict(dataset='shakespeare', warmup_iters=2, weight_decay=0.1, dropout=0.0, eval_tokens=1024,
                  device='cpu', compile=False, dtype='float32', threads=1)
else:
    WIDTHS, SEEDS, STEPS, T, HEAD = (128, 256, 512), {128: (0, 1, 2, 3), 256: (0, 1, 2, 3), 512: (0, 1)}, 488, 128, 32
    ARMS = ('dense', 'xmod_s4', 'xmod_s2')
    common = dict(dataset='shakespeare', warmup_iters=50, weight_decay=0.1, dropout=0.0, eval_tokens=65536,
                  device='cuda', compile=False, dtype='bfloat16')
if os.environ.get('GPU_LADDER_DATA'):      # a folder with train.bin, val.bin, meta.pkl instead (tests)
    common['data_dir'] = os.environ['GPU_LADDER_DATA']


def rates(width):
    """The two peak rates at a width, a half-octave apart: BASE_LR x 128 / width, and sqrt(2) times that."""
    lr = BASE_LR * (WIDTHS[0] / width)
    return (lr, lr * 2 ** 0.5)


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
    r['eval_interval'] = max(1, STEPS // 4)
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = f'{base}_lr{lr:.3g}' + (f'_seed{seed_part}' if seed_part else '')
    return r


# the widest first: its runs are GPU-bound and longest, and the launch-bound smaller runs fill the slots beside them
runs = [ladder_run(w, arm, lr, seed) for w in sorted(WIDTHS, reverse=True) for seed in SEEDS[w]
        for lr in rates(w) for arm in ARMS]


if __name__ == '__main__':          # python sweeps/gpu_ladder.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
