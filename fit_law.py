"""
Fit the X-MoD scaling law from a sweep of finished training runs.

    python fit_law.py out/sweep/* --out out/law [--holdout EXPR] [--metric val_loss_causal|val_loss]
                      [--bootstrap 200] [--seed 0]

Each positional argument is a run directory (one holding run.json and log.csv), a glob of them, or a folder that
holds run directories anywhere below it. Two laws are fitted, in this order (DESIGN.md, "The law"):

1. The dense law, Chinchilla's form, on the dense runs:
       L(N, D) = E + A/N^alpha + B/D^beta,   N = params_total (non-embedding), D = final training tokens.
   The corrected Chinchilla procedure: float64; Huber loss (delta=1e-3) on log L, summed over runs; the log-sum-exp
   parameterisation log L = LSE(a - alpha log N, b - beta log D, e) with A=e^a, B=e^b, E=e^e; torch L-BFGS
   (strong Wolfe) from the best starts of a grid; the best start wins. A summed Huber loss is of order 1e-4, and
   torch L-BFGS's stopping rules (tolerance_change=1e-9 on the loss, tolerance_grad=1e-7) stop it almost at once:
   that is how the original Chinchilla fit went wrong. So the objective is measured in units of delta^2 (x1e6) and
   the tolerances are tightened to 1e-12 / 1e-14 with many iterations; tests check that known parameters come back.

2. The X-MoD relative law, on full X-MoD runs (model=='xmod', gate=='variance', balance>0), each paired by seed
   with its FLOP-matched dense partner, Delta = L_xmod - L_dense (nats, negative = X-MoD better):
       Delta = log(rho) * (-g + tau*log(T/T0) + sigma*log(s/s0)),     T0=128, s0=4,
   rho = params_total/params_active, T = context (block_size), s = anchor stride. The three named terms:
   g = capacity_gain (the gain per unit log rho at the reference context and stride), tau = context_correction (how
   that gain changes per e-fold of context), sigma = stride_interaction (how it changes per e-fold of stride).
   Why this form: (a) Delta must vanish at rho=1 (stride 1 is the dense model), so log rho multiplies everything and
   there is no intercept; (b) at fixed active compute a power law in total parameters, L ~ N_total^-a, gives a
   Delta linear in log rho to first order, the same log-linear gain per log(expert count) that routed-MoE scaling
   laws use (Clark et al. 2022, log L = a log N + b log E + c log N log E); (c) the context and stride effects enter
   as interactions with log rho, like Clark's c log N log E term, so each reads as "how much the gain per log rho
   changes" and is zero when there is no sparsity to modulate. It is linear in (g, tau, sigma): (weighted) least
   squares is exact, and a bootstrap resample is a reweighted solve. Every pair weighs the same (paired Deltas have
   about equal noise); the bootstrap resamples pairs, so the intervals do not lean on that assumption. Pairs with
   equal rho but different (capacity, stride) separate sigma from g. A term the data cannot constrain (one context
   length, one stride, or collinear with the others) is left out of the fit (read as 0) and reported as such.
   Each term must earn its place: the fit is redone without each one, and its fit, cross-validated
   (leave-one-configuration-out, all seeds of a configuration together) and held-out errors are reported.

Held-out runs (--holdout EXPR) are excluded from both fits and predicted. EXPR is a Python expression evaluated per
run with no builtins (no calls, attributes or subscripts) over the run's config keys, its top-level numeric fields
(params_total, params_active, flops_per_token, tokens_per_iter, seed), rho, tokens (final tokens) and
max_tokens_all (largest final tokens of all runs): e.g. "model=='xmod' and stride==8", "block_size==512",
"tokens==max_tokens_all". A pair is held out when its sparse run or its dense partner is. For held-out X-MoD runs:
RMSE and R^2 of Delta; relative error of L with L_pred = dense law at the partner's (N, D) + predicted Delta, and
with the observed partner loss + predicted Delta; the fraction with the right sign of Delta, over all and over those
with |Delta| > 2 x the seed noise of Delta. Held-out dense runs get the dense law's relative error.

Uncertainty: 95% percentile intervals from --bootstrap resamples of runs (dense law: dense runs, each resample an
L-BFGS run from the full fit's optimum; relative law: X-MoD pairs, an exact reweighted least-squares solve).

Seed noise: over configurations run with >= 2 seeds, the pooled std of L across seeds and of Delta across seeds.
Everything is done for the chosen --metric (default val_loss_causal, the honest causal-routing loss) and for the
other one (val_loss, top-k routing) side by side.

Input validation (a one-line message naming the file; never a traceback):
  exit 2:  an argument that matches nothing, or a folder with no run.json in or below it;
           run.json unreadable or not valid JSON, or missing a contract key, or a model not in dense/mod/xmod/moe,
           or params/flops that are not positive finite numbers, or params_active > params_total, or a seed that
           is not an integer;
           log.csv of a finished run missing, empty, with a missing contract column, a ragged row, or a
           non-number/NaN/inf in step, tokens, flops, val_loss or val_loss_causal in any row (a diverged or corrupted
           run: look at it and leave it out of the inputs rather than have it silently dropped);
           the last log.csv row disagreeing with run.json "final" (step, tokens, flops to 0.1%, losses to 1e-4);
           a duplicate run: the same config (ignoring out_dir, init_from, log_interval, compile, device, overwrite,
           stop_iter, dtype, backend, eval_interval, data_dir, wandb_*)
           and seed twice (the same directory reached twice is not a duplicate, it is read once);
           no usable dense run to fit (none at all, or all held out);
           sparse runs present but not one of them with a FLOP-matched dense partner (a broken sweep);
           a bad --holdout expression (syntax, forbidden construct, unknown name, error while evaluating).
  warning, run skipped:  an unfinished run ("finished": false; a sweep in progress);
           a sparse run with no FLOP-matched dense partner while others have one (it still shows in the per-run
           table and the loss plots, but has no Delta).
  warning only:  log.csv's last flops differing from 3 * flops_per_token * tokens by > 1%; a --holdout that
           selects nothing; a dense fit that is ill-posed (few runs, one N or one D, rank-deficient Jacobian).
  Config "gate": null / "balance": null mean the family default (as xmod.py resolves them): for xmod the variance
  gate and balance > 0, i.e. full X-MoD. MoD's layout is stride 2 whatever its config's stride says.
  Pairing: a dense run with the same n_embd, block_size and seed, final tokens within 1% and flops_per_token within
  2%; of several, the closest in flops_per_token.

Outputs in --out: fit.json, summary.md and six PNG plots (loss_vs_flops, loss_vs_params, pred_vs_obs,
delta_vs_logrho, ablations, training_curves); each plot says so instead of failing when its data is absent.
fit.json: {"metric", "inputs", "warnings", "dense", "relative", "metrics", "by_metric": {metric: {"dense",
"relative", "metrics"}} for both metrics, "runs": [per-run rows]}; the top-level dense/relative/metrics are those of
--metric. Numbers are not rounded; undefined ones are null.
"""

import argparse
import ast
import csv
import glob
import json
import math
import os
import sys

import numpy as np
import torch

try:
    from tqdm import tqdm
except ImportError:  # a progress bar is a nicety, not a dependency
    def tqdm(it, **kwargs):
        return it

