"""
bench.py: the speed of X-MoD against its FLOP-matched dense model, every figure a ratio measured in the same run.

    python bench.py                                  # CPU: T = 128, 256, 512; train, causal eval, decode
    python bench.py --contexts=128 --phases=train --compile=True
    python bench.py --json bench.json                # also write the table as a list of rows
    python bench.py --contention=True                # CPU settings, alone and beside one busy process
    python bench.py --contexts=128 --phases=train --profile=True   # and where each row's time goes
    python bench.py --ref=main                       # also xmod.py as it is at git ref main, side by side
    python bench.py --ops=True --contexts=128 --ref=main   # no timing: each phase's ops (OpCounter), now and at main
    python bench.py --device=cuda --dtype=bfloat16 --compile=True --contexts=1024 --n_embd=768 --n_head=12 \\
                    --dense_layers=12 --batch_size=8

Phases (tokens per second; ratio = this row's tokens/s over the reference's, so above 1 is faster; the reference
runs the same way: a compiled row is against the compiled dense model):
  train         a training step: forward, backward, calibration of the causal thresholds, optimizer step
  eval_causal   a forward with causal routing and no gradient (the honest validation loss)
  decode_b1/b8  generate() with the KV cache: a 64-token prompt, then 256 new tokens, at batch 1 and 8 (measured
                at contexts of at least 320 tokens, where the window never slides)
  layer_train   (extras) one routed layer alone, forward and backward, top-k: the fast path against the naive one,
                for X-MoD's first routed layer and the MoE's first layer
  layer_causal  (extras) the same X-MoD layer's forward in causal routing, no gradient
Models: dense (the reference), xmod (stride and capacity below, FLOP-matched to dense_layers dense layers), and for
decode a dense model of xmod's total depth and width (the same parameters: `same_depth`). The MoE's fast path
against its naive one (whole model, train phase, at every T; and the layer phases, at the first T) and the dense
model against a nanoGPT-shaped GPT (LayerNorm, learned positions; written below) at nanoGPT's CPU recipe shape
(4 layers, 128 wide, batch 12 x 64) in the train phase.
Rows are measured `rounds` times, the first right after the row's own warm-up (a compiled row's compile), the
others interleaved across the rows that one ratio compares (one T, phase and reference: eager and compiled rows
apart), and the median is kept: read the ratios, not the absolute figures, which move with the machine's load.
--json is rewritten after every measurement, so a run stopped by a time limit keeps every row measured before it
(a compile that does not finish loses its own row only); a row's `rounds` says how many rounds its figure holds.
`mem_MB`: the tensors saved for backward in one training step (activation memory; on CUDA, the peak allocated).
`aten_calls`: aten op calls (torch.profiler's events named aten::, nested ones included, e.g. aten::linear and the
aten::mm inside it), counted in one more, untimed measurement: per step (train, layer_train), per forward
(eval_causal, layer_causal), per new token position of the batch (decode: the prompt's prefill spread over the new
tokens). Machine-independent where timings are noisy; a compiled row counts the aten calls left outside its kernels.
`sync_share` (eval_causal): the share of one more, untimed measurement's time the host spent waiting in syncs
(causal routing reads two sizes per routed layer): on a GPU, what those syncs cost; on a CPU about 0.
"""
import collections
import importlib.util
import json as jsonlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xmod
from configurator import UserError, configure, defaults_of, one_line, run_main

# -----------------------------------------------------------------------------------------------------------------
device = 'cpu'            # cpu | cuda | mps
dtype = 'float32'         # float32 | bfloat16 (autocast)
contexts = '128,256,512'  # context lengths T, comma-separated
phases = 'train,eval_causal,decode_b1,decode_b8'   # which phases to time, comma-separated
tokens_per_step = 2048    # training and eval batches hold this many tokens at every T (batch = tokens_per_step / T)
batch_size = 0            # > 0: this batch size at every T instead
n_embd = 128              # width of every model
n_head = 4                # attention heads
dense_layers = 4          # depth of the dense model X-MoD is FLOP-matched to
stride = 4                # X-MoD's anchor stride
capacity = 0.125          # X-MoD's capacity (solved exactly by FLOP matching, nearest to this)
steps = 5                 # timed steps per measurement, after 2 warm-up steps
rounds = 3                # measurements per row, interleaved; the median is kept
new_tokens = 256          # decode: tokens generated after the prompt
prompt = 64               # decode: prompt length
compile = False           # also time torch.compile(fullgraph=True) of the train and eval phases
extras = True             # also fast vs naive paths (MoE model; one routed layer) and dense vs a nanoGPT-shaped GPT
contention = False        # instead: the train phase under each CPU setting, alone and beside one busy process
profile = False           # also print each row's torch.profiler table (aten ops by self CPU time; train: forward, backward, optimizer ms a step; one measurement)
json = ''                 # write the rows as JSON to this path (also: --json PATH)
peak_tflops = 0.0         # the device's peak TFLOP/s for MFU (0 = by device name in bf16: PEAK_TFLOPS)
ref = ''                  # a git ref (e.g. main): also time xmod.py as it is there, its rows (dense@REF, xmod@REF)
                          # interleaved with the working tree's, each version's X-MoD against its own dense model
