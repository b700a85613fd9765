"""
law/load.py: a sweep's finished runs as fit_law.py needs them: run.json and log.csv read and checked against train.py's
contract, duplicates refused, sparse runs paired with FLOP-matched dense partners, --holdout filters applied. A run's
model is what xmod.GPTConfig makes of it (family defaults, layout), so no rule of the model is restated here. Bad
input raises configurator.UserError (one line, exit 2); the list: docs/fit_law.md.
"""

import csv
import dataclasses
import difflib
import glob
import json
import math
import operator
import os
import re
import sys
from collections import Counter

import numpy as np

import xmod
from configurator import UserError, configure
from run_folder import LOG_COLUMNS

METRICS = ('val_loss_causal', 'val_loss')
REQUIRED_TOP = ('config', 'params_total', 'params_active', 'flops_per_token', 'tokens_per_iter', 'seed', 'finished')
# what fit_law.py reads of the model; GPTConfig has a default for each, and a silent default would be a wrong run
REQUIRED_MODEL = ('model', 'n_layer', 'n_head', 'n_embd', 'block_size', 'stride', 'capacity', 'gate',
                  'depth_balance')
USED_COLUMNS = ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal')  # these must be finite in every row
# config keys that cannot change a run's result: two runs differing only in these are the same experiment
IGNORE_KEYS = ('out_dir', 'init_from', 'log_interval', 'compile', 'device', 'overwrite', 'stop_iter', 'dtype',
               'backend', 'eval_interval', 'data_dir', 'threads', 'save_steps')
# pairing tolerances: the same training tokens, and match_flops' 2% (docs/design.md, The law)
TOKENS_TOL = 0.01
FPT_TOL = 0.02


WARNINGS = []              # fit.json's and the modes' `warnings`; command_line empties it
PROG = ['fit_law.py']      # the command that warns: command_line sets it (python -m law.rates, ...)


def warn(msg):
    WARNINGS.append(msg)
    print(f'{PROG[0]}: warning: {msg}', file=sys.stderr)


# -----------------------------------------------------------------------------
# reading runs

def find_run_dirs(patterns):
    """Each argument must yield a run directory or a .csv file; what a glob also catches (a fit) is passed over."""
    dirs = []
    for p in patterns:
        matches = sorted(glob.glob(p)) if any(c in p for c in '*?[') else [p]
        if not matches or not os.path.exists(matches[0]):
            raise UserError(f'{p}: matches no file or directory')
        found = []
        for m in matches:
            if m.endswith('.csv') and os.path.isfile(m):
                found.append(m)               # a CSV of runs (load_csv)
                continue
            if os.path.basename(m) == 'run.json':
                m = os.path.dirname(m) or '.'
            if os.path.isdir(m):
                found += sorted(root for root, _, files in os.walk(m) if 'run.json' in files)
        if not found:
            raise UserError(f'{p}: no run.json in it or below it, and not a .csv file of runs')
        dirs += found
    unique = {}
    for d in dirs:  # overlapping globs: a directory is read once
        unique.setdefault(os.path.realpath(d), d)
    return list(unique.values())


def load_log(path):
    """log.csv -> {column: np.array} for USED_COLUMNS, after checking the contract."""
    try:
        with open(path, newline='') as f:
            rows = [r for r in csv.reader(f) if r]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f'{path}: cannot read ({e})')
    if not rows:
        raise UserError(f'{path}: empty file')
    header = [h.strip() for h in rows[0]]
    missing = [c for c in LOG_COLUMNS if c not in header]
    if missing:
        raise UserError(f'{path}: missing column(s) {", ".join(missing)}')
    if len(rows) < 2:
        raise UserError(f'{path}: no evaluation rows')
    cols = {c: [] for c in USED_COLUMNS}
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise UserError(f'{path}: line {lineno} has {len(row)} fields, the header has {len(header)}')
        for c in USED_COLUMNS:
            cell = row[header.index(c)].strip()
            try:
                v = float(cell)
            except ValueError:
                raise UserError(f'{path}: line {lineno}: {c} is not a number ({cell!r})')
            if not math.isfinite(v):
                raise UserError(f'{path}: line {lineno}: {c} is {cell!r} (a diverged or corrupted run: '
                                f'leave it out of the inputs)')
            cols[c].append(v)
    return {c: np.array(v, dtype=np.float64) for c, v in cols.items()}


