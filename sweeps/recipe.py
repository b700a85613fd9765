"""What the sweep files share: cpu_small's recipe (`common`: the training settings every CPU sweep starts from),
`builders` (a run's train.py overrides and its name), `plan` (the cpu_small study at any scale: cpu_small.py,
classroom.py and gpu_small.py call it with their numbers), the per-arm learning-rate tuning the studies since cpu_lr
use (`lr_tag`, `final_val`, `tune`, `seed_rates`), and train.py's defaults (`train_defaults`). A sweep file imports
what it needs:

    from recipe import builders, common

A sweep in sweeps/study/ first puts sweeps/ on the path (sys.path.insert), as it does to import the runner."""
import ast
import json
import os

M = 1_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root: train.py, results/

common = dict(dataset='shakespeare', n_head=4, learning_rate=2e-3, min_lr=2e-4, warmup_iters=50,
              weight_decay=0.1, dropout=0.0, eval_tokens=32768, device='cpu', compile=False)


def train_defaults():
    """train.py's DEFAULTS read from its config block (the `key = literal` lines above `DEFAULTS = defaults_of(`),
    not by importing the training script: what the runner checks a run's overrides against and counts FLOPs with."""
    from configurator import defaults_of
    from xmod import GPTConfig
    with open(os.path.join(ROOT, 'train.py')) as f:
        block = f.read().split('\nDEFAULTS = defaults_of(')[0]
    values = {}
    for node in ast.parse(block).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass                                  # a computed module-level name is not a setting
    return defaults_of(values, GPTConfig, skip=('vocab_size',))


def builders(tokens_per_iter, width, tokens, block_size):
    """run(), dense() and xmod(): a train.py run's overrides and its name, at `tokens` training tokens, context
    `block_size` and width `width` unless given. tokens_per_iter = batch_size * block_size at every context."""

    def run(name, tokens=tokens, block_size=block_size, seed=0, **kw):
        iters = tokens // tokens_per_iter
        return dict(name=name if seed == 0 else f'{name}_seed{seed}', max_tokens=tokens, block_size=block_size,
                    batch_size=tokens_per_iter // block_size, eval_interval=max(1, iters // 4), seed=seed,
                    n_embd=kw.pop('n_embd', width), **kw)

    def dense(n_layer, n_embd=width, tokens=tokens, **kw):
        tag = f"{tokens / M:g}M" + (f"_T{kw['block_size']}" if 'block_size' in kw else '')
        return run(f'dense_L{n_layer}_d{n_embd}_{tag}', tokens, model='dense', n_layer=n_layer, n_embd=n_embd, **kw)

    def xmod(stride, n_layer, dense_layers, tokens=tokens, tag='', **kw):
        """n_layer > 0: total depth fixed, capacity solved for the FLOP match; n_layer=0: depth chosen too."""
        label = f"xmod_s{stride}_L{n_layer or 'auto'}_D{dense_layers}_{tokens / M:g}M{tag}"
        return run(label, tokens, model='xmod', stride=stride, n_layer=n_layer, dense_layers=dense_layers, **kw)

    return run, dense, xmod


