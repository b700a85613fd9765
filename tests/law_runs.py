"""
Synthetic run folders for the law's tests (test_fit_law.py, test_law_*.py), written exactly like train.py's (run.json
+ log.csv): dense losses from a known Chinchilla law (TRUE_DENSE), X-MoD losses whose Delta to their FLOP-matched
dense partner follows a known relative law (TRUE_REL); and fit_law.py run in-process (run_main) or as a subprocess
(cli).
"""

import json
import math
import os
import subprocess
import sys

import numpy as np

import fit_law

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRUE_DENSE = dict(E=1.7, A=400.0, alpha=0.34, B=410.0, beta=0.28)
TRUE_REL = dict(capacity_gain=0.03, context_correction=0.01, stride_interaction=-0.006)
N_EMBD = 128
COLUMNS = ['step', 'tokens', 'flops', 'lr', 'elapsed_s', 'tokens_per_s', 'train_loss', 'val_loss',
           'val_loss_causal', 'sel_frac_1', 'depth_std']


def dense_loss(N, D, p=TRUE_DENSE):
    return p['E'] + p['A'] / N ** p['alpha'] + p['B'] / D ** p['beta']


def make_run(root, name, model='dense', n_layer=4, stride=1, capacity=1.0, block_size=128, seed=0, tokens=2 ** 20,
             params_total=None, params_active=None, flops_per_token=None, loss=3.0, loss_topk=None, finished=True,
             gate='variance', depth_balance=None, n_evals=5, **config_extra):
    """Write RUN_DIR/run.json and RUN_DIR/log.csv per the contract; return the directory."""
    d = os.path.join(str(root), name)
    os.makedirs(d, exist_ok=True)
    loss_topk = loss if loss_topk is None else loss_topk
    params_total = params_total or 12 * n_layer * N_EMBD ** 2
    params_active = params_active or params_total
    flops_per_token = flops_per_token or 2.0 * params_active + 4 * block_size * N_EMBD * n_layer
    tokens_per_iter = 8 * block_size
    config = dict(model=model, n_layer=n_layer, n_head=4, n_embd=N_EMBD, block_size=block_size, batch_size=8,
                  gradient_accumulation_steps=1, stride=stride, capacity=capacity, gate=gate,
                  depth_balance=depth_balance, router_bce=0.1, n_expert=8, expert_top_k=2, seed=seed, max_iters=0,
                  max_tokens=tokens, max_flops=0.0, learning_rate=1e-3, dataset='synthetic', out_dir=d)
    config.update(config_extra)
    rows = []
    for i in range(1, n_evals + 1):
        tok = tokens * i // n_evals
        f = i / n_evals
        rows.append(dict(step=tok // tokens_per_iter, tokens=tok, flops=3.0 * flops_per_token * tok, lr=1e-3,
                         elapsed_s=10.0 * i, tokens_per_s=1e5, train_loss=loss + 0.3 * (1 - f),
                         val_loss=loss_topk + 0.5 * (1 - f), val_loss_causal=loss + 0.5 * (1 - f),
                         sel_frac_1=capacity, depth_std=0.1))
    last = rows[-1]
    meta = dict(config=config, params_total=params_total, params_active=params_active,
                flops_per_token=flops_per_token, tokens_per_iter=tokens_per_iter, seed=seed, git_commit='abc123',
                torch_version='2.13', device='cpu', finished=finished)
    if finished:
        meta['final'] = dict(step=last['step'], tokens=last['tokens'], flops=last['flops'],
                             val_loss=last['val_loss'], val_loss_causal=last['val_loss_causal'])
    with open(os.path.join(d, 'run.json'), 'w') as f:
        json.dump(meta, f)
    with open(os.path.join(d, 'log.csv'), 'w') as f:
        f.write(','.join(COLUMNS) + '\n')
        for r in rows:
            f.write(','.join(repr(r[c]) for c in COLUMNS) + '\n')
    return d


def xmod_shape(stride, capacity, active_layers=4):
    """Total depth whose active-equivalent depth A + c*R is close to active_layers; returns (L, L_act)."""
    per_layer = 1 / stride + capacity * (1 - 1 / stride)
    L = max(stride, round(active_layers / per_layer))
    A = math.ceil(L / stride)
    return L, A + capacity * (L - A)