# -----------------------------------------------------------------------------
# defaults (override on the command line)
metric = 'val_loss_causal'   # the honest loss: causal routing, no peeking at later tokens
bootstrap = 200              # bootstrap resamples for the 95% intervals
seed = 0
# the relative law's reference point: g reads as the gain per unit log rho at T=T0, s=S0
T0 = 128
S0 = 4
# dense-law fit
HUBER_DELTA = 1e-3
OBJ_SCALE = 1.0 / HUBER_DELTA ** 2  # measure the summed Huber loss in units of delta^2 so L-BFGS's tolerances bite
LBFGS_ITERS = 2000
N_STARTS = 8                 # L-BFGS runs from the best grid points of the full fit
N_STARTS_BOOT = 1            # ... and in each bootstrap resample, starting from the full fit's optimum
# pairing tolerances (DESIGN.md, "FLOPs and FLOP matching")
TOKENS_TOL = 0.01
FPT_TOL = 0.02
# -----------------------------------------------------------------------------

METRICS = ('val_loss_causal', 'val_loss')
FAMILIES = ('dense', 'mod', 'xmod', 'moe')
TERMS = ('capacity_gain', 'context_correction', 'stride_interaction')
FORM = 'delta = log(rho) * (-capacity_gain + context_correction*log(T/T0) + stride_interaction*log(s/s0))'
REQUIRED_TOP = ('config', 'params_total', 'params_active', 'flops_per_token', 'tokens_per_iter', 'seed', 'finished')
REQUIRED_CONFIG = ('model', 'n_layer', 'n_head', 'n_embd', 'block_size', 'stride', 'capacity', 'gate', 'balance',
                   'seed')
REQUIRED_COLUMNS = ('step', 'tokens', 'flops', 'lr', 'elapsed_s', 'tokens_per_s', 'train_loss', 'val_loss',
                    'val_loss_causal')
USED_COLUMNS = ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal')  # these must be finite in every row
# config keys that cannot change a run's result: two runs differing only in these are the same experiment
IGNORE_KEYS = ('out_dir', 'init_from', 'log_interval', 'compile', 'device', 'overwrite', 'stop_iter', 'dtype',
               'backend', 'eval_interval', 'data_dir')


class InputError(Exception):
    """Bad input: main() prints the one-line message and exits with code 2."""


WARNINGS = []


def warn(msg):
    WARNINGS.append(msg)
    print(f'fit_law.py: warning: {msg}', file=sys.stderr)


# -----------------------------------------------------------------------------
# reading runs

def find_run_dirs(patterns):
    """Each argument must yield at least one run directory; what a glob catches besides runs (stray files, the
    output folder of an earlier fit) is passed over."""
    dirs = []
    for p in patterns:
        matches = sorted(glob.glob(p)) if any(c in p for c in '*?[') else [p]
        if not matches or not os.path.exists(matches[0]):
            raise InputError(f'{p}: matches no file or directory')
        found = []
        for m in matches:
            if os.path.basename(m) == 'run.json':
                m = os.path.dirname(m) or '.'
            if os.path.isdir(m):
                found += sorted(root for root, _, files in os.walk(m) if 'run.json' in files)
        if not found:
            raise InputError(f'{p}: no run.json in it or below it')
        dirs += found
    seen, unique = set(), []
    for d in dirs:  # the same directory reached twice (overlapping globs) is read once
        if os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            unique.append(d)
    if not unique:
        raise InputError(f'{" ".join(patterns)}: no run directories')
    return unique


def read_log(path):
    """log.csv -> {column: np.array} for the columns we use, after checking the contract."""
    try:
        with open(path, newline='') as f:
            rows = [r for r in csv.reader(f) if r]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f'{path}: cannot read ({e})')
    if not rows:
        raise InputError(f'{path}: empty file')
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f'{path}: missing column(s) {", ".join(missing)}')
    if len(rows) < 2:
        raise InputError(f'{path}: no evaluation rows')
    cols = {c: [] for c in USED_COLUMNS}
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f'{path}: line {lineno} has {len(row)} fields, the header has {len(header)}')
        for c in USED_COLUMNS:
            cell = row[header.index(c)].strip()
            try:
                v = float(cell)
            except ValueError:
                raise InputError(f'{path}: line {lineno}: {c} is not a number ({cell!r})')
            if not math.isfinite(v):
                raise InputError(f'{path}: line {lineno}: {c} is {cell!r} (a diverged or corrupted run: '
                                 f'leave it out of the inputs)')
            cols[c].append(v)
    return {c: np.array(v, dtype=np.float64) for c, v in cols.items()}


def positive_number(meta, key, path):
    v = meta[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise InputError(f'{path}: {key} must be a positive finite number, got {v!r}')
    return float(v)


def variant(cfg):
    """The family, with X-MoD's ablations told apart: 'xmod' is the full recipe."""
    m = cfg['model']
    if m != 'xmod':
        return m
    v = 'xmod'
    if cfg['gate'] != 'variance':
        v += '-plain'
    if not cfg['balance'] > 0:
        v += '-nobal'
    return v


def config_key(cfg, with_seed=True):
    c = {k: v for k, v in cfg.items() if k not in IGNORE_KEYS and not k.startswith('wandb')}
    if not with_seed:
        c.pop('seed', None)
    return json.dumps(c, sort_keys=True, default=str)


def load_run(d):
    """One run directory -> a dict, or None (with a warning) for an unfinished run."""
    jpath = os.path.join(d, 'run.json')
    try:
        with open(jpath) as f:
            meta = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f'{jpath}: not valid JSON ({e})')
    if not isinstance(meta, dict):
        raise InputError(f'{jpath}: not a JSON object')
    for k in REQUIRED_TOP:
        if k not in meta:
            raise InputError(f'{jpath}: missing key "{k}"')
    cfg = meta['config']
    if not isinstance(cfg, dict):
        raise InputError(f'{jpath}: "config" is not an object')
    for k in REQUIRED_CONFIG:
        if k not in cfg:
            raise InputError(f'{jpath}: config is missing key "{k}"')
    if cfg['model'] not in FAMILIES:
        raise InputError(f'{jpath}: unknown model {cfg["model"]!r} (expected one of {", ".join(FAMILIES)})')
    # gate/balance None mean the family default, resolved as xmod.py's GPTConfig does: X-MoD's variance gate and
    # balancing for xmod, MoD's plain gate and no balancing otherwise
    cfg = dict(cfg)
    if cfg['gate'] is None:
        cfg['gate'] = 'variance' if cfg['model'] == 'xmod' else 'plain'
    if cfg['balance'] is None:
        cfg['balance'] = 0.1 if cfg['model'] == 'xmod' else 0.0
    # the routing knobs are checked only where they mean something: dense and MoE runs may carry anything there
    ints = ('n_layer', 'n_embd', 'block_size') + (('stride',) if cfg['model'] == 'xmod' else ())
    for k in ints:
        if isinstance(cfg[k], bool) or not isinstance(cfg[k], int) or cfg[k] < 1:
            raise InputError(f'{jpath}: config {k} must be a positive integer, got {cfg[k]!r}')
    nums = {'mod': ('capacity',), 'xmod': ('capacity', 'balance')}.get(cfg['model'], ())
    for k in nums:
        if isinstance(cfg[k], bool) or not isinstance(cfg[k], (int, float)) or not math.isfinite(cfg[k]):
            raise InputError(f'{jpath}: config {k} must be a number, got {cfg[k]!r}')
    if isinstance(meta['seed'], bool) or not isinstance(meta['seed'], int):
        raise InputError(f'{jpath}: seed must be an integer, got {meta["seed"]!r}')
    n_total = positive_number(meta, 'params_total', jpath)
    n_active = positive_number(meta, 'params_active', jpath)
    fpt = positive_number(meta, 'flops_per_token', jpath)
    if n_active > n_total * (1 + 1e-9):
        raise InputError(f'{jpath}: params_active ({n_active:g}) > params_total ({n_total:g})')
    if meta['finished'] is not True:
        warn(f'{jpath}: unfinished run, skipped')
        return None
    lpath = os.path.join(d, 'log.csv')
    if not os.path.exists(lpath):
        raise InputError(f'{lpath}: missing (the run says it finished)')
    log = read_log(lpath)
    last = {c: log[c][-1] for c in USED_COLUMNS}
    final = meta.get('final')
    if isinstance(final, dict):  # cross-check the last evaluation with run.json's record of it
        for k, tol_abs, tol_rel in (('step', 0, 0), ('tokens', 0.5, 1e-9), ('flops', 0, 1e-3),
                                    ('val_loss', 1e-4, 0), ('val_loss_causal', 1e-4, 0)):
            v = final.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f'{jpath}: final.{k} is not a finite number ({v!r})')
            if abs(v - last[k]) > tol_abs + tol_rel * abs(v):
                raise InputError(f'{lpath}: last row {k}={last[k]:.10g} disagrees with run.json final.{k}={v:.10g}')
    if abs(last['flops'] - 3 * fpt * last['tokens']) > 0.01 * last['flops']:
        warn(f'{lpath}: final flops {last["flops"]:.4g} != 3 * flops_per_token * tokens = '
             f'{3 * fpt * last["tokens"]:.4g}')
    # MoD's layout is stride 2 whatever its config says (DESIGN.md); dense and MoE have no stride or capacity
    stride = {'xmod': cfg['stride'], 'mod': 2}.get(cfg['model'])
    capacity = float(cfg['capacity']) if cfg['model'] in ('mod', 'xmod') else None
    return dict(dir=d, name=d, config=cfg, meta=meta, model=cfg['model'], variant=variant(cfg),
                n_layer=cfg['n_layer'], n_embd=cfg['n_embd'], T=cfg['block_size'], stride=stride,
                capacity=capacity, seed=meta['seed'], params_total=n_total, params_active=n_active,
                rho=n_total / n_active, fpt=fpt, tokens=last['tokens'], flops=last['flops'], step=last['step'],
                loss={m: float(last[m]) for m in METRICS}, log=log, partner=None, heldout=False)


