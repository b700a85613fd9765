"""gpu_ladder: the core curves on one GPU. Does sparse depth start to pay as compute grows? Dense, X-MoD stride 4 and
MoD's layout with X-MoD's gate (stride 2), FLOP-matched, at three compute-optimal rungs spanning 2 decades of training
FLOPs, on Python source that no rung repeats (data/pycode: sympy's .py files, byte-level, 25.0M training tokens).
docs/ladder.md says why each number is what it is; law/ladder.py reads the runs.

    python sweeps/gpu_ladder.py --dry_run      # the rungs, what a prior holds, what is left, est. seconds H100/H200
    bash sweeps/gpu_window.sh "$OUT"           # one GPU window: the missing runs, then speed rows (9 minutes)
    GPU_LADDER_PLAN=full python sweeps/sweep.py sweeps/gpu_ladder.py --gpus=0 --per_gpu=16    # an afternoon
    GPU_LADDER_PLAN=reference python sweeps/sweep.py sweeps/gpu_ladder.py --gpus=0 --per_gpu=15

Knobs (environment variables, read when the file is read; docs/ladder.md lists them with the window script's):
  GPU_LADDER_PLAN   window (default): the ladder one window holds; full: more rungs, seeds and rates (an afternoon);
                    reference: the 72-run replication of the CPU panel's reference point (width 128, Shakespeare)
  GPU_LADDER_RUNS   the folder of run folders the plan reads (seed-0 rates, kept steps): sweep.py's --out; default
                    results/<name>/runs
  GPU_LADDER_PRIOR  --dry_run: folders of earlier windows (runs.tar.gz each) whose finished runs count as done;
                    default every results/gpu_ladder/windows/*/
  GPU_LADDER_SMOKE  1: toy sizes on the CPU (the tests; checks the pipeline, not a GPU)
  GPU_LADDER_DATA   a folder with train.bin, val.bin, meta.pkl instead of data/<dataset> (tests)

The window plan, per rung (width w, 4 dense layers at head dimension 16, T=128; tokens D = 35 x the dense model's
active parameters, rounded to 4 x the tokens a step, so that no rung passes over more than 0.85 of the corpus):
  - each arm at seed 0 on two peak rates, r(w) = 4e-3 x 128 / w (the rate pycode and Shakespeare tuned at widths 64
    and 128 on the CPU, 1/width between them) and 2 r(w) (the larger batches here may take more);
  - seeds 1 and 2 at the rate seed 0 found better, once both seed-0 runs of that arm and rung have finished (this file
    is read again before each start: sweeps/sweep.py);
  - every run warmup-stable-decay (WSD, the last 20% cooling to lr / 10), no branches (beside 15 other runs a
    branch's 15-second process start costs more than its training).
The full plan (GPU_LADDER_PLAN=full): widths 32, 48, 64, 80, 112; seed 0 on four rates (r(w) x 1/sqrt 2, 1, sqrt 2,
2); seeds 1-5; and every run keeping the steps where the D/4 and D/2 budgets' cooldowns start, a branch from each
cooling down to its budget (0.05 D and 0.1 D of extra training): 3 budgets a width, an (N, D) grid per arm from which
its loss-against-compute frontier is read. Runs are listed in the order a cut sweep loses least by: branches first
(as soon as their step is kept), then seed 0 of the widest rung down, each rung's waiting seeds as they can start.

Time (estimate(): an event simulation, 16 runs sharing the GPU equally, each run's work = its training tokens x the
whole-GPU seconds a token cost in the first H200 window, plus STARTUP_S a run; docs/ladder.md).
"""
import glob
import json
import math
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
import xmod  # noqa: E402  (GPTConfig, flops_per_token: the plan's sizes and FLOPs without a run)

M = 1_000_000
SMOKE = os.environ.get('GPU_LADDER_SMOKE', '0') == '1'
PLAN = os.environ.get('GPU_LADDER_PLAN', 'window')
if PLAN not in ('window', 'full', 'reference'):
    raise ValueError(f"GPU_LADDER_PLAN={PLAN!r}: window, full or reference")
