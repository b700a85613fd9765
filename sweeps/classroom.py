"""classroom: the cpu_small study cut down to what a class can run in one sitting: 13.8 minutes measured on 2 CPU
cores (2 runs at a time, 1 thread each), and 15 s for the fit. Width 64 instead of 128 and 1M
training tokens instead of 2M, chosen from the runs of cpu_small's `plan` by name:

  - the dense law: 4-layer dense models at widths 32 / 64 / 96 x budgets 0.5M / 1M, and 2M at width 64 (7 runs,
    3 sizes N, 3 budgets D)
  - the relative law: X-MoD FLOP-matched to the 4-layer dense model at strides 2, 4 and 8, and at context 256
    (each with its dense partner), so that all three terms of the law are constrained
  - seed noise: the reference pair (stride 4, 12 layers) at seeds 0, 1, 2; the same pair at twice the tokens
  - one ablation: the reference X-MoD with MoD's plain gate

    python sweeps/classroom.py --out=my_results/classroom/runs
    python fit_law.py my_results/classroom/runs --out my_results/classroom
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # sweeps/: the runner and the shared recipe
from recipe import common, plan  # noqa: E402,F401  (common: the settings sweep.py gives every run)

name = 'classroom'
jobs = 2
M = 1_000_000

# solved capacities at width 64, T=128 (train.py prints them): s4 L12 0.141, s2 L5 0.563, s4 L6 0.563, s8 L11 0.273;
# at T=256, s4 chooses 12 layers at 0.164
KEEP = {
    'dense_L4_d64_1M', 'xmod_s4_L12_D4_1M',                                   # the reference pair
    'dense_L4_d64_1M_seed1', 'xmod_s4_L12_D4_1M_seed1',
    'dense_L4_d64_1M_seed2', 'xmod_s4_L12_D4_1M_seed2',
    'xmod_s4_L12_D4_1M_plaingate',
    'xmod_s2_L5_D4_1M', 'xmod_s4_L6_D4_1M', 'xmod_s8_L11_D4_1M',            # strides and capacities
    'xmod_s4_Lauto_D4_1M_T256', 'dense_L4_d64_1M_T256',                      # a second context length
    'dense_L4_d64_2M', 'xmod_s4_L12_D4_2M',                                   # twice the tokens
    *[f'dense_L4_d{d}_{b}M' for d in (32, 64, 96) for b in ('0.5', '1')],    # the dense law, with d64 at 2M
}
runs = [r for r in plan(tokens_per_iter=2048, width=64, tokens=M, block_size=128, contexts=(256,),
                        widths=(32, 64, 96), budgets=(M // 2, M), context_points=1)
        if r['name'] in KEEP]
missing = KEEP - {r['name'] for r in runs}
assert not missing, f"cpu_small's plan no longer makes {sorted(missing)}: update KEEP"


if __name__ == '__main__':          # python sweeps/classroom.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    code = sweep.main([__file__] + sys.argv[1:])
    if code == 0 and not {'--dry_run', '--commands'} & {a.split('=')[0] for a in sys.argv[1:]}:
        # what the fit of these runs rests on, where a class reads it (fit_law.py's summary.md says it too)
        print(f"classroom: every run shares one peak learning rate, {common['learning_rate']:g}, untuned per arm: that "
              f"favours X-MoD, so the fit's Delta is not the study's answer (at each arm's tuned rate X-MoD does not "
              f"beat dense: tutorial chapter 12)")
    sys.exit(code)