ops = False               # instead: the backend ops of each phase (OpCounter), dense and X-MoD (and --ref's); no timing
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
VOCAB = 84
# Dense (no sparsity) bf16/fp16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s, for MFU (train.py's mfu
# too): the first name that is part of torch.cuda.get_device_name wins, so the more specific names come first.
# Datasheets quote "with sparsity", twice these. Not in the table: pass --peak_tflops.
PEAK_TFLOPS = (('H100 PCIe', 756.0), ('H100 NVL', 835.0), ('H200 NVL', 835.0), ('H100', 989.0), ('H200', 989.0),
               ('H800', 989.0), ('B200', 2250.0), ('A100', 312.0), ('A800', 312.0), ('L40S', 362.0), ('L40', 181.0),
               ('L4', 121.0), ('A10G', 70.0), ('A10', 125.0), ('RTX 4090', 165.0), ('RTX 3090', 71.0),
               ('V100', 125.0), ('T4', 65.0))


def device_peak_tflops(dev, dtype, override=0.0):
    """The device's peak TFLOP/s for MFU: override when > 0, else PEAK_TFLOPS's for a CUDA device in bfloat16 or
    float16; 0.0 when unknown (a CPU, float32, a device not in the table)."""
    if override > 0:
        return override
    if not dev.startswith('cuda') or dtype not in ('bfloat16', 'float16'):
        return 0.0
    name = torch.cuda.get_device_name(dev)
    return next((tflops for key, tflops in PEAK_TFLOPS if key in name), 0.0)


class NanoGPTRef(nn.Module):
    """nanoGPT's shape, for reference: learned positions, LayerNorm, fused QKV, GELU MLP, tied embeddings."""

    def __init__(self, n_layer, n_embd, n_head, block_size, vocab_size):
        super().__init__()
        self.n_head = n_head
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln_1=nn.LayerNorm(n_embd), attn=nn.Linear(n_embd, 3 * n_embd), proj=nn.Linear(n_embd, n_embd),
            ln_2=nn.LayerNorm(n_embd), fc=nn.Linear(n_embd, 4 * n_embd), out=nn.Linear(4 * n_embd, n_embd)))
            for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.head.weight

    def forward(self, idx, targets):
        B, T = idx.size()
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            q, k, v = b['attn'](b['ln_1'](x)).split(x.size(-1), dim=2)
            q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
            x = x + b['proj'](y)
            x = x + b['out'](F.gelu(b['fc'](b['ln_2'](x))))
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


# Allocations launch no kernel: the op counter leaves them out, as it leaves out views (ops that alias their input:
# view, expand, transpose, select, detach, ...; OpOverload.is_view).
ALLOCATIONS = ('empty', 'empty_like', 'empty_strided', 'new_empty', 'new_empty_strided')


class OpCounter(TorchDispatchMode):
    """Counts the backend (aten) ops that run while it is on, below autograd, so a backward's ops count as they run:
    views and allocations left out, every other op once (`_unsafe_view`, a reshape of a fresh tensor, counts: the
    review that set the goals counted it). On a GPU nearly each is a kernel launch, which bounds a small model's
    step: a proxy for launches that a CPU measures exactly, the same on every machine. `ops` the total, `by_op` per
    op name, `syncs` the host reads of a tensor's value (item, int(), tolist, nonzero): on a GPU each waits for
    every kernel queued before it."""

    def __init__(self):
        super().__init__()
        self.ops, self.syncs, self.by_op = 0, 0, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._opname
        if name in ('_local_scalar_dense', 'nonzero'):
            self.syncs += 1
        elif not func.is_view and name not in ALLOCATIONS:
            self.ops += 1
            self.by_op[name] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        # tolist reads the values below the dispatcher (no op to see): count it here
        self.tolist = torch.Tensor.tolist

        def tolist(t):
            self.syncs += 1
            return self.tolist(t)
        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self.tolist
        return super().__exit__(*exc)