def positive_number(meta, key, path):
    v = meta[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise UserError(f'{path}: {key} must be a positive finite number, got {v!r}')
    return float(v)


# what a run written before a switch existed ran with, where the switch's default is not that: MoD's router BCE was
# centred on the cut until MoD as published (raw) became its family default
BEFORE_SWITCH = dict(router='learned', bce_logits='centred', resid_init='layers')


def model_of(meta, path):
    """The run's model as xmod.GPTConfig builds it from run.json's "model_config" (or "config" in older runs), given
    only GPTConfig's fields (one added to or dropped from it does not break old runs)."""
    src = 'model_config' if 'model_config' in meta else 'config'
    given = meta[src]
    if not isinstance(given, dict):
        raise UserError(f'{path}: "{src}" is not an object')
    for k in REQUIRED_MODEL:
        if k not in given:
            raise UserError(f'{path}: {src} is missing key "{k}"')
    if given['model'] not in xmod.MODELS:
        raise UserError(f'{path}: unknown model {given["model"]!r} (expected one of {", ".join(xmod.MODELS)})')
    fields = {f.name for f in dataclasses.fields(xmod.GPTConfig)}
    given = {**BEFORE_SWITCH, **given, **({'stride': 2} if given['model'] == 'mod' else {})}   # MoD's one stride
    try:
        return xmod.GPTConfig(**{k: v for k, v in given.items() if k in fields})
    except (TypeError, ValueError) as e:
        raise UserError(f'{path}: {src}: {e}')


XMOD_BALANCE = xmod.GPTConfig(model='xmod').depth_balance         # X-MoD's own depth-balance coefficient
ROUTER_KNOBS = ('router_bce', 'router_momentum', 'router_zloss')   # a run with one off its default is a fix, not X-MoD


def variant(mc):
    """The family, with its ablations told apart so that the law never mixes them in: 'xmod' is the full recipe,
    'xmod-mom0', 'xmod-bal0.5', 'xmod-nobal', 'xmod-random', 'xmod-raw', 'mod-centred', 'xmod-active', 'moe-cf1', ..."""
    family = xmod.GPTConfig(model=mc.model)
    if mc.model == 'moe':
        cf = mc.expert_capacity_factor
        return 'moe' + ('' if cf == family.expert_capacity_factor else f'-cf{cf:g}')
    if mc.model == 'dense':
        return 'dense'
    bce = '' if mc.bce_logits == family.bce_logits else f'-{mc.bce_logits}'
    extra = ('-random' if mc.router == 'random' else '') + bce + ('-active' if mc.resid_init == 'active' else '')
    if mc.model == 'mod':
        return 'mod' + extra
    balance = '' if mc.depth_balance == XMOD_BALANCE else '-nobal' if mc.depth_balance == 0 else \
        f'-bal{mc.depth_balance:g}'
    name = 'xmod' + {'variance': '', 'plain': '-plain', 'calibrated': '-calgate'}[mc.gate] + balance + extra
    for field, short in zip(ROUTER_KNOBS, ('bce', 'mom', 'z')):
        if getattr(mc, field) != getattr(xmod.GPTConfig, field):
            name += f'-{short}{getattr(mc, field):g}'
    return name


# The committed fits ordered their runs with four keys spelled as before they took their losses' names: config_key
# sorts those keys where they stood then, so the order, and so every bootstrap draw, stays what it was
SORTS_AS = {'router_bce': 'router_aux', 'depth_balance': 'balance', 'moe_balance': 'moe_aux', 'bce_logits': 'router_bce'}


def config_key(cfg, with_seed=True):
    """A run's configuration as one string, equal for equal experiments (IGNORE_KEYS and wandb keys out, keys
    sorted, SORTS_AS): runs group and are ordered by it (load_runs). with_seed=False: the same for all seeds."""
    c = {k: v for k, v in cfg.items() if k not in IGNORE_KEYS and not k.startswith('wandb')}
    if not with_seed:
        c.pop('seed', None)
    return json.dumps(dict(sorted(c.items(), key=lambda kv: SORTS_AS.get(kv[0], kv[0]))), default=str)


def check_final(meta, last, jpath, lpath):
    """The last log.csv row must be the evaluation run.json records as "final" (older runs may not record it)."""
    final = meta['final'] if isinstance(meta.get('final'), dict) else {}
    # tolerances (absolute, relative): step exact, tokens to rounding, flops 0.1%, losses 1e-4 nats
    for k, tol_abs, tol_rel in (('step', 0, 0), ('tokens', 0.5, 1e-9), ('flops', 0, 1e-3), ('val_loss', 1e-4, 0),
                                ('val_loss_causal', 1e-4, 0)):
        v = final.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise UserError(f'{jpath}: final.{k} is not a finite number ({v!r})')
        if abs(v - last[k]) > tol_abs + tol_rel * abs(v):
            raise UserError(f'{lpath}: last row {k}={last[k]:.10g} disagrees with run.json final.{k}={v:.10g}')


def load_run(d):
    """One run directory -> a dict, or None (warned) for an unfinished run."""
    jpath = os.path.join(d, 'run.json')
    try:
        with open(jpath) as f:
            meta = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f'{jpath}: not valid JSON ({e})')
    if not isinstance(meta, dict):
        raise UserError(f'{jpath}: not a JSON object')
    for k in REQUIRED_TOP:
        if k not in meta:
            raise UserError(f'{jpath}: missing key "{k}"')
    if not isinstance(meta['config'], dict):
        raise UserError(f'{jpath}: "config" is not an object')
    mc = model_of(meta, jpath)
    # the config as --holdout, grouping and the duplicate check see it: the model's switches as it resolved them, so
    # a run from before a knob existed groups with a later one that left it at its default
    cfg = dict(meta['config'], gate=mc.gate, depth_balance=mc.depth_balance,
               **{k: getattr(mc, k) for k in ROUTER_KNOBS + tuple(BEFORE_SWITCH)})
    if isinstance(meta['seed'], bool) or not isinstance(meta['seed'], int):
        raise UserError(f'{jpath}: seed must be an integer, got {meta["seed"]!r}')
    n_total, n_active, fpt = (positive_number(meta, k, jpath) for k in ('params_total', 'params_active',
                                                                         'flops_per_token'))
    if n_active > n_total * (1 + 1e-9):
        raise UserError(f'{jpath}: params_active ({n_active:g}) > params_total ({n_total:g})')
    if meta['finished'] is not True:
        warn(f'{jpath}: unfinished run, skipped')
        return None
    lpath = os.path.join(d, 'log.csv')
    if not os.path.exists(lpath):
        raise UserError(f'{lpath}: missing (the run says it finished)')
    log = load_log(lpath)
    last = {c: log[c][-1] for c in USED_COLUMNS}
    check_final(meta, last, jpath, lpath)
    # training FLOPs = 3 x forward FLOPs per token x tokens (forward, backward); > 1% off: warned
    if abs(last['flops'] - 3 * fpt * last['tokens']) > 0.01 * last['flops']:
        warn(f'{lpath}: final flops {last["flops"]:.4g} != 3 * flops_per_token * tokens = '
             f'{3 * fpt * last["tokens"]:.4g}')
    routed = mc.model in ('mod', 'xmod')  # dense and MoE have no anchor stride or capacity
    return dict(dir=d, name=d, config=cfg, meta=meta, model=mc.model, variant=variant(mc),
                dataset=cfg.get('dataset', 'shakespeare'), n_layer=mc.n_layer,
                n_embd=mc.n_embd, T=mc.block_size, stride=mc.anchor_stride() if routed else None,
                capacity=float(mc.capacity) if routed else None, seed=meta['seed'], params_total=n_total,
                # rho = total / active parameters (1 when all are active): the laws read log rho
                params_active=n_active, rho=n_total / n_active, fpt=fpt, tokens=last['tokens'],
                flops=last['flops'], step=last['step'], loss={m: float(last[m]) for m in METRICS}, log=log,
                partner=None, heldout=False)