def load_runs(patterns):
    runs = [r for r in (load_run(d) for d in find_run_dirs(patterns)) if r is not None]
    if not runs:
        raise InputError(f'{" ".join(patterns)}: no finished runs')
    seen = {}
    for r in runs:
        k = config_key(r['config']) + f'|seed={r["seed"]}'
        if k in seen:
            raise InputError(f'{os.path.join(r["dir"], "run.json")}: duplicate run, the same config and seed as '
                             f'{os.path.join(seen[k], "run.json")}')
        seen[k] = r['dir']
    # short names for tables: the relative path, minus the prefix all runs share
    prefix = os.path.commonpath([os.path.abspath(r['dir']) for r in runs]) if len(runs) > 1 else None
    for r in runs:
        r['name'] = os.path.relpath(os.path.abspath(r['dir']), prefix) if prefix else os.path.basename(
            os.path.abspath(r['dir']))
    return runs


# -----------------------------------------------------------------------------
# pairing and held-out selection

def pair_runs(runs):
    """Give every sparse run its FLOP-matched dense partner (same n_embd, block_size, seed; tokens within 1%;
    flops_per_token within 2%; the closest in flops_per_token). Skip, with a warning, the ones that have none."""
    dense = [r for r in runs if r['model'] == 'dense']
    sparse = [r for r in runs if r['model'] != 'dense']
    for r in sparse:
        cands = [d for d in dense if d['n_embd'] == r['n_embd'] and d['T'] == r['T'] and d['seed'] == r['seed']
                 and abs(d['tokens'] - r['tokens']) <= TOKENS_TOL * max(d['tokens'], r['tokens'])
                 and abs(r['fpt'] / d['fpt'] - 1) <= FPT_TOL]
        if cands:
            r['partner'] = min(cands, key=lambda d: (abs(math.log(r['fpt'] / d['fpt'])),
                                                     abs(d['tokens'] - r['tokens']), d['name']))
        else:
            warn(f'{os.path.join(r["dir"], "run.json")}: no FLOP-matched dense partner (same n_embd, block_size, '
                 f'seed; tokens within {TOKENS_TOL:.0%}; flops_per_token within {FPT_TOL:.0%}), left out of Delta')
    if sparse and not any(r['partner'] for r in sparse):
        raise InputError(f'{os.path.join(sparse[0]["dir"], "run.json")}: not one of the {len(sparse)} sparse runs '
                         f'has a FLOP-matched dense partner; check tokens and flops_per_token')


SAFE_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Name, ast.Constant,
              ast.Load, ast.Tuple, ast.List, ast.Set, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Add,
              ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.Eq, ast.NotEq, ast.Lt, ast.LtE,
              ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def mark_heldout(expr, runs):
    """Evaluate --holdout per run; a restricted eval: a whitelist of syntax (no calls, attributes, subscripts,
    comprehensions) and no builtins, so an expression can read the run's fields and nothing else."""
    if expr is None:
        return
    try:
        tree = ast.parse(expr, mode='eval')
    except SyntaxError as e:
        raise InputError(f'--holdout {expr!r}: syntax error ({e.msg})')
    for node in ast.walk(tree):
        if not isinstance(node, SAFE_NODES):
            raise InputError(f'--holdout {expr!r}: {type(node).__name__} is not allowed (only names, numbers, '
                             f'strings, comparisons, arithmetic and and/or/not)')
    code = compile(tree, '<holdout>', 'eval')
    max_tokens_all = max(r['tokens'] for r in runs)
    for r in runs:
        ns = dict(r['config'])
        ns.update({k: v for k, v in r['meta'].items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        ns.update(rho=r['rho'], tokens=r['tokens'], max_tokens_all=max_tokens_all)
        try:
            r['heldout'] = bool(eval(code, {'__builtins__': {}}, ns))
        except Exception as e:
            raise InputError(f'--holdout {expr!r} on {os.path.join(r["dir"], "run.json")}: '
                             f'{type(e).__name__}: {e}')
    if not any(r['heldout'] for r in runs):
        warn(f'--holdout {expr!r} selects no run')


def pair_heldout(r):
    return r['heldout'] or (r['partner'] is not None and r['partner']['heldout'])


# -----------------------------------------------------------------------------
# the dense law: L(N, D) = E + A/N^alpha + B/D^beta, theta = (a, alpha, b, beta, e)

DENSE_NAMES = ('a', 'alpha', 'b', 'beta', 'e')


def dense_log_pred(theta, logN, logD):
    a, alpha, b, beta, e = theta
    return np.logaddexp(np.logaddexp(a - alpha * logN, b - beta * logD), e)


def dense_log_pred_torch(theta, logN, logD):
    a, alpha, b, beta, e = theta
    return torch.logsumexp(torch.stack([a - alpha * logN, b - beta * logD, e.expand_as(logN)]), dim=0)


def dense_objective(theta, logN, logD, logL, w):
    """Summed (weighted) Huber loss on log L, in torch so L-BFGS gets gradients."""
    r = dense_log_pred_torch(theta, logN, logD)
    return (w * torch.nn.functional.huber_loss(r, logL, reduction='none', delta=HUBER_DELTA)).sum()


def lbfgs_fit(theta0, logN, logD, logL, w=None, scale=OBJ_SCALE, tolerance_grad=1e-12, tolerance_change=1e-14,
              max_iter=LBFGS_ITERS):
    """One L-BFGS run from theta0; returns (theta, summed Huber loss unscaled). With scale=1 and torch's default
    tolerances (1e-7, 1e-9) this reproduces the Chinchilla pitfall: from a poor start it stops far from the optimum,
    because one step's change of a loss of order 1e-4 soon falls under tolerance_change."""
    t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))
    logN, logD, logL = t(logN), t(logD), t(logL)
    w = torch.ones_like(logL) if w is None else t(w)
    theta = torch.tensor(np.asarray(theta0, dtype=np.float64), requires_grad=True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=max_iter, max_eval=int(max_iter * 1.25),
                            tolerance_grad=tolerance_grad, tolerance_change=tolerance_change, history_size=50,
                            line_search_fn='strong_wolfe')

    def closure():
        opt.zero_grad()
        loss = dense_objective(theta, logN, logD, logL, w) * scale
        loss.backward()
        return loss
    opt.step(closure)
    with torch.no_grad():
        f = float(dense_objective(theta, logN, logD, logL, w))
    return theta.detach().numpy().copy(), f