def phase_ops(mx, gptconf, B=2):
    """The backend ops (OpCounter) of each phase of model gptconf, built by mx (xmod, or xmod.py at a git ref: --ref),
    on a (B, block_size) batch: 'forward' and 'backward' of a training step (top-k, return_aux, as train.py; the
    optimizer and the calibration apart), and, in eval mode without gradients as train.py's evaluation runs them,
    'eval_causal' and 'eval_topk' (a forward in each routing) and 'stats_causal', 'stats_topk' (its routing_stats);
    'syncs_causal', the syncs of the causal forward, 'syncs_topk' of the top-k one, 'syncs_train' of the training
    step's forward and backward. Each is counted on its second run (the first causal forward
    checks the calibration once). The fast path's counts do not depend on the data, only on the shapes."""
    torch.manual_seed(0)
    m = mx.GPT(gptconf)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, gptconf.vocab_size, (B, gptconf.block_size), generator=g) for _ in range(2))
    m.calibrate([m(x, y, return_aux=True)[2]['layers']])
    out = {}
    for _ in range(2):
        m.zero_grad(set_to_none=True)         # as train.py's optimizer does: no gradient to accumulate into
        with OpCounter() as fwd:
            _, loss, _ = m(x, y, return_aux=True)
        with OpCounter() as bwd:
            loss.backward()
    out.update(forward=fwd.ops, backward=bwd.ops, syncs_train=fwd.syncs + bwd.syncs)
    m.eval()
    with torch.no_grad():
        for routing in ('causal', 'topk'):
            for _ in range(2):
                with OpCounter() as ev:
                    _, _, aux = m(x, y, routing=routing, return_aux=True)
                with OpCounter() as st:
                    mx.routing_stats(m, aux['layers'], routing)
            out.update({f'eval_{routing}': ev.ops, f'stats_{routing}': st.ops, f'syncs_{routing}': ev.syncs})
    return out