name = 'gpu_reference' if PLAN == 'reference' else 'gpu_ladder'
RUNS = os.environ.get('GPU_LADDER_RUNS') or os.path.join(ROOT, 'results', name, 'runs')
jobs = 2                 # the CPU smoke: 2 at a time; on the GPU sweeps/sweep.py --gpus=0 --per_gpu=SLOTS
SLOTS = 16               # runs at once on the one GPU: one CPU core each on the 16-core machines lent so far
CORPUS = dict(dataset='pycode', train_tokens=25_001_334, vocab_size=257,        # data/pycode/prepare.py's output
              sha256=dict(train='dc216d80f096d735bc1886986cbef1a9eac8537c95559b01ec755e14059c585e',
                          val='ebeea8a74d99b74c1d181dd5b5bdf45a00f21c8909d30b063995c91d525a39ab'))
ARMS = {'dense': dict(model='dense', n_layer=4),                               # FLOP-matched within 2% (xmod.py)
        'xmod_s4': dict(model='xmod', stride=4, n_layer=12, dense_layers=4),
        'xmod_s2': dict(model='xmod', stride=2, n_layer=6, dense_layers=4)}    # MoD's layout, X-MoD's gate
Q = 35                   # training tokens per active parameter of the dense model (results/cpu_isoflop's optima)
COOLDOWN = 0.2                                    # the last fifth of every budget cools down (train.py's default)

if SMOKE:                # toy sizes on the CPU: 2 rungs, 2 arms, seed 0 at 2 rates and seed 1: 12 runs
    T, HEAD, Q, BRANCH_FRACTIONS = 32, 8, None, ()
    RUNGS = [dict(width=24, tokens=2048, rows=8), dict(width=48, tokens=4096, rows=8)]       # 8 and 16 steps
    ARMS = {k: ARMS[k] for k in ('dense', 'xmod_s4')}
    SEEDS, RATE_FACTORS = (0, 1), (1, 2)
    CORPUS = dict(CORPUS, dataset='shakespeare', train_tokens=None, sha256=None)
    common = dict(dataset='shakespeare', warmup_iters=2, weight_decay=0.1, dropout=0.0, eval_tokens=1024,
                  device='cpu', compile=False, dtype='float32', threads=1, lr_schedule='wsd', cooldown_frac=COOLDOWN)
else:
    T, HEAD = 128, 16
    # width, and tokens a step as rows of T: 4,096 at the narrowest rungs, x2 per rung above (the steps stay 400-1,300)
    RUNGS = {'window': [dict(width=32, rows=32), dict(width=64, rows=64), dict(width=112, rows=128)],
             'full': [dict(width=32, rows=32), dict(width=48, rows=32), dict(width=64, rows=64),
                      dict(width=80, rows=64), dict(width=112, rows=128)]}.get(PLAN, [])
    SEEDS = {'window': (0, 1, 2), 'full': (0, 1, 2, 3, 4, 5)}.get(PLAN, ())
    RATE_FACTORS = {'window': (1, 2), 'full': (2 ** -0.5, 1, 2 ** 0.5, 2)}.get(PLAN, ())
    # the WSD budgets branched from each run, as fractions of D: in a window none (a branch's process start, 15 s
    # beside 15 others, costs more than its training)
    BRANCH_FRACTIONS = (0.25, 0.5) if PLAN == 'full' else ()
    common = dict(dataset='pycode', warmup_iters=50, weight_decay=0.1, dropout=0.0, eval_tokens=65536,
                  device='cuda', compile=False, dtype='bfloat16', lr_schedule='wsd', cooldown_frac=COOLDOWN)
if os.environ.get('GPU_LADDER_DATA'):      # a folder with train.bin, val.bin, meta.pkl instead (tests)
    common['data_dir'] = os.environ['GPU_LADDER_DATA']


