"""
sample.py: generate text from a trained run's checkpoint, with causal routing (no routed layer or expert looks at a
position after the one being predicted), decoded with the run's own tokenizer (stored in the checkpoint).

    python sample.py --out_dir=out-xmod
    python sample.py --out_dir=out-xmod --start="ROMEO:" --num_samples=2 --max_new_tokens=300
    python sample.py --out_dir=out-xmod --start=FILE:prompt.txt --temperature=0.7 --top_k=50
    python sample.py --out_dir=out-xmod --max_new_tokens=2000 --window=exact   # past block_size: slide, recomputing
    python sample.py --out_dir=out-xmod --show_routing=True   # also routing.png there: which layers took each token

Overrides are --key=value (or a config file), type-checked as in train.py. Exit code 2 on bad input (a missing or
unreadable checkpoint, a prompt the tokenizer cannot encode), with a one-line message.
"""
import os
import sys
from contextlib import nullcontext

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configurator import UserError, configure, defaults_of, one_line, run_main
from run_folder import load_model
from xmod import WINDOWS, layout_string

# -----------------------------------------------------------------------------------------------------------------
out_dir = 'out-xmod'        # the run folder holding ckpt.pt (train.py's for --model=xmod)
start = '\n'                # the prompt: a string, or FILE:path to read it from a file
num_samples = 3             # samples to print, each after the prompt
max_new_tokens = 500        # tokens generated per sample
temperature = 0.8           # < 1: more conservative, > 1: more diverse
top_k = 200                 # keep only the top_k most likely tokens (0 = all)
seed = 1337                 # the sampling draws
use_cache = True            # KV cache: each new token runs each layer once (False: recompute the window)
window = 'refill'           # past block_size: 'refill' the cache from the last half window when it is full
                            # (each token sees T/2..T tokens) | 'exact': slide by one, recomputing each step
device = ''                 # '' = auto: cuda, then mps, then cpu
dtype = ''                  # '' = bfloat16 autocast on CUDA, float32 elsewhere; bfloat16 | float16 on a CPU too
show_routing = False        # also write out_dir/routing.png: each token of the first sample by its routed depth
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())


def sample(argv):
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__)
    if cfg.window not in WINDOWS:
        raise UserError(f"--window={cfg.window!r}: expected {' | '.join(WINDOWS)}")
    for key, least in (('num_samples', 1), ('max_new_tokens', 0), ('top_k', 0)):
        if getattr(cfg, key) < least:
            raise UserError(f"--{key}={getattr(cfg, key)}: expected an integer >= {least}")
    if cfg.temperature < 0:
        raise UserError(f"--temperature={cfg.temperature}: expected a number >= 0 (0: greedy)")
    dev = cfg.device or ('cuda' if torch.cuda.is_available() else
                         'mps' if torch.backends.mps.is_available() else 'cpu')
    # '' = bfloat16 on a CUDA device that has it, else float32 (a model trained in another dtype need not
    # fit float16's range)
    dtype = cfg.dtype or ('bfloat16' if dev.startswith('cuda') and torch.cuda.is_bf16_supported() else 'float32')
    if dtype not in ('float32', 'bfloat16', 'float16'):
        raise UserError(f"--dtype={dtype!r}: expected '' (auto) | float32 | bfloat16 | float16")
    model, ckpt = load_model(cfg.out_dir, dev)      # in eval mode: the causal thresholds stay frozen, dropout off
    if cfg.show_routing and not model.routed_layers():
        raise UserError(f"--show_routing: this {model.config.model} model ({layout_string(model.config)}) has no "
                        f"routed layer to draw")

    from data.tokenizers import DataError, from_meta
    meta = ckpt['meta']
    try:
        encode, decode = from_meta(meta)
    except DataError as e:
        raise UserError(str(e)) from None
    prompt = cfg.start
    if prompt.startswith('FILE:'):
        try:
            with open(prompt[5:], encoding='utf-8') as f:
                prompt = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"--start={cfg.start}: cannot read it: {one_line(e)}") from None
    try:
        ids = encode(prompt)
    except ValueError as e:
        raise UserError(f"--start: {one_line(e)}") from None
    if not ids:
        raise UserError("--start is empty: give at least one token of prompt (the default is a newline)")

    ctx = nullcontext() if dtype == 'float32' else torch.autocast(dev.split(':')[0], dtype=getattr(torch, dtype))
    torch.manual_seed(cfg.seed)
    x = torch.tensor(ids, dtype=torch.long, device=dev)[None, :]
    first = ids                           # the text the routing picture shows: the first sample, else the prompt
    with torch.no_grad(), ctx:
        for n in range(cfg.num_samples):
            y = model.generate(x, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k or None,
                               use_cache=cfg.use_cache, window=cfg.window)
            # a padded vocabulary (gpt2: 50304) has ids the tokenizer lacks; an untrained id is never worth printing
            text_ids = [i for i in y[0].tolist() if i < meta['vocab_size']]
            first = text_ids if n == 0 else first
            print(decode(text_ids))
            print('---------------')
        if cfg.show_routing:
            write_routing_png(model, first, decode, cfg.out_dir)
    return 0


def write_routing_png(model, ids, decode, out_dir):
    """out_dir/routing.png of the first block_size tokens of ids (tools/routing_plot.py), and its depth statistics."""
    from tools.routing_plot import write_routing
    write_routing(os.path.join(out_dir, 'routing.png'), model, ids, decode, os.path.join(out_dir, 'ckpt.pt'))


def main(argv=None):
    return run_main('sample.py', sample, argv)


if __name__ == '__main__':
    sys.exit(main())