def dense_grid_starts(logN, logD, logL, w, k):
    """Chinchilla's grid of initialisations, scored in one vectorised pass; the k best go to L-BFGS."""
    grid = np.array(np.meshgrid(np.arange(0, 30, 5.0), np.arange(0, 2.5, 0.5), np.arange(0, 30, 5.0),
                                np.arange(0, 2.5, 0.5), np.arange(-1, 2, 0.5), indexing='ij')).reshape(5, -1).T
    pred = dense_log_pred(grid.T[:, :, None], logN[None], logD[None])  # (n_grid, n_runs)
    r = np.abs(pred - logL[None])
    huber = np.where(r < HUBER_DELTA, 0.5 * r ** 2, HUBER_DELTA * (r - 0.5 * HUBER_DELTA))
    return grid[np.argsort((huber * w[None]).sum(1), kind='stable')[:k]]


def fit_dense(N, D, L, w=None, starts=None, n_starts=N_STARTS):
    logN, logD, logL = np.log(N), np.log(D), np.log(L)
    w = np.ones_like(logL) if w is None else np.asarray(w, dtype=np.float64)
    if starts is None:
        starts = dense_grid_starts(logN, logD, logL, w, n_starts)
    best = None
    for th0 in starts:
        th, f = lbfgs_fit(th0, logN, logD, logL, w)
        if np.all(np.isfinite(th)) and math.isfinite(f) and (best is None or f < best[1]):
            best = (th, f)
    return best


def dense_params(theta):
    a, alpha, b, beta, e = (float(x) for x in theta)
    return dict(E=math.exp(e), A=math.exp(a), alpha=alpha, B=math.exp(b), beta=beta, a=a, b=b, e=e)


def dense_conditioning(theta, logN, logD):
    """Is the dense law identified by these runs? The Gauss-Newton Jacobian of log L_pred w.r.t. theta."""
    logN, logD = torch.as_tensor(logN), torch.as_tensor(logD)
    J = torch.autograd.functional.jacobian(lambda t: dense_log_pred_torch(t, logN, logD),
                                           torch.as_tensor(theta)).numpy()
    sv = np.linalg.svd(J, compute_uv=False)
    return float(sv.min() / sv.max()) if sv.max() > 0 else 0.0


def run_dense(runs, metric, n_boot, rng):
    fit_runs = [r for r in runs if r['model'] == 'dense' and not r['heldout']]
    N = np.array([r['params_total'] for r in fit_runs])
    D = np.array([r['tokens'] for r in fit_runs])
    L = np.array([r['loss'][metric] for r in fit_runs])
    best = fit_dense(N, D, L)
    if best is None:
        raise InputError(f'the dense law fit failed from every start ({len(fit_runs)} dense runs)')
    theta, f = best
    out = dense_params(theta)
    resid = dense_log_pred(theta, np.log(N), np.log(D)) - np.log(L)
    out.update(form='L = E + A/N^alpha + B/D^beta', objective=f, rmse_log=float(np.sqrt(np.mean(resid ** 2))),
               n_runs=len(fit_runs), n_distinct_N=len(set(N)), n_distinct_D=len(set(D)))
    notes = []
    if len(fit_runs) < 5:
        notes.append(f'{len(fit_runs)} dense run(s) for 5 parameters')
    if len(set(N)) < 2:
        notes.append('a single N: A and alpha are not identified')
    if len(set(D)) < 2:
        notes.append('a single D: B and beta are not identified')
    cond = dense_conditioning(theta, np.log(N), np.log(D)) if len(N) else 0.0
    out['jacobian_sv_ratio'] = cond
    if cond < 1e-6 and not notes:
        notes.append(f'rank-deficient Jacobian (smallest/largest singular value {cond:.2g})')
    out['ill_posed'] = bool(notes)
    out['notes'] = notes
    if notes:
        warn(f'the dense law is ill-posed on these runs ({"; ".join(notes)}); its parameters are not to be read')
    # bootstrap: resample dense runs; each resample starts from the full fit's optimum (speed)
    samples = []
    for _ in tqdm(range(n_boot), desc=f'bootstrap dense [{metric}]', delay=1.0, leave=False, file=sys.stderr):
        wb = np.bincount(rng.integers(0, len(L), len(L)), minlength=len(L)).astype(np.float64)
        starts = [theta]
        if N_STARTS_BOOT > 1:
            starts += list(dense_grid_starts(np.log(N), np.log(D), np.log(L), wb, N_STARTS_BOOT - 1))
        b = fit_dense(N, D, L, w=wb, starts=starts)
        if b is not None:
            samples.append([dense_params(b[0])[k] for k in ('E', 'A', 'alpha', 'B', 'beta')])
    out['ci'] = ci_dict(samples, ('E', 'A', 'alpha', 'B', 'beta'))
    out['bootstrap'] = dict(n=n_boot, n_valid=len(samples))
    return out


def ci_dict(samples, names):
    if len(samples) < 2:
        return {k: None for k in names}
    s = np.array(samples)
    return {k: [float(np.percentile(s[:, i], 2.5)), float(np.percentile(s[:, i], 97.5))] for i, k in enumerate(names)}


def dense_predict(dense, N, D):
    return float(np.exp(dense_log_pred([dense[k] for k in DENSE_NAMES], math.log(N), math.log(D))))


# -----------------------------------------------------------------------------
# the relative law: Delta = log(rho) * (-g + tau log(T/T0) + sigma log(s/s0)), linear in (g, tau, sigma)

def rel_design(pairs, terms):
    lr = np.array([math.log(p['rho']) for p in pairs])
    cols = {'capacity_gain': -lr,
            'context_correction': lr * np.log(np.array([p['T'] for p in pairs], dtype=np.float64) / T0),
            'stride_interaction': lr * np.log(np.array([p['stride'] for p in pairs], dtype=np.float64) / S0)}
    return np.stack([cols[t] for t in terms], 1) if terms else np.zeros((len(pairs), 0))


def full_rank(X, w=None):
    if X.shape[1] == 0:
        return True
    Xw = X * np.sqrt(np.ones(len(X)) if w is None else w)[:, None]
    norms = np.linalg.norm(Xw, axis=0)
    if X.shape[0] < X.shape[1] or np.any(norms < 1e-12):
        return False
    sv = np.linalg.svd(Xw / norms, compute_uv=False)
    return bool(sv.min() > 1e-8 * sv.max())


def wls(X, y, w=None):
    sw = np.sqrt(np.ones(len(y)) if w is None else w)
    return np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]