def dense_config(width):
    return xmod.GPTConfig(model='dense', n_layer=4, n_embd=width, n_head=max(1, width // HEAD), block_size=T,
                          vocab_size=CORPUS['vocab_size'])


def active_params(cfg):
    """Non-embedding parameters a token passes through (xmod.GPT.num_active_params), from the config alone."""
    return xmod.GPT(cfg).num_active_params()


def sized(rung):
    """The rung with its tokens: Q x the dense model's active parameters, a whole number of 4 x the step's tokens
    (so D/4 is whole steps); the smoke rungs give theirs."""
    step = rung['rows'] * T
    if 'tokens' not in rung:
        rung = dict(rung, tokens=4 * step * max(1, round(Q * active_params(dense_config(rung['width'])) / (4 * step))))
    return dict(rung, step_tokens=step, iters=rung['tokens'] // step)


RUNGS = [sized(r) for r in RUNGS]


def base_rate(width):
    """r(w) = 4e-3 x 128 / w: the tuned rate at width 128 (pycode and Shakespeare, results/cpu_code, cpu_lr), 1/width
    through width 64's (8e-3 on the CPU)."""
    return 4e-3 * 128 / width


def iters_of(tokens, rung):
    return max(1, round(tokens / rung['step_tokens']))


def cooldown_start(iters):
    """The step where a WSD run of `iters` steps starts cooling down (run_folder.cooldown_start's rule)."""
    return iters - round(COOLDOWN * iters)


def run_name(arm, rung, tokens, lr, seed, branch=False):
    return f"{arm}_d{rung['width']}_{tokens / M:.3g}M_lr{lr:.3g}_seed{seed}" + ('_branch' if branch else '')


def ladder_run(arm, rung, lr, seed):
    """A WSD run of the rung's full budget, keeping the steps its branches start from."""
    it = rung['iters']
    keep = [cooldown_start(iters_of(f * rung['tokens'], rung)) for f in BRANCH_FRACTIONS]
    return dict(name=run_name(arm, rung, rung['tokens'], lr, seed), **ARMS[arm], n_embd=rung['width'],
                n_head=max(1, rung['width'] // HEAD), block_size=T, batch_size=rung['rows'],
                max_tokens=rung['tokens'], learning_rate=lr, min_lr=lr / 10, seed=seed,
                eval_interval=max(1, it // 2), **(dict(save_steps=','.join(map(str, keep))) if keep else {}))


def branch_run(parent, rung, fraction):
    """The cooldown of budget fraction x D from the parent's kept step (a WSD run of that budget, bit for bit)."""
    tokens = iters_of(fraction * rung['tokens'], rung) * rung['step_tokens']
    kept = cooldown_start(iters_of(tokens, rung))
    r = dict(parent, name=run_name(parent['arm'], rung, tokens, parent['learning_rate'], parent['seed'], True),
             max_tokens=tokens, eval_interval=iters_of(tokens, rung),
             init_from=os.path.join(RUNS, parent['name'], f'ckpt_{kept}.pt'))
    del r['save_steps']
    return r, kept


PRIOR = {}        # {run name: (window folder, run.json)}: earlier windows' finished runs (dry_run fills it)


def final_loss(name):
    """A finished run's final val_loss_causal from RUNS or PRIOR (inf where train.py stopped it as diverged), else
    None."""
    try:
        with open(os.path.join(RUNS, name, 'run.json')) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = PRIOR.get(name, (None, {}))[1]
    if meta.get('diverged'):
        return math.inf
    return meta['final']['val_loss_causal'] if meta.get('finished') is True else None


def plan():
    """Every run of the plan as (run, needs): needs is what must be on disk before it can start: None, or
    ('seed0', [names]) for a seed waiting for seed 0's rates, or ('kept', parent, step) for a branch. A seed's rate
    is seed 0's better one once known, else the base rate (a stand-in, for the time estimate)."""
    out = []
    for rung in sorted(RUNGS, key=lambda r: -r['width']):
        for arm in ARMS:
            lrs = [base_rate(rung['width']) * f for f in RATE_FACTORS]
            firsts = [dict(ladder_run(arm, rung, lr, SEEDS[0]), arm=arm) for lr in lrs]
            out += [(r, None, rung) for r in firsts]
            losses = [final_loss(r['name']) for r in firsts]
            best = lrs[min(range(len(lrs)), key=lambda i: losses[i])] if None not in losses else lrs[0]
            for seed in SEEDS[1:]:
                out.append((dict(ladder_run(arm, rung, best, seed), arm=arm),
                            None if None not in losses else ('seed0', [r['name'] for r in firsts]), rung))
    with_branches = []
    for r, needs, rung in out:
        with_branches.append((r, needs, rung))
        for f in BRANCH_FRACTIONS:
            b, kept = branch_run(r, rung, f)
            with_branches.append((b, ('kept', r['name'], kept, needs), rung))
    return with_branches


def kept(name, step):
    return os.path.exists(os.path.join(RUNS, name, f'ckpt_{step}.pt'))


def strip(r):
    return {k: v for k, v in r.items() if k != 'arm'}


def startable():
    """sweeps/sweep.py's list: branches whose step is kept (or which a prior finished), then the plan's runs whose
    rates are known, in plan order."""
    ready, branches = [], []
    for r, needs, _ in plan():
        if needs is None:
            ready.append(strip(r))
        elif needs[0] == 'kept' and needs[3] is None and (kept(needs[1], needs[2]) or final_loss(r['name']) is not None):
            branches.append(strip(r))
    return branches + ready


def reference_runs():
    """The 72-run replication of the CPU panel's reference point on one GPU (the review of issue 41): 9 arms x seeds
    5-12 (8 seeds no CPU run used), width 128, T=128, 2M tokens on Shakespeare, 16 x 128 tokens a step, cosine to
    lr / 10, float32, eager. The arms: dense and X-MoD s4 at 4e-3 and at 5.66e-3 (the half-octave check), X-MoD
    with random routing, X-MoD and MoD's layout with the calibrated gate, MoD's layout with X-MoD's gate, and MoD at
    its own capacity 0.125 (8 layers DrDrDrDr, FLOP-matched by its token budget: 1.80M)."""
    dense = xmod.GPTConfig(model='dense', n_layer=4, n_embd=128, block_size=128, vocab_size=84)
    mod = xmod.GPTConfig(model='mod', n_layer=8, capacity=0.125, n_embd=128, block_size=128, vocab_size=84)
    mod_tokens = 2048 * round(2_000_896 * xmod.flops_per_token(dense) / xmod.flops_per_token(mod) / 2048)
    s4, s2 = dict(model='xmod', stride=4, n_layer=12, dense_layers=4), dict(model='xmod', stride=2, n_layer=6,
                                                                          dense_layers=4)
    arms = [('dense', dict(model='dense', n_layer=4), 4e-3), ('xmod_s4', s4, 4e-3),
            ('dense', dict(model='dense', n_layer=4), 4e-3 * 2 ** 0.5), ('xmod_s4', s4, 4e-3 * 2 ** 0.5),
            ('xmod_s4_random', dict(s4, router='random'), 4e-3), ('xmod_s4_calgate', dict(s4, gate='calibrated'), 4e-3),
            ('xmod_s2', s2, 4e-3), ('xmod_s2_calgate', dict(s2, gate='calibrated'), 4e-3),
            ('mod_c0.125', dict(model='mod', n_layer=8, capacity=0.125, match_flops=False), 4e-3)]
    runs = []
    for seed in range(5, 13):
        for tag, kw, lr in arms:
            tokens = mod_tokens if tag.startswith('mod') else 2_000_896
            runs.append(dict(name=f'{tag}_d128_lr{lr:.3g}_seed{seed}', **kw, n_embd=128, n_head=4, block_size=128,
                             batch_size=16, max_tokens=tokens, learning_rate=lr, min_lr=lr / 10, seed=seed,
                             eval_interval=max(1, tokens // 2048 // 4)))
    return runs


if PLAN == 'reference':
    common = dict(dataset='shakespeare', warmup_iters=50, weight_decay=0.1, dropout=0.0, eval_tokens=32768,
                  device='cuda', compile=False, dtype='float32')
    runs = reference_runs()
else:
    runs = startable()


# -----------------------------------------------------------------------------------------------------------------
# the time a GPU takes: a model from the first H200 window's measured times (results/gpu_ladder/runs.tar.gz)

# Whole-GPU microseconds a training token cost there, by arm and the smallest (width, tokens a step) measured at or
# above a run's: each run's tokens over its seconds from its step-0 row to its last (its evaluations included: five
# a run there, three here), while 20 runs shared the GPU, as 1 / (20 x tokens/s); the median over the runs with a row
# after step 0. Measured: dense 0.377 at width 128 (4,096 tokens a step; 2 runs), 0.366 at 256 (16,384; 8 runs);
# X-MoD s2 1.101 at 128 (1 run, cut at step 122, started last beside 19 start-ups) and 0.502 at 256 (8 runs); X-MoD
# s4 0.660 at 256 (8 runs). X-MoD s4 never got past step 0 at width 128: 1.101 x 0.660 / 0.502 = 1.447, s2's cost
# there times s4 / s2 at 256 (derived, not measured). A narrower model at as many tokens a step or more runs the
# same launches and data rows on fewer FLOPs, so each point bounds the runs below it.
COST_US = {(128, 4096): dict(dense=0.377, xmod_s2=1.101, xmod_s4=1.447),
           (256, 16384): dict(dense=0.366, xmod_s2=0.502, xmod_s4=0.660),
           (512, 65536): dict(dense=0.453, xmod_s2=0.571, xmod_s4=0.733)}     # 4 runs each (tests: the model)
# Seconds between a slot freeing and the run's first step there (process, CUDA, data, the step-0 evaluation): 13-15
STARTUP_S = 15
# The H100 has the H200's compute and 0.70 x its memory bandwidth (3.35 against 4.8 TB/s); runs this small are
# launch- and CPU-bound, so it lies between 1.0 and 1.43 x the H200's time. Assumed 1.3 until a window measures it.
DEVICES = {'H200': 1.0, 'H100': 1.3}


def cost_us(arm, width, step_tokens):
    """A training token's whole-GPU microseconds on the H200 (COST_US): the least over the measured points at the
    run's width or wider and at its tokens a step or fewer (each bounds it); the widest point where none is. X-MoD
    s2's for MoD's layout, X-MoD s4's for the other routed arms."""
    kind = 'dense' if arm == 'dense' else 'xmod_s2' if arm.startswith('xmod_s2') else 'xmod_s4'
    keys = [k for k in COST_US if k[0] >= width and k[1] <= step_tokens] or [max(COST_US)]
    return min(COST_US[k][kind] for k in keys)


def work_s(r, rung, arm):
    """Whole-GPU seconds of a run's training (its tokens, a branch's from its kept step) and its evaluations."""
    start = 0
    if str(r.get('init_from', '')).endswith('.pt'):
        start = int(os.path.basename(r['init_from'])[5:-3]) * rung['step_tokens']
    # an evaluation: eval_tokens through top-k and causal routing, two forwards, each a third of a training token
    evals = (r['max_tokens'] // rung['step_tokens'] // r['eval_interval'] + 1) * common['eval_tokens'] * 2 / 3
    return (r['max_tokens'] - start + evals) * cost_us(arm, rung['width'], rung['step_tokens']) * 1e-6


def simulate(items, slots=SLOTS, factor=1.0, deadline=None):
    """The wall-clock seconds `items` [(name, work_s, needs)] take on one GPU: `slots` at a time in list order as
    their needs are met, each first STARTUP_S without the GPU, then its work on an equal share of the GPU with the
    others past their start-up (processor sharing). needs: None, ('done', [names]) or ('at', name, fraction): that
    run's work so far. -> (seconds, {name: its end}), the ends only of what finished by `deadline` (None: all)."""
    left = {n: w * factor for n, w, _ in items}
    total = dict(left)
    needs = {n: nd for n, _, nd in items}
    order = [n for n, _, _ in items]
    t, waiting, running, ends = 0.0, list(order), {}, {}      # running: name -> start-up seconds still to go

    def ready(n):
        nd = needs[n]
        if nd is None:
            return True
        if nd[0] == 'done':
            return all(m in ends for m in nd[1])
        return nd[1] in ends or (nd[1] in running and 1 - left[nd[1]] / max(total[nd[1]], 1e-12) >= nd[2])

    while waiting or running:
        for n in [n for n in waiting if ready(n)]:
            if len(running) < slots:
                waiting.remove(n)
                running[n] = STARTUP_S
        if not running:
            break                                          # what waits can never start (a need outside the list)
        busy = [n for n in running if running[n] <= 0]
        # the next event: a start-up ends, a run ends, or a run passes a point another waits for
        dt = [running[n] for n in running if running[n] > 0]
        dt += [left[n] * len(running) for n in busy]
        for n in waiting:
            nd = needs[n]
            if nd and nd[0] == 'at' and nd[1] in busy:
                gap = left[nd[1]] - (1 - nd[2]) * total[nd[1]]
                if gap > 0:
                    dt.append(gap * len(running))
        step = max(min(dt), 1e-9)
        if deadline is not None and t + step > deadline:
            break
        t += step
        for n in list(running):
            if running[n] > 0:
                running[n] -= step
            else:
                left[n] -= step / len(running)
            if running[n] <= 1e-9 and left[n] <= 1e-9:
                del running[n]
                ends[n] = t
    return t, ends


def plan_items(done=()):
    """The plan as simulate() takes it, less the runs in `done`; a branch needs its parent's work up to its step."""
    items = []
    for r, needs, rung in plan():
        if r['name'] in done:
            continue
        nd = None
        if needs and needs[0] == 'seed0':
            nd = ('done', [n for n in needs[1] if n not in done])
        elif needs and needs[0] == 'kept' and needs[1] not in done:
            nd = ('at', needs[1], needs[2] / rung['iters'])
        elif needs and needs[0] == 'kept':
            continue              # its parent finished in an earlier window and its checkpoint stayed there
        items.append((r['name'], work_s(r, rung, r['arm']), nd))
    return items


def prior_runs(paths=None):
    """{run name: (window folder, run.json)} of the finished runs in earlier windows' runs.tar.gz (each member
    runs/<name>/run.json), read without unpacking."""
    if paths is None:
        spec = os.environ.get('GPU_LADDER_PRIOR')
        paths = spec.split(os.pathsep) if spec else sorted(glob.glob(os.path.join(ROOT, 'results', 'gpu_ladder',
                                                                                  'windows', '*')))
    found = {}
    for folder in paths:
        tar_path = os.path.join(folder, 'runs.tar.gz')
        if not os.path.isfile(tar_path):
            continue
        with tarfile.open(tar_path) as tar:
            for m in tar.getmembers():
                if m.name.startswith('runs/') and m.name.endswith('/run.json') and m.isfile():
                    meta = json.load(tar.extractfile(m))
                    if meta.get('finished') is True:
                        found[os.path.basename(os.path.dirname(m.name))] = (folder, meta)
    return found


def rung_table():
    """One row a rung and arm: width, tokens, passes, FLOPs, runs, seeds, rates, layout and active parameters."""
    rows = []
    for rung in RUNGS:
        for arm, kw in ARMS.items():
            d = dense_config(rung['width'])
            cfg = d if arm == 'dense' else xmod.match_flops(d, 'xmod', stride=kw['stride'], n_layer=kw['n_layer'])
            rows.append(dict(width=rung['width'], arm=arm, tokens=rung['tokens'], step_tokens=rung['step_tokens'],
                             iters=rung['iters'], passes=rung['tokens'] / CORPUS['train_tokens']
                             if CORPUS['train_tokens'] else None,
                             flops=3 * xmod.flops_per_token(cfg) * rung['tokens'],
                             active=active_params(cfg), layout=''.join('D' if k == 'dense' else 'r'
                                                                       for k in xmod.layer_kinds(cfg)),
                             capacity=cfg.capacity if arm != 'dense' else None, seeds=len(SEEDS),
                             rates=[base_rate(rung['width']) * f for f in RATE_FACTORS]))
    return rows


def estimate(done=(), deadline=None):
    """{device: seconds} for what is left after `done`, by simulate()."""
    items = plan_items(done)
    return {dev: simulate(items, factor=f, deadline=deadline)[0] for dev, f in DEVICES.items()}


def dry_run():
    prior = prior_runs()
    PRIOR.update(prior)
    names = {r['name'] for r, _, _ in plan()}
    done = {n for n in prior if n in names}
    print(f"gpu_ladder, plan {PLAN}: {len(RUNGS)} rungs x {len(ARMS)} arms; seed 0 at {len(RATE_FACTORS)} rates, "
          f"seeds {', '.join(map(str, SEEDS[1:]))} at seed 0's better; WSD, "
          + (f"branches at {', '.join(f'{f:g}' for f in BRANCH_FRACTIONS)} D" if BRANCH_FRACTIONS else 'no branches')
          + f"; corpus {CORPUS['dataset']}, T={T}")
    print('| width | arm | layout (capacity) | active params | tokens (a step) | steps | passes | training FLOPs | '
          'seeds | seed-0 rates | est. s H100 / H200 |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    by_rung = {}
    for r, needs, rung in plan():
        key = (rung['width'], r['arm'])
        by_rung[key] = by_rung.get(key, []) + [(r['name'], work_s(r, rung, r['arm']))]
    for row in rung_table():
        work = sum(w for _, w in by_rung[(row['width'], row['arm'])])    # alone on the GPU, no start-up
        cap = f" ({row['capacity']:.3f})" if row['capacity'] else ''
        passes = f"{row['passes']:.2f}" if row['passes'] is not None else '-'
        print(f"| {row['width']} | {row['arm']} | {row['layout']}{cap} | {row['active']:,.0f} | "
              f"{row['tokens'] / M:.2f}M ({row['step_tokens']:,}) | {row['iters']} | {passes} | {row['flops']:.3g} | "
              f"{row['seeds']} | {', '.join(f'{x:.3g}' for x in row['rates'])} | "
              f"{work * DEVICES['H100']:.0f} / {work:.0f} |")
    print("(est. s: the arm's runs and branches at this width in whole-GPU seconds, without start-ups)")
    windows = sorted({prior[n][0] for n in done})
    print(f"prior: {len(done)} of the plan's {len(names)} runs finished in {len(windows)} earlier window(s)"
          + ''.join(f"\n  {os.path.relpath(w, ROOT) if w.startswith(ROOT) else w}: "
                    f"{sum(prior[n][0] == w for n in done)} runs" for w in windows))
    items = plan_items(done)
    lost = len(names) - len(done) - len(items)
    print(f"left: {len(items)} runs" + (f" ({lost} branches whose parent finished in an earlier window without "
                                        "them: their kept step stayed there)" if lost else ''))
    for dev, s in estimate(done).items():
        print(f"estimated on one {dev}: {s:.0f} s ({SLOTS} at a time; x{DEVICES[dev]:g} the H200's measured costs)")
    return 0


if __name__ == '__main__':   # python sweeps/gpu_ladder.py --dry_run | [sweeps/sweep.py's options]
    if sys.argv[1:] == ['--dry_run'] and PLAN != 'reference':
        sys.exit(dry_run())
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