def plan(tokens_per_iter, width, tokens, block_size, contexts, widths, budgets, context_points):
    """The study's runs: `tokens` training tokens per run at context `block_size` and width `width`;
    `contexts` the other context lengths, for `context_points` grid points; the dense law over `widths` x
    `budgets`; a pair at twice the tokens. tokens_per_iter = batch_size * block_size at every context."""
    run, dense, xmod = builders(tokens_per_iter, width, tokens, block_size)
    t = f'{tokens / M:g}M'
    context_grid = [(4, 0.125), (8, 0.25)][:context_points]
    return [
        # first what answers the main question, so a partial sweep is already useful: the reference pair, its seeds
        dense(4), xmod(4, 12, 4),
        *[dense(4, seed=s) for s in (1, 2)], *[xmod(4, 12, 4, seed=s) for s in (1, 2)],
        # ablations of X-MoD's two training devices, on the reference point
        xmod(4, 12, 4, gate='plain', tag='_plaingate'),
        xmod(4, 12, 4, depth_balance=0.0, tag='_nobalance'),
        # MoD (alternating, plain gate, no balancing) at the capacity FLOP matching allows against 4 dense layers
        run(f'mod_L6_D4_{t}', model='mod', n_layer=6, dense_layers=4),       # c ~0.37
        # MoE at matched active parameters (8 experts, top-2, hidden 2*n_embd)
        run(f'moe_L4_{t}', model='moe', n_layer=4),
        # the X-MoD grid: stride {2, 4, 8} x capacity near {0.125, 0.25, 0.5}  (capacity solved at T=128 in comments)
        xmod(2, 5, 4),        # c 0.531
        xmod(4, 6, 4),        # c 0.531
        xmod(8, 11, 3),       # c 0.125
        xmod(8, 11, 4),       # c 0.250
        xmod(8, 7, 4),        # c 0.531
        xmod(4, 12, 5),       # c 0.250
        dense(3), dense(5),                                                  # their other dense partners
        # other context lengths (depth and capacity solved at each context)
        *[xmod(s, 0, 4, capacity=c, block_size=T, tag=f'_T{T}') for s, c in context_grid for T in contexts],
        *[dense(4, block_size=T) for T in contexts],
        # the dense law: widths x budgets (the reference width at the reference budget is above)
        *[dense(4, d, b) for d in widths for b in budgets if (d, b) != (width, tokens)],
        xmod(2, 8, 5),        # c 0.281
        # twice the tokens: held out by fit_law --holdout "tokens==max_tokens_all"
        dense(4, width, 2 * tokens), xmod(4, 12, 4, tokens=2 * tokens),
        # stride 2 at c~0.16 against 8 dense layers, with MoD in the same layout
        dense(8), xmod(2, 14, 8),      # c 0.164 (stride 2 cannot get nearer 0.125 below 8 dense layers)
        run(f'mod_L14_D8_{t}', model='mod', n_layer=14, dense_layers=8),     # c 0.164
    ]


def lr_tag(lr):
    return f'_lr{lr:g}'                              # 2e-3 -> '_lr0.002'


def final_val(runs_dir, name):
    """The finished run's final val_loss_causal (the study's metric: causal routing; a dense run's two losses are
    equal); inf for a run that diverged (train.py records it in run.json: that rate is too high); else None."""
    try:
        with open(os.path.join(runs_dir, name, 'run.json')) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if info.get('diverged'):
        return float('inf')
    return info['final']['val_loss_causal'] if info.get('finished') else None


def tune(loss_at, grid):
    """(rates, best): the grid extended by 2x past an edge that holds the best finished rate, and that rate once all
    are finished (else None). loss_at(lr): the final loss of the arm's seed-0 run at lr, or None."""
    lrs = list(grid)
    while True:
        vals = [loss_at(lr) for lr in lrs]
        if any(v is None for v in vals):
            return lrs, None                                             # not all finished: no best yet
        best = min(range(len(lrs)), key=lambda i: vals[i])
        if best == len(lrs) - 1:
            lrs.append(lrs[-1] * 2)
        elif best == 0:
            lrs.insert(0, lrs[0] / 2)
        else:
            return lrs, lrs[best]


def seed_rates(loss_at, grid, within=0.005):
    """The rates that get seeds once the grid is finished: the best seed-0 rate and every rate within `within` of
    it in seed 0, whose seeds then decide between them by their mean (law.rates.best_rate); [] before. A single seed
    cannot tell rates 0.005 apart (seed-to-seed SD ~0.007 here), so choosing by it alone inflates the winner."""
    lrs, best = tune(loss_at, grid)
    if best is None:
        return []
    return [lr for lr in lrs if loss_at(lr) - loss_at(best) <= within]