def identifiable_terms(pairs, terms=TERMS):
    """Add the terms in order while each one adds a rank; say why the others are left out."""
    active, notes = [], {}
    sparse = [p for p in pairs if p['rho'] > 1 + 1e-12]
    for t in terms:
        if full_rank(rel_design(pairs, active + [t])):
            active.append(t)
        elif not sparse:
            notes[t] = 'no pair with rho > 1'
        elif t == 'context_correction' and len({p['T'] for p in sparse}) < 2:
            notes[t] = f'a single context length (T={sparse[0]["T"]}): not constrained'
        elif t == 'stride_interaction' and len({p['stride'] for p in sparse}) < 2:
            notes[t] = f'a single stride (s={sparse[0]["stride"]}): not constrained'
        else:
            notes[t] = 'collinear with the other terms in these runs: not constrained'
    return active, notes


def rel_predict(pairs, terms, coef):
    return rel_design(pairs, terms) @ coef if len(pairs) else np.zeros(0)


def delta_metrics(obs, pred):
    if len(obs) == 0:
        return dict(n=0, rmse=None, r2=None)
    res = pred - obs
    ss_tot = float(np.sum((obs - obs.mean()) ** 2))
    return dict(n=len(obs), rmse=float(np.sqrt(np.mean(res ** 2))),
                r2=float(1 - np.sum(res ** 2) / ss_tot) if len(obs) > 1 and ss_tot > 0 else None)


def loco_cv(pairs, terms):
    """Leave one configuration (all its seeds) out; refit on the rest; RMSE of the left-out Deltas."""
    groups = sorted({p['cfg_key'] for p in pairs})
    if len(groups) < 2:
        return None
    errs = []
    for g in groups:
        train = [p for p in pairs if p['cfg_key'] != g]
        test = [p for p in pairs if p['cfg_key'] == g]
        act, _ = identifiable_terms(train, terms)
        coef = wls(rel_design(train, act), np.array([p['delta'] for p in train])) if act else np.zeros(0)
        errs.extend(rel_predict(test, act, coef) - np.array([p['delta'] for p in test]))
    return float(np.sqrt(np.mean(np.square(errs))))


def run_relative(runs, metric, dense, delta_std, n_boot, rng):
    pairs = []
    for r in runs:
        if r['variant'] == 'xmod' and r['partner'] is not None:
            pairs.append(dict(run=r, rho=r['rho'], T=r['T'], stride=r['stride'], heldout=pair_heldout(r),
                              cfg_key=config_key(r['config'], with_seed=False),
                              delta=r['loss'][metric] - r['partner']['loss'][metric]))
    fit = [p for p in pairs if not p['heldout']]
    test = [p for p in pairs if p['heldout']]
    sparse_fit = [p for p in fit if p['rho'] > 1 + 1e-12]
    rel = dict(form=FORM, T0=T0, s0=S0, selection="model=='xmod' and gate=='variance' and balance>0, "
               'paired by seed with its FLOP-matched dense partner', n_pairs=len(fit), n_heldout_pairs=len(test),
               n_configs=len({p['cfg_key'] for p in fit}), contexts=sorted({p['T'] for p in sparse_fit}),
               strides=sorted({p['stride'] for p in sparse_fit}),
               rho_range=[min(p['rho'] for p in fit), max(p['rho'] for p in fit)] if fit else None)
    metrics = dict(fit=None, heldout=None, cv=None, ablation={})
    active, notes = identifiable_terms(fit)
    if not fit or not active:
        why = 'every full X-MoD pair is held out' if pairs and not fit else 'no full X-MoD pair with rho > 1 to fit'
        rel.update(fitted=False, note=why,
                   coefficients={t: dict(value=None, ci_low=None, ci_high=None, constrained=False,
                                         note=notes.get(t, 'not fitted')) for t in TERMS})
        return rel, metrics, pairs
    y = np.array([p['delta'] for p in fit])
    coef = wls(rel_design(fit, active), y)
    # bootstrap: resample pairs (runs) with replacement = integer weights on the exact least-squares solve
    samples = []
    X = rel_design(fit, active)
    for _ in range(n_boot):
        wb = np.bincount(rng.integers(0, len(fit), len(fit)), minlength=len(fit)).astype(np.float64)
        if full_rank(X, wb):
            samples.append(wls(X, y, wb))
    ci = ci_dict(samples, active)
    rel['coefficients'] = {t: dict(value=float(coef[active.index(t)]) if t in active else None,
                                   ci_low=ci[t][0] if t in active and ci[t] else None,
                                   ci_high=ci[t][1] if t in active and ci[t] else None,
                                   constrained=t in active, note=notes.get(t, '')) for t in TERMS}
    rel.update(fitted=True, active_terms=active, bootstrap=dict(n=n_boot, n_valid=len(samples)))
    for p in pairs:
        p['pred'] = float(rel_predict([p], active, coef)[0])
    metrics['fit'] = pair_metrics(fit, metric, dense, delta_std)
    metrics['heldout'] = pair_metrics(test, metric, dense, delta_std) if test else None
    metrics['cv'] = dict(delta_rmse=loco_cv(fit, active), scheme='leave one configuration (all seeds) out')
    # ablations: refit with each term removed; a term earns its place if the errors grow without it
    for name, terms in [('full', active)] + [(f'no_{t}', [u for u in active if u != t]) for t in active]:
        c = wls(rel_design(fit, terms), y) if terms else np.zeros(0)
        metrics['ablation'][name] = dict(
            terms=terms, fit_rmse=delta_metrics(y, rel_predict(fit, terms, c))['rmse'],
            cv_rmse=loco_cv(fit, terms),
            heldout_rmse=delta_metrics(np.array([p['delta'] for p in test]), rel_predict(test, terms, c))['rmse'])
    for t in TERMS:
        if t not in active:
            metrics['ablation'][f'no_{t}'] = dict(note=notes[t])
    return rel, metrics, pairs


def pair_metrics(pairs, metric, dense, delta_std):
    obs = np.array([p['delta'] for p in pairs])
    pred = np.array([p['pred'] for p in pairs])
    out = delta_metrics(obs, pred)
    L = np.array([p['run']['loss'][metric] for p in pairs])
    Lpart = np.array([p['run']['partner']['loss'][metric] for p in pairs])
    Llaw = np.array([dense_predict(dense, p['run']['partner']['params_total'], p['run']['partner']['tokens'])
                     for p in pairs])
    rel_law, rel_part = np.abs(Llaw + pred - L) / L, np.abs(Lpart + pred - L) / L
    sign = np.sign(pred) == np.sign(obs)
    big = np.abs(obs) > 2 * delta_std if delta_std else None
    out.update(L_rel_err_law_mean=float(rel_law.mean()), L_rel_err_law_max=float(rel_law.max()),
               L_rel_err_partner_mean=float(rel_part.mean()), L_rel_err_partner_max=float(rel_part.max()),
               sign_acc=float(sign.mean()),
               sign_acc_big=float(sign[big].mean()) if big is not None and big.any() else None,
               n_big=int(big.sum()) if big is not None else None)
    return out


# -----------------------------------------------------------------------------
# seed noise

def pooled_std(groups):
    """Pooled std over groups with >= 2 members: sqrt(sum (n_i - 1) var_i / sum (n_i - 1))."""
    groups = [np.array(g) for g in groups if len(g) >= 2]
    if not groups:
        return None, 0
    dof = sum(len(g) - 1 for g in groups)
    return float(math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof)), len(groups)


def seed_noise(runs, metric):
    by_cfg, by_pair = {}, {}
    for r in runs:
        k = config_key(r['config'], with_seed=False)
        by_cfg.setdefault(k, []).append(r['loss'][metric])
        if r['partner'] is not None:
            by_pair.setdefault(k, []).append(r['loss'][metric] - r['partner']['loss'][metric])
    loss_std, n_l = pooled_std(by_cfg.values())
    delta_std, n_d = pooled_std(by_pair.values())
    return dict(loss_std=loss_std, delta_std=delta_std, n_loss_configs=n_l, n_delta_configs=n_d)


