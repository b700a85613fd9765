"""A refactor's proof that it changes no number: `python tests/fingerprint.py > before.txt`, change the code, run it
again and diff. It prints, for every family x impl, in float32 and under bf16 autocast: the losses of four training
steps as float hex, the top-k and causal losses, the routing statistics of both modes, cached and uncached
generation and a hash of the final weights; then a tiny train.py run of every family, cut and resumed, and every
cell of its log.csv but the clock's. Not a test (pytest collects test_*.py only): its output is compared by hand.
"""
import csv
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import xmod  # noqa: E402

CLOCK = ('elapsed_s', 'tokens_per_s', 'mfu')


def model_lines(dtype):
    out = []
    for model in xmod.MODELS:
        for impl in xmod.IMPLS:
            torch.manual_seed(0)
            cfg = xmod.GPTConfig(model=model, impl=impl, n_layer=6 if model != 'moe' else 2, n_embd=32, n_head=2,
                                 block_size=32, vocab_size=50, stride=None if model == 'mod' else 3, capacity=0.25)
            m = xmod.GPT(cfg)
            opt = m.configure_optimizers(0.1, 3e-3, (0.9, 0.99), 'cpu')
            g = torch.Generator().manual_seed(1)
            tag = f'{dtype} {model}-{impl}'
            with torch.autocast('cpu', dtype=torch.bfloat16, enabled=dtype == 'bf16'):
                for step in range(4):
                    x, y = torch.randint(0, 50, (4, 32), generator=g), torch.randint(0, 50, (4, 32), generator=g)
                    _, loss, aux = m(x, y, return_aux=True)
                    loss.backward()
                    m.calibrate([aux['layers']])
                    opt.step()
                    opt.zero_grad()
                    out.append(f'{tag} step{step} {loss.item().hex()}')
                m.eval()
                x, y = torch.randint(0, 50, (4, 32), generator=g), torch.randint(0, 50, (4, 32), generator=g)
                for routing in ('topk', 'causal'):
                    _, loss, aux = m(x, y, routing=routing, return_aux=True)
                    stats = xmod.routing_stats(m, aux['layers'], routing)
                    out.append(f'{tag} {routing} {loss.item().hex()} '
                               + ' '.join(f'{k}={v.item().hex()}' for k, v in sorted(stats.items())))
                for cache in (True, False):
                    torch.manual_seed(5)
                    out.append(f'{tag} gen cache={cache} {m.generate(x[:2, :5], 40, use_cache=cache).tolist()}')
            h = hashlib.sha256(b''.join(p.detach().float().numpy().tobytes() for p in m.state_dict().values()))
            out.append(f'{tag} weights {h.hexdigest()[:16]}')
    return out


def train_lines():
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        data = os.path.join(tmp, 'data')
        os.makedirs(data)
        for split, n in (('train', 20000), ('val', 4000)):
            rng.integers(0, 40, n).astype(np.uint16).tofile(os.path.join(data, f'{split}.bin'))
        with open(os.path.join(data, 'meta.pkl'), 'wb') as f:
            pickle.dump({'vocab_size': 40}, f)
        env = dict(os.environ, OMP_NUM_THREADS='1')
        tiny = ['--n_embd=32', '--n_head=2', '--block_size=32', '--batch_size=4', '--max_iters=10',
                '--eval_interval=5', '--eval_tokens=512', '--warmup_iters=2', '--threads=1', f'--data_dir={data}']
        for model in xmod.MODELS:
            run = os.path.join(tmp, model)
            for extra in (['--stop_iter=5'], ['--init_from=resume']):
                r = subprocess.run([sys.executable, os.path.join(ROOT, 'train.py'), f'--model={model}', *tiny,
                                    f'--out_dir={run}', *extra], capture_output=True, text=True, env=env, cwd=ROOT)
                if r.returncode != 0:
                    out.append(f'train {model} {extra} exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}')
            with open(os.path.join(run, 'log.csv')) as f:
                for row in csv.DictReader(f):
                    out.append(f'train {model} ' + ' '.join(f'{k}={v}' for k, v in row.items() if k not in CLOCK))
    return out


if __name__ == '__main__':
    torch.set_num_threads(1)
    print('\n'.join(model_lines('float32') + model_lines('bf16') + train_lines()))