CSV_COLUMNS = ('N', 'D', 'loss')                      # every row: a dense run unless its model says otherwise
CSV_PAIR_COLUMNS = ('run', 'N_active', 'T', 'stride', 'partner')   # an X-MoD row (model=xmod) needs these too


def load_csv(path):
    """A CSV of runs, one row each (docs/fit_law.md: the columns) -> the runs as load_run gives them, each X-MoD
    row already paired; loss is both metrics'."""
    try:
        with open(path, newline='') as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f'{path}: cannot read ({e})')
    if not rows:
        raise UserError(f'{path}: no rows')
    by_name = {}
    for line, row in enumerate(rows, start=2):
        row = {k.strip(): (v or '').strip() for k, v in row.items() if k}
        model = row.get('model') or 'dense'
        need = CSV_COLUMNS + (CSV_PAIR_COLUMNS if model == 'xmod' else ())
        if model not in ('dense', 'xmod'):
            raise UserError(f'{path}: line {line}: model {model!r}: expected dense or xmod')
        if any(not row.get(k) for k in need):
            raise UserError(f'{path}: line {line}: needs {", ".join(need)}')
        try:
            num = {k: float(row[k]) for k in ('N', 'D', 'loss', 'N_active', 'T', 'stride', 'seed', 'flops')
                   if row.get(k)}
        except ValueError as e:
            raise UserError(f'{path}: line {line}: not a number ({e})')
        if any(not math.isfinite(v) or v <= 0 for k, v in num.items() if k != 'seed'):
            raise UserError(f'{path}: line {line}: N, D, loss, N_active, T, stride and flops must be positive numbers')
        N, n_active = num['N'], num.get('N_active', num['N'])
        if n_active > N:
            raise UserError(f'{path}: line {line}: N_active ({n_active:g}) > N ({N:g})')
        name = row.get('run') or f'line {line}'
        if name in by_name:
            raise UserError(f'{path}: line {line}: run {name!r} is named twice')
        T, stride = (int(num[k]) if k in num else None for k in ('T', 'stride'))
        by_name[name] = dict(
            dir=path, name=name, config=dict(model=model, N=N, N_active=n_active, D=num['D'], T=T, stride=stride),
            meta={}, model=model, variant=model, dataset=path, n_layer=None, n_embd=None, T=T or 0, stride=stride,
            capacity=None, seed=int(num.get('seed', 0)), params_total=N, params_active=n_active, rho=N / n_active,
            fpt=None, tokens=num['D'], flops=num.get('flops', 6 * N * num['D']), step=None,
            loss={m: num['loss'] for m in METRICS}, log=None, partner=row.get('partner') or None, heldout=False)
    runs = list(by_name.values())
    for r in runs:
        if r['partner'] is not None:
            d = by_name.get(r['partner'])
            if d is None or d['model'] != 'dense':
                raise UserError(f'{path}: run {r["name"]!r}: its partner {r["partner"]!r} is not a dense run here')
            r['partner'] = d
    return runs