# -----------------------------------------------------------------------------
# one metric, end to end

def fit_metric(runs, metric, n_boot, seed_, dense_cache):
    noise = seed_noise(runs, metric)
    # dense runs have val_loss == val_loss_causal, so the second metric's dense fit is usually the first one's
    key = tuple(r['loss'][metric] for r in runs if r['model'] == 'dense' and not r['heldout'])
    if key not in dense_cache:
        dense_cache[key] = run_dense(runs, metric, n_boot, np.random.default_rng([seed_, 0]))
    dense = dense_cache[key]
    rel, metrics, pairs = run_relative(runs, metric, dense, noise['delta_std'], n_boot,
                                       np.random.default_rng([seed_, 1]))
    held_dense = [r for r in runs if r['model'] == 'dense' and r['heldout']]
    fit_dense_runs = [r for r in runs if r['model'] == 'dense' and not r['heldout']]

    def dense_err(rs):
        if not rs:
            return None
        e = [abs(dense_predict(dense, r['params_total'], r['tokens']) - r['loss'][metric]) / r['loss'][metric]
             for r in rs]
        return dict(n=len(rs), L_rel_err_mean=float(np.mean(e)), L_rel_err_max=float(np.max(e)))
    metrics['dense'] = dict(rmse_log=dense['rmse_log'], fit=dense_err(fit_dense_runs), heldout=dense_err(held_dense))
    metrics['seed_noise'] = noise
    return dict(dense=dense, relative=rel, metrics=metrics), pairs


# -----------------------------------------------------------------------------
# plots: each one says so instead of failing when its data is absent

COLORS = {'dense': 'black', 'mod': 'tab:orange', 'xmod': 'tab:blue', 'moe': 'tab:green', 'xmod-plain': 'tab:purple',
          'xmod-nobal': 'tab:cyan', 'xmod-plain-nobal': 'tab:pink'}
MARKERS = {'dense': 'o', 'mod': 's', 'xmod': '^', 'moe': 'D', 'xmod-plain': 'v', 'xmod-nobal': '<',
           'xmod-plain-nobal': '>'}


def empty_note(ax, text):
    ax.text(0.5, 0.5, text, ha='center', va='center', transform=ax.transAxes, wrap=True)


def plot_loss_vs_flops(ax, runs, metric):
    for v in sorted({r['variant'] for r in runs}, key=list(COLORS).index):
        rs = [r for r in runs if r['variant'] == v]
        ax.scatter([r['flops'] for r in rs], [r['loss'][metric] for r in rs], c=COLORS[v], marker=MARKERS[v],
                   label=v, s=25, zorder=3)
    for r in runs:  # thin grey lines join each sparse run to its FLOP-matched dense partner
        if r['partner'] is not None:
            ax.plot([r['partner']['flops'], r['flops']], [r['partner']['loss'][metric], r['loss'][metric]],
                    c='0.7', lw=0.7, zorder=1)
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=metric, title='loss vs compute (grey: FLOP-matched pairs)')
    ax.legend(fontsize=7)


def plot_loss_vs_params(ax, runs, metric):
    groups = [(d, [d] + [r for r in runs if r['partner'] is d]) for d in runs if d['model'] == 'dense']
    groups = [(d, g) for d, g in groups if len(g) > 1]
    if not groups:
        return empty_note(ax, 'no FLOP-matched sparse/dense group')
    for d, g in groups:
        g = sorted(g, key=lambda r: r['params_total'])
        ax.plot([r['params_total'] for r in g], [r['loss'][metric] for r in g], c='0.75', lw=0.8, zorder=1)
        for r in g:
            ax.scatter(r['params_total'], r['loss'][metric], c=COLORS[r['variant']], marker=MARKERS[r['variant']],
                       s=25, zorder=3)
    for v in sorted({r['variant'] for _, g in groups for r in g}, key=list(COLORS).index):
        ax.scatter([], [], c=COLORS[v], marker=MARKERS[v], label=v)
    ax.set_xscale('log')
    ax.set(xlabel='total non-embedding parameters', ylabel=metric,
           title='loss vs total params at fixed active compute\n(one grey line per dense run and its partners)')
    ax.legend(fontsize=7)


def plot_pred_vs_obs(axes, runs, pairs, res, metric):
    ax = axes[0]
    pp = [p for p in pairs if 'pred' in p]
    if pp:
        for held, c, m, lab in ((False, 'tab:blue', 'o', 'fit'), (True, 'tab:red', 'x', 'held out')):
            q = [p for p in pp if p['heldout'] == held]
            if q:
                ax.scatter([p['delta'] for p in q], [p['pred'] for p in q], c=c, marker=m, label=lab, s=25)
        lo = min(min(p['delta'] for p in pp), min(p['pred'] for p in pp))
        hi = max(max(p['delta'] for p in pp), max(p['pred'] for p in pp))
        ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)
        ax.legend(fontsize=7)
    else:
        empty_note(ax, 'relative law not fitted')
    ax.set(xlabel='observed Delta (nats)', ylabel='predicted Delta', title='X-MoD Delta vs FLOP-matched dense')
    ax = axes[1]
    pts = [(r['loss'][metric], dense_predict(res['dense'], r['params_total'], r['tokens']), r['heldout'], 'dense')
           for r in runs if r['model'] == 'dense']
    pts += [(p['run']['loss'][metric], dense_predict(res['dense'], p['run']['partner']['params_total'],
                                                     p['run']['partner']['tokens']) + p['pred'], p['heldout'], 'xmod')
            for p in pp]
    for fam in ('dense', 'xmod'):
        for held in (False, True):
            q = [x for x in pts if x[3] == fam and x[2] == held]
            if q:
                ax.scatter([x[0] for x in q], [x[1] for x in q], c=COLORS[fam], marker='x' if held else MARKERS[fam],
                           label=f'{fam} {"held out" if held else "fit"}', s=25)
    lo, hi = min(min(x[0], x[1]) for x in pts), max(max(x[0], x[1]) for x in pts)
    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)
    ax.set(xlabel=f'observed {metric}', ylabel='predicted', title='L: dense law (+ predicted Delta for X-MoD)')
    ax.legend(fontsize=7)


def plot_delta_vs_logrho(axes, pairs, res):
    rel = res['relative']
    if not pairs:
        for ax in axes:
            empty_note(ax, 'no full X-MoD run with a dense partner')
        return
    coef = {t: (c['value'] or 0.0) for t, c in rel['coefficients'].items()}
    law = lambda lr, T, s: lr * (-coef['capacity_gain'] + coef['context_correction'] * math.log(T / T0)
                                 + coef['stride_interaction'] * math.log(s / S0))
    most = lambda xs: max(set(xs), key=xs.count)
    T_ref, s_ref = most([p['T'] for p in pairs]), most([p['stride'] for p in pairs])
    x_max = max(math.log(p['rho']) for p in pairs) * 1.05 or 1.0
    xs = np.linspace(0, x_max, 50)
    import matplotlib
    cmap = matplotlib.colormaps['viridis']
    for ax, key, ref, other in ((axes[0], 'stride', T_ref, 'T'), (axes[1], 'T', s_ref, 'stride')):
        vals = sorted({p[key] for p in pairs})
        for i, v in enumerate(vals):
            c = cmap(i / max(1, len(vals) - 1))
            q = [p for p in pairs if p[key] == v]
            ax.scatter([math.log(p['rho']) for p in q], [p['delta'] for p in q], color=c, s=22, label=f'{key}={v}')
            held = [p for p in q if p['heldout']]
            ax.scatter([math.log(p['rho']) for p in held], [p['delta'] for p in held], facecolors='none',
                       edgecolors='red', s=70)
            if rel.get('fitted'):
                T, s = (ref, v) if key == 'stride' else (v, ref)
                ax.plot(xs, [law(x, T, s) for x in xs], color=c, lw=1)
        ax.axhline(0, c='0.6', lw=0.6)
        ax.set(xlabel='log rho (total / active params)', ylabel='Delta (nats)',
               title=f'one line per {key} (law at {other}={ref}; red ring = held out)')
        ax.legend(fontsize=7)


