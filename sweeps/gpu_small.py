"""gpu_small: the cpu_small sweep (same plan, see sweeps/cpu_small.py) at about 34x its compute: 38 runs, 1.44e16
training FLOPs (`python sweep.py sweeps/gpu_small.py --dry_run`; cpu_small: 4.29e14). The time depends on the
throughput these small models sustain on a GPU, not measured yet (sweeps/gpu_check.sh's per_gpu step gives it in
tokens/s): at 1e14 FLOP/s, about 10% of an H100's bf16 peak, 2.4 minutes of training, plus the evaluations.
Char-level Shakespeare (4.5M training tokens, so the largest budgets repeat the data a few times), width 256 for the
X-MoD grid, context 256 unless said, contexts 128 and 512 for two grid points, bf16 autocast, torch.compile.

    python sweep.py sweeps/gpu_small.py                          # one GPU; --gpus=0,1,2,3 --per_gpu=2 for more
    python sweep.py sweeps/gpu_small.py --commands                # for a Slurm array (sweeps/slurm_array.sh)
    python fit_law.py results/gpu_small/runs --out results/gpu_small --holdout "stride==8"
"""
import os
import runpy

name = 'gpu_small'
jobs = 1
M = 1_000_000

common = dict(dataset='shakespeare', n_head=8, learning_rate=1.5e-3, min_lr=1.5e-4, warmup_iters=100,
              weight_decay=0.1, dropout=0.0, eval_tokens=262144, device='cuda', compile=True)

plan = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cpu_small.py'))['plan']
runs = plan(tokens_per_iter=16384, width=256, tokens=16 * M, block_size=256, contexts=(128, 512),
            widths=(128, 256, 384), budgets=(4 * M, 8 * M, 16 * M), context_points=2)