def load_runs(patterns, one_corpus=True):
    """The finished runs of patterns (run folders, or CSV files of runs), each read once, in one canonical order.
    one_corpus=False lets runs on several corpora in (python -m law.regimes); else they are refused."""
    runs = []
    for d in find_run_dirs(patterns):
        runs += load_csv(d) if d.endswith('.csv') else [r for r in [load_run(d)] if r is not None]
    if not runs:
        raise UserError(f'{" ".join(patterns)}: no finished runs')
    seen = {}
    for r in runs:
        k = config_key(r['config']) + f'|seed={r["seed"]}'
        first = seen.get(k)
        # training is deterministic: one configuration and seed in two sweeps is one run, unless its numbers differ
        if first is not None and (first['loss'], first['tokens'], first['step']) == (r['loss'], r['tokens'], r['step']):
            warn(f'{os.path.join(r["dir"], "run.json")}: the same run as {os.path.join(first["dir"], "run.json")} '
                 f'(config, seed and final losses), read once')
            continue
        if first is not None:
            raise UserError(f'{os.path.join(r["dir"], "run.json")}: duplicate run, the same config and seed as '
                            f'{os.path.join(first["dir"], "run.json")}, with other final losses')
        seen[k] = r
    runs = list(seen.values())
    corpora = Counter(r['dataset'] for r in runs)
    if one_corpus and len(corpora) > 1:
        raise UserError(f'{" ".join(patterns)}: runs on {len(corpora)} corpora ('
                        + ', '.join(f'{k}: {n}' for k, n in sorted(corpora.items()))
                        + '): a law or a rate table is per corpus; give the runs of one (Delta across corpora: '
                        'python -m law.regimes)')
    # one order whatever the arguments': the bootstrap draws the same runs, any command line gives the same fit.json
    runs.sort(key=lambda r: (config_key(r['config'], with_seed=False), r['seed']))
    # short names for tables: the relative path, minus the prefix all runs share
    folders = [r for r in runs if r['log'] is not None]       # a CSV's runs keep their own names
    prefix = os.path.commonpath([os.path.abspath(r['dir']) for r in folders]) if len(folders) > 1 else None
    for r in folders:
        r['name'] = os.path.relpath(os.path.abspath(r['dir']), prefix) if prefix else os.path.basename(
            os.path.abspath(r['dir']))
    return runs