def shape_label(r):
    s = f'{r["variant"]} L{r["n_layer"]}'
    if r['stride'] is not None:
        s += f' s{r["stride"]} c{r["capacity"]:g}'
    return s + f' T{r["T"]}'


def plot_ablations(ax, runs, metric):
    by = {}
    for r in runs:
        if r['partner'] is not None:
            by.setdefault(config_key(r['config'], with_seed=False), []).append(r)
    if not by:
        return empty_note(ax, 'no sparse run with a dense partner')
    # bars sorted by shape (layers, stride, capacity, context) so a full X-MoD config sits beside its ablations
    items = sorted(by.values(), key=lambda rs: (rs[0]['T'], rs[0]['n_layer'], rs[0]['stride'] or 0,
                                                rs[0]['capacity'] or 0, list(COLORS).index(rs[0]['variant'])))
    for i, rs in enumerate(items):
        d = [r['loss'][metric] - r['partner']['loss'][metric] for r in rs]
        ax.bar(i, np.mean(d), color=COLORS[rs[0]['variant']], yerr=np.std(d, ddof=1) if len(d) > 1 else None,
               capsize=3)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([shape_label(rs[0]) for rs in items], rotation=75, fontsize=6)
    for v in sorted({rs[0]['variant'] for rs in items}, key=list(COLORS).index):
        ax.bar(0, 0, color=COLORS[v], label=v)
    ax.axhline(0, c='k', lw=0.6)
    ax.set(ylabel=f'Delta vs FLOP-matched dense ({metric})',
           title='ablations against full X-MoD\n(bars: mean over seeds; error bars: std over seeds)')
    ax.legend(fontsize=7)


def plot_training_curves(ax, runs, metric):
    best = None
    for d in runs:
        if d['model'] != 'dense':
            continue
        quartet, cost = [d], 0.0
        for fam in ('mod', 'xmod', 'moe'):
            cands = [r for r in runs if r['partner'] is d and r['variant'] == fam]
            if cands:
                r = min(cands, key=lambda r: abs(math.log(r['fpt'] / d['fpt'])))
                quartet.append(r)
                cost += abs(math.log(r['fpt'] / d['fpt']))
        score = (len(quartet), -cost)
        if len(quartet) > 1 and (best is None or score > best[0]):
            best = (score, quartet)
    if best is None:
        return empty_note(ax, 'no FLOP-matched dense / MoD / X-MoD / MoE group: skipped')
    quartet = best[1]
    shown = []
    for r in quartet:
        ax.plot(r['log']['flops'], r['log'][metric], c=COLORS[r['variant']], label=f'{r["variant"]}: {r["name"]}')
        shown += [v for f, v in zip(r['log']['flops'], r['log'][metric]) if f > 0]   # step 0 is off a log axis
    if shown:
        lo, hi = min(shown), max(shown)
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    missing = [f for f in ('mod', 'xmod', 'moe') if f not in {r['variant'] for r in quartet}]
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=metric,
           title='FLOP-matched training curves' + (f' (missing: {", ".join(missing)})' if missing else ''))
    ax.legend(fontsize=7)


def make_plots(out, runs, pairs, res, metric):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    specs = [('loss_vs_flops', 1, lambda a: plot_loss_vs_flops(a[0], runs, metric)),
             ('loss_vs_params', 1, lambda a: plot_loss_vs_params(a[0], runs, metric)),
             ('pred_vs_obs', 2, lambda a: plot_pred_vs_obs(a, runs, pairs, res, metric)),
             ('delta_vs_logrho', 2, lambda a: plot_delta_vs_logrho(a, pairs, res)),
             ('ablations', 1, lambda a: plot_ablations(a[0], runs, metric)),
             ('training_curves', 1, lambda a: plot_training_curves(a[0], runs, metric))]
    paths = []
    for name, n, draw in specs:
        fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.8), squeeze=False)
        draw(list(axes[0]))
        fig.tight_layout()
        paths.append(os.path.join(out, f'{name}.png'))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# -----------------------------------------------------------------------------
# summary.md

def fmt(x, spec='.4g'):
    return '-' if x is None else format(x, spec)


def md_table(header, rows):
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def summary_md(result, runs):
    bm, metrics = result['by_metric'], list(result['by_metric'])
    s = [f'# X-MoD scaling-law fit\n', f'Primary metric: `{result["metric"]}`. Inputs: {result["inputs"]["n_runs"]} '
         f'finished runs ({", ".join(f"{k} {v}" for k, v in result["inputs"]["variants"].items())}), '
         f'{result["inputs"]["n_heldout"]} held out' + (f' by `{result["inputs"]["holdout"]}`' if result['inputs']['holdout']
                                                 else ' (no --holdout)') + '.\n']
    if result['warnings']:
        s.append('Warnings:\n' + '\n'.join(f'- {w}' for w in result['warnings']) + '\n')
    s.append('## Dense law: L = E + A/N^alpha + B/D^beta\n')
    rows = []
    for k in ('E', 'A', 'alpha', 'B', 'beta'):
        rows.append([k] + [f'{bm[m]["dense"][k]:.6g} [{fmt(lo)}, {fmt(hi)}]'
                           for m in metrics for lo, hi in [bm[m]['dense']['ci'][k] or (None, None)]])
    rows.append(['rmse(log L)'] + [f'{bm[m]["dense"]["rmse_log"]:.4g}' for m in metrics])
    ill = lambda d: 'ill-posed: ' + '; '.join(d['notes']) if d['ill_posed'] else 'well-posed'
    rows.append(['runs'] + [f'{bm[m]["dense"]["n_runs"]} ({ill(bm[m]["dense"])})' for m in metrics])
    s.append(md_table(['', *(f'{m} (95% CI)' for m in metrics)], rows) + '\n')
    s.append(f'## Relative law (full X-MoD vs FLOP-matched dense)\n\n`{FORM}`, T0={T0}, s0={S0}\n')
    rows = [[t] + [(f'{c["value"]:.5g} [{fmt(c["ci_low"])}, {fmt(c["ci_high"])}]' if c['value'] is not None
                    else f'not fitted: {c["note"]}') for c in (bm[m]['relative']['coefficients'][t] for m in metrics)]
            for t in TERMS]
    rows.append(['pairs (fit / held out)'] + [f'{bm[m]["relative"]["n_pairs"]} / {bm[m]["relative"]["n_heldout_pairs"]}'
                                               for m in metrics])
    s.append(md_table(['term', *(f'{m} (95% CI)' for m in metrics)], rows) + '\n')
    s.append('## Errors\n')
    keys = [('fit', 'rmse', 'Delta RMSE (fit)'), ('fit', 'r2', 'Delta R^2 (fit)'),
            ('cv', 'delta_rmse', 'Delta RMSE (leave-one-config-out)'),
            ('heldout', 'rmse', 'Delta RMSE (held out)'), ('heldout', 'r2', 'Delta R^2 (held out)'),
            ('heldout', 'L_rel_err_law_mean', 'L rel. err, dense law + Delta (held out)'),
            ('heldout', 'L_rel_err_partner_mean', 'L rel. err, observed partner + Delta (held out)'),
            ('heldout', 'sign_acc', 'sign of Delta right (held out)'),
            ('heldout', 'sign_acc_big', 'sign right where abs(Delta) > 2 seed noise (held out)')]
    rows = [[lab] + [fmt((bm[m]['metrics'][grp] or {}).get(k)) for m in metrics] for grp, k, lab in keys]
    for m_ in ('fit', 'heldout'):
        rows.append([f'dense L rel. err ({m_})'] + [fmt((bm[m]['metrics']['dense'][m_] or {}).get('L_rel_err_mean'))
                                                    for m in metrics])
    for k in ('loss_std', 'delta_std'):
        rows.append([f'seed noise: {k}'] + [fmt(bm[m]['metrics']['seed_noise'][k]) for m in metrics])
    s.append(md_table(['', *metrics], rows) + '\n')
    s.append('## Does each term earn its place? (refit without it)\n')
    rows = []
    for m in metrics:
        for name, a in bm[m]['metrics']['ablation'].items():
            rows.append([m, name, fmt(a.get('fit_rmse')), fmt(a.get('cv_rmse')), fmt(a.get('heldout_rmse')),
                         a.get('note', '')])
    s.append(md_table(['metric', 'model', 'fit RMSE', 'CV RMSE', 'held-out RMSE', 'note'], rows) + '\n')
    s.append('## Runs\n')
    m, o = result['metric'], [x for x in METRICS if x != result['metric']][0]
    rows = []
    for r in sorted(runs, key=lambda r: (r['variant'], r['T'], r['n_layer'], r['stride'] or 0, r['capacity'] or 0,
                                         r['seed'])):
        p = r['partner']
        rows.append([r['name'], r['variant'], r['n_layer'], fmt(r['stride'], 'd'), fmt(r['capacity'], 'g'), r['T'],
                     f'{r["rho"]:.4g}', f'{r["loss"][m]:.5f}', fmt(p and p['loss'][m], '.5f'),
                     fmt(p and r['loss'][m] - p['loss'][m], '+.5f'), fmt(p and r['loss'][o] - p['loss'][o], '+.5f'),
                     'held out' if r['heldout'] else ''])
    s.append(md_table(['run', 'model', 'n_layer', 'stride', 'capacity', 'T', 'rho', f'L ({m})', 'partner L',
                       'Delta', f'Delta ({o})', ''], rows) + '\n')
    return '\n'.join(s)