def true_delta(rho, T, s, p=TRUE_REL, T0=128, s0=4):
    return math.log(rho) * (-p['capacity_gain'] + p['context_correction'] * math.log(T / T0)
                            + p['stride_interaction'] * math.log(s / s0))


def make_sweep(root, contexts=(128, 256, 512), strides=(2, 4, 8), capacities=(0.125, 0.25), seeds=(0, 1),
               ablations=True, dense_grid=True, delta_noise=0.002, loss_noise=0.01):
    """A synthetic sweep: dense runs from TRUE_DENSE, full X-MoD runs whose Delta follows TRUE_REL, plus the
    ablations (plain gate, no balancing), MoD and MoE, each FLOP-matched (flops_per_token +1%) to a dense run."""
    rng = np.random.default_rng(1234)
    tokens = 2 ** 20
    dense = {}
    for T in contexts:
        for sd in seeds:
            N = 12 * 4 * N_EMBD ** 2
            L = dense_loss(N, tokens) + loss_noise * rng.standard_normal()
            dense[T, sd] = (L, make_run(root, f'dense_L4_T{T}_s{sd}', n_layer=4, block_size=T, seed=sd,
                                        tokens=tokens, loss=L))
    if dense_grid:  # other sizes and budgets, so the dense law has N and D to fit
        for nl in (2, 8, 16):
            for tk in (2 ** 19, 2 ** 20, 2 ** 22, 2 ** 24):
                N = 12 * nl * N_EMBD ** 2
                make_run(root, f'dense_L{nl}_D{tk}', n_layer=nl, tokens=tk, seed=0,
                         loss=dense_loss(N, tk) * (1 + 0.002 * rng.standard_normal()))
    fpt_dense = lambda T: 2.0 * 12 * 4 * N_EMBD ** 2 + 4 * T * N_EMBD * 4

    def sparse(name, model, T, sd, L_tot, L_act, delta, **kw):
        Ld = dense[T, sd][0]
        make_run(root, f'{name}_T{T}_s{sd}', model=model, n_layer=L_tot, block_size=T, seed=sd, tokens=tokens,
                 params_total=12 * L_tot * N_EMBD ** 2, params_active=int(12 * L_act * N_EMBD ** 2),
                 flops_per_token=fpt_dense(T) * 1.01, loss=Ld + delta, loss_topk=Ld + delta - 0.01, **kw)
    for T in contexts:
        for s in strides:
            for c in capacities:
                L_tot, L_act = xmod_shape(s, c)
                for sd in seeds:
                    d = true_delta(L_tot / L_act, T, s) + delta_noise * rng.standard_normal()
                    sparse(f'xmod_s{s}_c{c}', 'xmod', T, sd, L_tot, L_act, d, stride=s, capacity=c)
        if ablations and T == contexts[0]:
            L_tot, L_act = xmod_shape(4, 0.125)
            d0 = true_delta(L_tot / L_act, T, 4)
            for sd in seeds:
                sparse('xmodplain_s4', 'xmod', T, sd, L_tot, L_act, d0 + 0.01, stride=4, capacity=0.125,
                       gate='plain')
                sparse('xmodnobal_s4', 'xmod', T, sd, L_tot, L_act, d0 + 0.005, stride=4, capacity=0.125,
                       depth_balance=0.0)
                L_tot, L_act = xmod_shape(2, 0.125)
                sparse('mod', 'mod', T, sd, L_tot, L_act, -0.005, stride=2, capacity=0.125)
                sparse('moe', 'moe', T, sd, 4, 4 / 3, -0.015)
                L_tot, L_act = xmod_shape(4, 0.125)
    return str(root)


def cli(*args, module=None):
    """Run fit_law.py, or with module one of law/'s commands (python -m law.regimes), as a subprocess: (exit code,
    stdout, stderr). The joint law is left out, as fit_law.py leaves it without --joint."""
    command = [sys.executable, '-m', module] if module else [sys.executable, os.path.join(ROOT, 'fit_law.py')]
    p = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


def run_main(capsys, *args, joint=False):
    """fit_law.main in-process; returns (exit code, stderr); --help exits. joint=True: with the joint law
    (--joint)."""
    try:
        code = fit_law.main(list(args) + (['--joint'] if joint else []))
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def tiny_sweep(root):
    """One dense run and one FLOP-matched full X-MoD run: the smallest valid input."""
    return make_sweep(root, contexts=(128,), strides=(4,), capacities=(0.125,), seeds=(0,), ablations=False,
                      dense_grid=False)