# -----------------------------------------------------------------------------
# pairing and --holdout filters

# the optimizer recipe, with the defaults of runs made before a key existed
RECIPE = (('learning_rate', None), ('min_lr', None), ('warmup_iters', None), ('decay_lr', True),
          ('lr_schedule', 'cosine'), ('cooldown_frac', 0.2))
recipe = lambda cfg: tuple(cfg.get(k, default) for k, default in RECIPE)


def pair_runs(runs):
    """Give every sparse run its FLOP-matched dense partner (same n_embd, block_size, seed, corpus; tokens and
    flops_per_token within TOKENS_TOL and FPT_TOL): the closest in flops_per_token, then the same optimizer recipe
    (a rate sweep pairs rate with rate, a WSD branch with a WSD branch). Warn for those without one."""
    dense = [r for r in runs if r['model'] == 'dense']
    sparse = [r for r in runs if r['model'] != 'dense']
    for r in (r for r in sparse if r['partner'] is None):      # a CSV's rows come paired
        cands = [d for d in dense if d['n_embd'] == r['n_embd'] and d['T'] == r['T'] and d['seed'] == r['seed']
                 and d['dataset'] == r['dataset']
                 and abs(d['tokens'] - r['tokens']) <= TOKENS_TOL * max(d['tokens'], r['tokens'])
                 and abs(r['fpt'] / d['fpt'] - 1) <= FPT_TOL]
        if cands:
            other = lambda d: sum(a != b for a, b in zip(recipe(d['config']), recipe(r['config'])))
            r['partner'] = min(cands, key=lambda d: (abs(math.log(r['fpt'] / d['fpt'])), other(d),
                                                     abs(d['tokens'] - r['tokens']), d['name']))
        else:
            warn(f'{os.path.join(r["dir"], "run.json")}: no FLOP-matched dense partner (same n_embd, block_size, '
                 f'seed; tokens within {TOKENS_TOL:.0%}; flops_per_token within {FPT_TOL:.0%}), left out of Delta')
    if sparse and not any(r['partner'] for r in sparse):
        raise UserError(f'{os.path.join(sparse[0]["dir"], "run.json")}: not one of the {len(sparse)} sparse runs '
                        f'has a FLOP-matched dense partner; check tokens and flops_per_token')


OPS = {'=': operator.eq, '==': operator.eq, '!=': operator.ne, '<': operator.lt, '<=': operator.le,
       '>': operator.gt, '>=': operator.ge}
# KEY OP VALUE; a word is taken as OP too, so that 'stride in 8' is told "bad operator" rather than "syntax error"
CONDITION = re.compile(r"""(\w+)\s*([=!<>]+|\s\w+\b)\s*('[^']*'|"[^"]*"|[^\s'"=!<>]+)""")


def parse_filter(text, keys, max_tokens_all):
    """One --holdout value, KEY OP VALUE joined by 'and' or ',' -> [(key, op, value)]."""
    conditions = []
    for part in re.split(r',|\sand\s', text):
        m = CONDITION.fullmatch(part.strip())
        if not m:
            raise UserError(f'--holdout {text!r}: syntax error in {part.strip()!r}: expected KEY OP VALUE (OP one of '
                            f'{" ".join(OPS)}), conditions joined by "and" or ","')
        key, op, value = m[1], m[2].strip(), m[3]
        if op not in OPS:
            raise UserError(f'--holdout {text!r}: bad operator {op!r} (use one of {" ".join(OPS)})')
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            raise UserError(f'--holdout {text!r}: unknown key {key!r}' + (f' (did you mean {close[0]!r}?)' if close
                            else '') + '; keys: config keys, run.json numbers (params_total, seed, ...), rho, tokens')
        if value[0] in '\'"':
            value = value[1:-1]
        elif value == 'max_tokens_all':
            value = max_tokens_all
        else:
            try:
                value = float(value)
            except ValueError:
                pass  # a bare string
        conditions.append((key, OPS[op], value))
    return conditions