# -----------------------------------------------------------------------------

def to_json(x):
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip(), epilog=__doc__[__doc__.index(
        'Input validation'):__doc__.index('Outputs in')], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('runs', nargs='+', help='run directories, globs of them, or folders holding run directories')
    p.add_argument('--out', required=True, help='output directory (created)')
    p.add_argument('--holdout', default=None, help="runs to hold out of both fits and predict, a Python expression "
                   "over config keys, params_total, params_active, flops_per_token, rho, tokens, max_tokens_all; "
                   "e.g. \"model=='xmod' and stride==8\" or 'tokens==max_tokens_all'")
    p.add_argument('--metric', default=metric, choices=METRICS, help=f'loss to fit (default {metric}); the other is '
                   'fitted and reported beside it')
    p.add_argument('--bootstrap', type=int, default=bootstrap, help=f'bootstrap resamples (default {bootstrap})')
    p.add_argument('--seed', type=int, default=seed, help='bootstrap seed')
    args = p.parse_args(argv)
    if args.bootstrap < 0:
        p.error('--bootstrap must be >= 0')
    return args


def run(args):
    WARNINGS.clear()
    runs = load_runs(args.runs)
    pair_runs(runs)
    mark_heldout(args.holdout, runs)
    dense_fit = [r for r in runs if r['model'] == 'dense' and not r['heldout']]
    if not dense_fit:
        raise InputError(f'{" ".join(args.runs)}: no dense run to fit the dense law '
                         + ('(all held out)' if any(r['model'] == 'dense' for r in runs) else '(none found)'))
    torch.set_num_threads(1)  # tiny problems: threads cost more than they give
    by_metric, pairs_by_metric, dense_cache = {}, {}, {}
    for m in (args.metric, *[x for x in METRICS if x != args.metric]):
        by_metric[m], pairs_by_metric[m] = fit_metric(runs, m, args.bootstrap, args.seed, dense_cache)
    variants = {}
    for r in runs:
        variants[r['variant']] = variants.get(r['variant'], 0) + 1
    result = dict(metric=args.metric,
                  inputs=dict(n_runs=len(runs), variants=variants, holdout=args.holdout,
                              n_heldout=sum(r['heldout'] for r in runs), bootstrap=args.bootstrap, seed=args.seed),
                  warnings=list(WARNINGS), **by_metric[args.metric], by_metric=by_metric,
                  runs=[dict(run=r['name'], dir=r['dir'], model=r['model'], variant=r['variant'],
                             n_layer=r['n_layer'], n_embd=r['n_embd'], stride=r['stride'], capacity=r['capacity'],
                             T=r['T'], seed=r['seed'], params_total=r['params_total'],
                             params_active=r['params_active'], rho=r['rho'], flops_per_token=r['fpt'],
                             tokens=r['tokens'], flops=r['flops'], heldout=r['heldout'], loss=r['loss'],
                             partner=r['partner']['name'] if r['partner'] else None,
                             delta={m: r['loss'][m] - r['partner']['loss'][m] for m in METRICS}
                             if r['partner'] else None) for r in runs])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'fit.json'), 'w') as f:
        json.dump(to_json(result), f, indent=1)
    with open(os.path.join(args.out, 'summary.md'), 'w') as f:
        f.write(summary_md(result, runs))
    plots = make_plots(args.out, runs, pairs_by_metric[args.metric], by_metric[args.metric], args.metric)
    print_summary(result, args.out, len(plots))
    return result


def print_summary(result, out, n_plots):
    i = result['inputs']
    print(f'runs: {i["n_runs"]} ({", ".join(f"{k} {v}" for k, v in i["variants"].items())}), {i["n_heldout"]} held '
          f'out' + (f' by {i["holdout"]!r}' if i['holdout'] else ''))
    for m, r in result['by_metric'].items():
        d = r['dense']
        print(f'[{m}] dense: L = {d["E"]:.4g} + {d["A"]:.4g}/N^{d["alpha"]:.4g} + {d["B"]:.4g}/D^{d["beta"]:.4g}, '
              f'rmse(log L) {d["rmse_log"]:.3g}' + (' (ill-posed: ' + '; '.join(d['notes']) + ')' if d['ill_posed']
                                                    else ''))
        if not r['relative'].get('fitted'):
            print(f'[{m}] relative: not fitted ({r["relative"]["note"]})')
            continue
        c = r['relative']['coefficients']
        terms = ', '.join(f'{t} {c[t]["value"]:.4g} [{fmt(c[t]["ci_low"])}, {fmt(c[t]["ci_high"])}]'
                          if c[t]['value'] is not None else f'{t} -' for t in TERMS)
        fit, held = r['metrics']['fit'] or {}, r['metrics']['heldout'] or {}
        print(f'[{m}] relative ({r["relative"]["n_pairs"]} pairs): {terms}; Delta rmse fit {fmt(fit.get("rmse"))}, '
              f'held out {fmt(held.get("rmse"))} (R^2 {fmt(held.get("r2"))}); seed noise L '
              f'{fmt(r["metrics"]["seed_noise"]["loss_std"])}, Delta {fmt(r["metrics"]["seed_noise"]["delta_std"])}')
    print(f'wrote {os.path.join(out, "fit.json")}, summary.md and {n_plots} plots')


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except InputError as e:
        print(f'fit_law.py: error: {e}', file=sys.stderr)
        sys.exit(2)


if __name__ == '__main__':
    main()