def ops_table(versions, cfg, Ts):
    """--ops=True: each phase's ops (phase_ops) of dense and X-MoD, and their ratio, per T and per version of
    xmod.py (versions: (label, module)). Returns the rows."""
    rows = []
    print(f"backend ops per phase (bench.OpCounter: below autograd, views and allocations left out), batch 2, "
          f"n_embd {cfg.n_embd}, xmod stride {cfg.stride} FLOP-matched to {cfg.dense_layers} dense layers")
    print("| xmod.py | T | model | forward | backward | train step | ratio | eval causal | ratio | its stats "
          "| syncs | eval top-k | its stats |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for T in Ts:
        for label, mx in versions:
            dense, sparse = model_configs(mx, cfg, T)
            got = {name: phase_ops(mx, c) for name, c in (('dense', dense), ('xmod', sparse))}
            for name, n in got.items():
                d = got['dense']
                n['train'] = n['forward'] + n['backward']
                row = dict(version=label, T=T, model=name, stride=cfg.stride if name == 'xmod' else None, **n,
                           train_ratio=round(n['train'] / (d['forward'] + d['backward']), 3),
                           causal_ratio=round(n['eval_causal'] / d['eval_causal'], 3))
                rows.append(row)
                print(f"| {label} | {T} | {name} | {n['forward']:,} | {n['backward']:,} | {n['train']:,} | "
                      f"{row['train_ratio']:.2f} | {n['eval_causal']:,} | {row['causal_ratio']:.2f} | "
                      f"{n['stats_causal']:,} | {n['syncs_causal']} | {n['eval_topk']:,} | {n['stats_topk']:,} |",
                      flush=True)
    return rows


def model_configs(mx, cfg, T):
    """The dense model and X-MoD FLOP-matched to it at context T, as module mx builds them."""
    try:
        dense = mx.GPTConfig(n_layer=cfg.dense_layers, n_embd=cfg.n_embd, n_head=cfg.n_head, block_size=T,
                             vocab_size=VOCAB)
        return dense, mx.match_flops(dense, 'xmod', stride=cfg.stride, capacity=cfg.capacity)
    except ValueError as e:
        raise UserError(str(e)) from None


def xmod_at(ref):
    """xmod.py as it is at git ref `ref` (a branch, tag or commit of this repository), imported as a module of its
    own: --ref measures it beside the working tree's."""
    root = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(['git', '-C', root, 'show', f'{ref}:xmod.py'], capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"--ref={ref}: git show {ref}:xmod.py failed: {one_line(r.stderr.strip() or 'no output')}")
    path = os.path.join(tempfile.mkdtemp(prefix='xmod_ref_'), 'xmod_ref.py')
    with open(path, 'w') as f:
        f.write(r.stdout)
    spec = importlib.util.spec_from_file_location(f'xmod_at_{len(sys.modules)}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sync(dev):
    if dev.startswith('cuda'):
        torch.cuda.synchronize()


def calibrated(gptconf, dev, x, mx=xmod):
    """The model (mx.GPT: xmod's, or --ref's) with its causal thresholds calibrated on one batch, so causal routing
    takes about c of it."""
    torch.manual_seed(0)
    m = mx.GPT(gptconf).to(dev)
    if gptconf.model in ('mod', 'xmod'):
        m.calibrate([m(x, x, return_aux=True)[2]['layers']])
    return m


def timer(phase, model, fwd, x, y, opt, ctx, dev, cfg):
    """A function that runs `steps` units of `phase` and returns (seconds, tokens)."""
    def train():
        for _ in range(cfg.steps):
            with torch.profiler.record_function('forward'), ctx:     # --profile: each part's time per step
                out = fwd(x, y) if isinstance(model, NanoGPTRef) else fwd(x, y, return_aux=True)
            opt.zero_grad(set_to_none=True)
            with torch.profiler.record_function('backward'):
                out[1].backward()
            with torch.profiler.record_function('optimizer'):
                if not isinstance(model, NanoGPTRef):
                    model.calibrate([out[2]['layers']])
                opt.step()
        return cfg.steps * x.numel()

    def eval_causal():
        with torch.no_grad(), ctx:
            for _ in range(cfg.steps):
                fwd(x, y, routing='causal')
        return cfg.steps * x.numel()

    def decode(B):
        def run():
            p = x[:B, :cfg.prompt] if x.size(0) >= B else x[:1, :cfg.prompt].expand(B, -1).contiguous()
            with ctx:
                model.generate(p, cfg.new_tokens, top_k=1)
            return B * cfg.new_tokens
        return run

    fn = {'train': train, 'eval_causal': eval_causal, 'decode_b1': decode(1), 'decode_b8': decode(8)}[phase]

    def measure():
        sync(dev)
        t0 = time.perf_counter()
        tokens = fn()
        sync(dev)
        return time.perf_counter() - t0, tokens
    return measure


def sync_share(measure):
    """The fraction of one more, untimed measurement's time that the host spent in tolist, waiting: causal
    routing's one sync per routed layer (xmod.py, forward_fast_causal). On a GPU the host waits there for every
    kernel queued before it, and launches nothing meanwhile; where launching bounds the step, that wait is what the
    syncs cost. On a CPU nothing is queued: about 0."""
    waited, plain = [0.0], torch.Tensor.tolist

    def tolist(t):
        t0 = time.perf_counter()
        out = plain(t)
        waited[0] += time.perf_counter() - t0
        return out
    torch.Tensor.tolist = tolist
    try:
        seconds, _ = measure()
    finally:
        torch.Tensor.tolist = plain
    return waited[0] / seconds


def aten_calls(measure, units):
    """aten op calls per unit (step, forward, new token) of one untimed measurement, and its profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        measure()
    return round(sum(e.count for e in prof.key_averages() if e.key.startswith('aten::')) / units), prof


def layer_timer(m, l, x, routing, cfg, dev):
    """One layer of model m alone, on the hidden states that reach it: forward and backward in top-k routing, the
    forward alone (no gradient) in causal routing. The routed computation without the rest of the model, where
    the naive and the fast path differ. Returns measure() -> (seconds, tokens)."""
    with torch.no_grad():
        pos = torch.arange(x.size(1), device=x.device)
        h = m.transformer.wte(x)
        for layer in m.transformer.h[:l]:
            h = layer(h, pos, routing)[0]                                # (B, T, C) the input of layer l
    h.requires_grad_(routing == 'topk')
    layer = m.transformer.h[l]

    def measure():
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(cfg.steps):
            if routing == 'topk':
                layer.zero_grad(set_to_none=True)
                h.grad = None
                layer(h, pos, routing)[0].square().mean().backward()
            else:
                with torch.no_grad():
                    layer(h, pos, routing)
        sync(dev)
        return time.perf_counter() - t0, cfg.steps * x.numel()
    return measure


def optimizer(m, dev):
    """What train.py steps with: GPT.configure_optimizers; the nanoGPT-shaped reference gets plain AdamW, as nanoGPT
    does on a CPU."""
    if not isinstance(m, NanoGPTRef):
        return m.configure_optimizers(0.1, 1e-4, (0.9, 0.95), dev.split(':')[0])
    return torch.optim.AdamW(m.parameters(), lr=1e-4)


def saved_bytes(model, x, y):
    """Bytes of the tensors autograd saves for backward in one training forward: the activation memory."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, y)
    out[1].backward()
    return total


# OpenMP (libgomp here) reads these when torch loads, so each setting is timed in a fresh child process.
# 300000 is libgomp's own spin count when nothing is set: the threads of a parallel region busy-wait that long for
# each other before they sleep. A neighbour that takes a core away makes that spinning the whole cost.
CPU_SETTINGS = {'libgomp default': {'GOMP_SPINCOUNT': '300000'},
                'OMP_WAIT_POLICY=PASSIVE': {'OMP_WAIT_POLICY': 'PASSIVE'},
                'GOMP_SPINCOUNT=30000': {'GOMP_SPINCOUNT': '30000'},
                'GOMP_SPINCOUNT=10000': {'GOMP_SPINCOUNT': '10000'},
                'GOMP_SPINCOUNT=3000': {'GOMP_SPINCOUNT': '3000'},
                'GOMP_SPINCOUNT=1000': {'GOMP_SPINCOUNT': '1000'},
                '1 thread': {'OMP_NUM_THREADS': '1', 'GOMP_SPINCOUNT': '300000'}}
BUSY = 'import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\nwhile True:\n    a @ a\n'


def contention_table(cfg, T):
    """The train phase of dense and X-MoD at context T, in a child process per CPU setting, alone and then beside
    one busy process (a 1-thread matmul loop, like a second training run on the cores)."""
    rows = []
    for name, env in CPU_SETTINGS.items():
        got = {}
        for neighbour in (False, True):
            busy = subprocess.Popen([sys.executable, '-c', BUSY], env=dict(os.environ, OMP_NUM_THREADS='1')) \
                if neighbour else None
            try:
                with tempfile.TemporaryDirectory() as d:
                    out = os.path.join(d, 'rows.json')
                    child = {k: v for k, v in os.environ.items() if k not in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT',
                                                                             'OMP_NUM_THREADS')}
                    subprocess.run([sys.executable, os.path.abspath(__file__), '--phases=train', f'--contexts={T}',
                                    '--extras=False', f'--steps={cfg.steps}', f'--rounds={cfg.rounds}',
                                    f'--n_embd={cfg.n_embd}', f'--n_head={cfg.n_head}', f'--json={out}'],
                                   env=dict(child, **env), check=True, stdout=subprocess.DEVNULL)
                    for r in jsonlib.load(open(out)):
                        got[(r['model'], neighbour)] = r['tokens_per_s']
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
        for model in ('dense', 'xmod'):
            rows.append(dict(setting=name, model=model, alone=got[(model, False)], busy=got[(model, True)]))
    base = {r['model']: r['alone'] for r in rows if r['setting'] == 'libgomp default'}
    print(f"train phase at T={T}, tokens/s; alone vs libgomp default alone, and beside one busy process vs alone")
    print("| setting | model | alone | vs default alone | beside a busy process | busy / alone |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        r['alone_vs_default'] = round(r['alone'] / base[r['model']], 3)
        r['busy_vs_alone'] = round(r['busy'] / r['alone'], 3)
        print(f"| {r['setting']} | {r['model']} | {r['alone']:,.0f} | {r['alone_vs_default']:.2f} | "
              f"{r['busy']:,.0f} | {r['busy_vs_alone']:.2f} |")
    return rows


def model_flops(r, row, peak):
    """Model TFLOP/s of a train or eval row (train: 3 x forward FLOPs per token, as train.py counts; eval: 1 x) into
    row, and its MFU against the device's peak (peak: TFLOP/s, 0 when unknown). Returns its line of the MFU table,
    or None for a row without FLOPs (decode, the extras)."""
    if not (r.get('fpt') and r['phase'] in ('train', 'eval_causal')):
        return None
    row['model_tflops'] = round((3 if r['phase'] == 'train' else 1) * r['fpt'] * r['tokens_per_s'] / 1e12, 4)
    if peak:
        row['mfu'] = round(row['model_tflops'] / peak, 4)
    mfu = f"{row['mfu']:.1%}" if peak else '-'
    return f"| {row['model']} | {row['impl']} | {row['T']} | {row['phase']} | {row['model_tflops']:.3g} | {mfu} |"


def write_json(path, rows):
    with open(path + '.tmp', 'w') as f:          # whole or not at all: a time limit may stop us at any moment
        jsonlib.dump(rows, f, indent=1)
    os.replace(path + '.tmp', path)


def row_of(r, group, peak):
    """(the JSON row of r from the rounds measured so far, its ratio against its reference, against the same-depth
    dense model, its line of the MFU table). A reference not measured yet gives a ratio of None."""
    r['tokens_per_s'] = statistics.median(r['times'])

    def ratio(model, impl='eager'):
        ref = [q for q in group if q['model'] == model and q['impl'] == impl and q.get('times')]
        return r['tokens_per_s'] / statistics.median(ref[0]['times']) if ref else None
    vs = ratio(*r['ref'])
    vs_same = ratio('same_depth' + r.get('at', '')) if r['phase'].startswith('decode') else None
    row = dict(model=r['model'], stride=r['stride'], impl=r['impl'], T=r['T'], phase=r['phase'],
               tokens_per_s=round(r['tokens_per_s'], 1), ratio_vs_dense=vs and round(vs, 3),
               against=' '.join(r['ref']), aten_calls=r.get('aten_calls'), rounds=len(r['times']))
    if r['phase'].startswith('decode'):
        row['ratio_vs_same_depth_dense'] = vs_same and round(vs_same, 3)
    if r['mem'] is not None:
        row['mem_MB'] = round(r['mem'] / 2 ** 20, 1)
    if 'sync_share' in r:
        row['sync_share'] = round(r['sync_share'], 4)
    return row, vs, vs_same, model_flops(r, row, peak)


def bench(argv):
    argv = list(argv)
    if '--json' in argv[:-1]:                            # `--json PATH` as well as `--json=PATH`
        i = argv.index('--json')
        argv[i:i + 2] = [f'--json={argv[i + 1]}']
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, files=False)
    for k in ('tokens_per_step', 'n_embd', 'n_head', 'dense_layers', 'stride', 'steps', 'rounds', 'new_tokens',
              'prompt'):
        if getattr(cfg, k) < 1:
            raise UserError(f"--{k}={getattr(cfg, k)}: expected an integer >= 1")
    try:
        Ts = [int(t) for t in cfg.contexts.split(',')]
    except ValueError:
        raise UserError(f"--contexts={cfg.contexts!r}: expected comma-separated integers") from None
    wanted = cfg.phases.split(',')
    bad = [p for p in wanted if p not in ('train', 'eval_causal', 'decode_b1', 'decode_b8')]
    if bad:
        raise UserError(f"--phases: unknown {', '.join(bad)} (train | eval_causal | decode_b1 | decode_b8)")
    dev = cfg.device or ('cuda' if torch.cuda.is_available() else
                         'mps' if torch.backends.mps.is_available() else 'cpu')
    try:
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as e:      # an unknown device, or one this machine lacks
        raise UserError(f"--device={dev}: {one_line(e)}") from None
    if cfg.dtype not in ('float32', 'bfloat16'):
        raise UserError(f"--dtype={cfg.dtype!r}: expected float32 | bfloat16")
    if cfg.compile:   # causal routing's k_max, read from the data, stays in the graph (xmod.py, RoutedBlock)
        torch._dynamo.config.capture_scalar_outputs = True
        torch._dynamo.config.recompile_limit = 64   # every row's model is a new compile of the same GPT.forward
    ctx = nullcontext() if cfg.dtype == 'float32' else torch.autocast(dev.split(':')[0], dtype=torch.bfloat16)
    if cfg.contention:
        rows = contention_table(cfg, Ts[0])
        if cfg.json:
            write_json(cfg.json, rows)
        return 0

    versions = [('working tree', xmod)] + ([(cfg.ref, xmod_at(cfg.ref))] if cfg.ref else [])
    if cfg.ops:
        rows = ops_table(versions, cfg, Ts)
        if cfg.json:
            write_json(cfg.json, rows)
        return 0

    # dicts: model, stride, impl, T, phase, measure, ref (the model and impl its ratio is against), group (the rows
    # whose rounds interleave: --ref's rows join the working tree's)
    rows = []
    for T in Ts:
        B = cfg.batch_size or max(1, cfg.tokens_per_step // T)
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, VOCAB, (B, T), generator=g).to(dev)
        y = torch.randint(0, VOCAB, (B, T), generator=g).to(dev)
        dense, sparse = model_configs(xmod, cfg, T)
        for phase in wanted:
            decode = phase.startswith('decode')
            if decode and T < cfg.prompt + cfg.new_tokens:
                continue                                   # the window would slide: not what decode measures
            for version, mx in versions:
                at = '' if mx is xmod else f'@{version}'   # --ref's models: dense@REF, xmod@REF, same_depth@REF
                d, sp = model_configs(mx, cfg, T)
                models = {'dense': d, 'xmod': sp, 'same_depth': replace(d, n_layer=sp.n_layer)}
                for name, gptconf in models.items():
                    if name == 'same_depth' and not decode:
                        continue
                    for impl in ['eager'] + (['compiled'] if cfg.compile and not decode else []):
                        m = calibrated(gptconf, dev, x, mx)
                        if decode:
                            m.eval()
                        fwd = torch.compile(m, fullgraph=True) if impl == 'compiled' else m
                        opt = optimizer(m, dev) if phase == 'train' else None
                        rows.append(dict(model=name + at, stride=gptconf.stride if name == 'xmod' else None,
                                         impl=impl, T=T, phase=phase, ref=('dense' + at, impl), group=('dense', impl),
                                         at=at, fpt=mx.flops_per_token(gptconf, T, B),
                                         measure=timer(phase, m, fwd, x, y, opt, ctx, dev, cfg),
                                         mem=saved_bytes(m, x, y) if phase == 'train' and impl == 'eager' else None))
        moe = replace(dense, model='moe')
        if cfg.extras and 'train' in wanted:          # the MoE's whole model at every T: its goal is "at every T"
            for impl in ('fast', 'naive'):
                m = calibrated(replace(moe, impl=impl), dev, x)
                rows.append(dict(model='moe', stride=None, impl=impl, T=T, phase='train', ref=('moe', 'naive'),
                                 measure=timer('train', m, m, x, y, optimizer(m, dev), ctx, dev,
                                               cfg), mem=None))
        if cfg.extras and 'train' in wanted and T == Ts[0]:
            # the routed computation alone: X-MoD's first routed layer (both routings) and the MoE's first layer
            for name, gptconf, l, routings in (('xmod', sparse, 1, ('topk', 'causal')), ('moe', moe, 0, ('topk',))):
                for routing in routings:
                    for impl in ('fast', 'naive'):
                        m = calibrated(replace(gptconf, impl=impl), dev, x)
                        phase = 'layer_train' if routing == 'topk' else 'layer_causal'
                        rows.append(dict(model=name, stride=gptconf.stride if name == 'xmod' else None, impl=impl, T=T,
                                         phase=phase, ref=(name, 'naive'), mem=None,
                                         measure=layer_timer(m, l, x, routing, cfg, dev)))
    if cfg.extras and 'train' in wanted:             # nanoGPT's CPU recipe shape: 4 x 128, batch 12 x 64
        g = torch.Generator().manual_seed(1)
        xr, yr = (torch.randint(0, VOCAB, (12, 64), generator=g).to(dev) for _ in range(2))
        ours = calibrated(xmod.GPTConfig(n_layer=4, n_embd=128, n_head=4, block_size=64, vocab_size=VOCAB), dev, xr)
        torch.manual_seed(0)
        ref = NanoGPTRef(4, 128, 4, 64, VOCAB).to(dev)
        for name, m in (('dense_4x128', ours), ('nanogpt_ref', ref)):
            rows.append(dict(model=name, stride=None, impl='eager', T=64, phase='train', ref=('nanogpt_ref', 'eager'),
                             measure=timer('train', m, m, xr, yr, optimizer(m, dev), ctx, dev,
                                           cfg), mem=None))

    # Rows are measured a group at a time: the rows a ratio compares (one T, phase and reference). Each row is
    # warmed up (and compiled) and timed once in turn, then the other rounds are interleaved across the group. The
    # JSON is rewritten after every measurement, so a time limit loses only the row in progress (a compile that
    # does not finish, its own row).
    groups = {}
    for r in rows:
        groups.setdefault((r['T'], r['phase'], r.get('group', r['ref'])), []).append(r)
    peak = device_peak_tflops(dev, cfg.dtype, cfg.peak_tflops)
    out, mfu_lines = [], []
    print(f"device {dev} {cfg.dtype}, {torch.get_num_threads()} threads, n_embd {cfg.n_embd}, xmod stride "
          f"{cfg.stride} FLOP-matched to {cfg.dense_layers} dense layers; median of {cfg.rounds} rounds")
    print("| model | impl | T | phase | tokens/s | ratio | against | vs same-depth dense | mem MB | aten calls |")
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)

    def timed(r, group):
        seconds, tokens = r['measure']()
        r['times'].append(tokens / seconds)
        if cfg.json:                  # the finished groups' rows, then this group's rows so far
            write_json(cfg.json, out + [row_of(q, group, peak)[0] for q in group if q.get('times')])

    for group in groups.values():
        for r in group:
            r['measure']()                           # warm-up: a compiled row compiles here
            r['times'] = []
            timed(r, group)
        for _ in range(cfg.rounds - 1):
            for r in group:
                timed(r, group)
        for r in group:
            r['aten_calls'], r['prof'] = aten_calls(r['measure'], cfg.new_tokens if r['phase'].startswith('decode')
                                                    else cfg.steps)
            if r['phase'] == 'eval_causal':
                r['sync_share'] = sync_share(r['measure'])
        for r in group:
            row, vs, vs_same, line = row_of(r, group, peak)
            mfu_lines += [line] if line else []
            out.append(row)
            r['row'] = row
            fmt = lambda v: '-' if v is None else f"{v:.2f}"
            print(f"| {row['model']}{'' if row['stride'] is None else ' s%d' % row['stride']} | {row['impl']} | "
                  f"{row['T']} | {row['phase']} | {row['tokens_per_s']:,.0f} | {fmt(vs)} | {row['against']} | "
                  f"{fmt(vs_same)} | {row.get('mem_MB', '-')} | {row['aten_calls']:,} |", flush=True)
        if cfg.json:
            write_json(cfg.json, out)
    waits = [r['row'] for group in groups.values() for r in group if 'sync_share' in r['row']]
    if waits:
        print("\nthe host's wait in syncs (causal routing's one per routed layer), a share of the causal forward's "
              "time: " + ', '.join(f"{w['model']} {w['impl']} T={w['T']} {w['sync_share']:.1%}" for w in waits))
    if mfu_lines:
        print(f"\nmodel FLOP/s (forward FLOPs/token x 3 for train, x 1 for eval) and MFU against "
              f"{f'{peak:g} TFLOP/s' if peak else 'no known peak (--peak_tflops)'}")
        print("| model | impl | T | phase | model TFLOP/s | MFU |\n|---|---|---|---|---|---|")
        print('\n'.join(mfu_lines))
    if cfg.profile:                                  # where the time goes, row by row
        for r in (r for group in groups.values() for r in group):   # the aten_calls measurement's profile
            row = r['row']
            print(f"\nprofile: {row['model']} {row['impl']} T={row['T']} {row['phase']} ({cfg.steps} steps)")
            events = r['prof'].key_averages()
            parts = {e.key: e.cpu_time_total / 1e3 / cfg.steps for e in events
                     if e.key in ('forward', 'backward', 'optimizer')}
            if parts:
                print('per step: ' + ', '.join(f"{k} {v:,.1f} ms" for k, v in parts.items()))
            print(events.table(sort_by='self_cpu_time_total', row_limit=12))
    if cfg.json:
        print(f"wrote {cfg.json}")
    return 0


if __name__ == '__main__':
    sys.exit(run_main('bench.py', bench))