def mark_heldout(filters, runs):
    """r['heldout']: whether a run matches every condition of at least one --holdout filter."""
    spaces = []
    for r in runs:  # what a filter can ask of a run: config keys, top-level numeric run.json fields, rho, tokens
        numbers = {k: v for k, v in r['meta'].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        spaces.append({**r['config'], **numbers, 'rho': r['rho'], 'tokens': r['tokens']})
        r['heldout'] = False
    keys, max_tokens_all = sorted(set().union(*spaces)), max(r['tokens'] for r in runs)
    for text in filters or []:
        conditions = parse_filter(text, keys, max_tokens_all)
        try:
            hits = [r for r, ns in zip(runs, spaces) if all(k in ns and op(ns[k], v) for k, op, v in conditions)]
        except TypeError as e:  # an order between a string and a number
            raise UserError(f'--holdout {text!r}: {e}')
        for r in hits:
            r['heldout'] = True
        if not hits:
            warn(f'--holdout {text!r} selects no run')


def pair_heldout(r):
    """Whether r's pair is held out: the run or its dense partner is (a pair goes whole)."""
    return r['heldout'] or (r['partner'] is not None and r['partner']['heldout'])


# -----------------------------------------------------------------------------
# what fit_law.py's laws need of the runs

def dense_shortfalls(N, D):
    """Why these dense runs cannot pin down the law's 5 parameters, whatever their losses: [] when they can."""
    return [note for short, note in ((len(N) < 5, f'{len(N)} dense run(s) for 5 parameters'),
                                     (len(set(N)) < 2, 'a single N: A and alpha are not identified'),
                                     (len(set(D)) < 2, 'a single D: B and beta are not identified')) if short]


def check_fittable(runs, patterns):
    """Refuse runs from which no law can be read."""
    dense = [r for r in runs if r['model'] == 'dense' and not r['heldout']]
    if not dense:
        raise UserError(f'{" ".join(patterns)}: no dense run to fit the dense law '
                        + ('(all held out)' if any(r['model'] == 'dense' for r in runs) else '(none found)'))
    N, D = [r['params_total'] for r in dense], [r['tokens'] for r in dense]
    pairs = [r for r in runs if r['variant'] == 'xmod' and r['partner'] and r['rho'] > 1 + 1e-12
             and not pair_heldout(r)]
    if dense_shortfalls(N, D) and not pairs:
        raise UserError(f'the dense law needs dense runs at >= 2 model sizes N and >= 2 token budgets D, 5 runs at '
                        f'least: got {len(dense)} run(s) at {len(set(N))} N and {len(set(D))} D, and no full X-MoD '
                        f'pair (not held out) for the relative law')


# -----------------------------------------------------------------------------
# the command line of fit_law.py and of law/'s commands

# the study's other analyses, once modes of fit_law.py: each is its own command now
MOVED = {'lr': 'python -m law.rates RUNS... --out DIR', 'panel': 'python -m law.rates RUNS... --panel --out DIR',
         'regimes': 'python -m law.regimes RUNS... --out DIR', 'isoflop': 'python -m law.isoflop RUNS... --out DIR',
         'advise': 'python -m law.advise FIT --flops=C',
         'skip_joint': 'fit_law.py fits the joint law only when asked: --joint'}


def command_line(argv, defaults, doc, source, usage):
    """argv -> its config, the runs (bare arguments) as cfg.runs; refuses no runs or no --out, an unknown --metric,
    a negative --bootstrap, and fit_law.py's old modes (MOVED). usage: the command, for the message."""
    for a in argv:
        key = a[2:].split('=')[0] if a.startswith('--') and usage.startswith('python fit_law.py') else None
        if key in MOVED:
            raise UserError(f'--{key} is no longer a mode of fit_law.py: {MOVED[key]}')
    runs = []
    WARNINGS.clear()
    PROG[0] = usage.split(' RUNS')[0].replace('python fit_law.py', 'fit_law.py')   # as run_main names it
    cfg, _ = configure(argv, defaults, doc=doc, source=source, positional=runs)
    cfg.runs = runs
    if cfg.metric not in METRICS:
        raise UserError(f"--metric={cfg.metric!r}: expected {' | '.join(METRICS)}")
    if getattr(cfg, 'bootstrap', 0) < 0:
        raise UserError('--bootstrap must be >= 0')
    if not runs or not cfg.out:
        raise UserError(f'give the runs and --out DIR ({usage})')
    return cfg
