"""Reduced precision on the CPU, as a GPU user meets it: every family and impl under bf16 and fp16 autocast (train.py's
default on CUDA is bf16 autocast; float16 with a grad scaler where bf16 is missing), the routers in float32 inside
it, and train.py, sample.py and bench.py with --dtype. CPU autocast runs the same model code as CUDA's; what only a
GPU can show is listed in docs/gpu.md. The model-level tests run on XMOD_TEST_DEVICE (default cpu):
tools/gpu_check.sh runs the tests marked `device` (pytest -m device) on cuda."""
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import run_folder
import sample
import train
from conftest import (
    CASES,
    ENV,
    ROOT,
    TINY,
    TRAIN,
    V,
    assert_bad_input,
    assert_same_losses,
    batch,
    bench_main,
    in_process,
    needs_devices,
    read_json,
    read_log,
    rel_err,
    run,
    tiny,
)
from xmod import GPT, KVCache, MoE, RoutedBlock

# these tests route causally on models no training step calibrated, on purpose (routing's mechanics, not its
# thresholds): xmod.py's one warning about it is expected here, and test_xmod.py checks that it is given
pytestmark = pytest.mark.filterwarnings('ignore:causal routing with thresholds that were never calibrated')

DTYPES = {'bfloat16': torch.bfloat16, 'float16': torch.float16}
DEV = os.environ.get('XMOD_TEST_DEVICE', 'cpu')


def autocast(dtype):
    return torch.autocast(DEV.split(':')[0], dtype=DTYPES[dtype])


def on_dev(*tensors):
    return tuple(t.to(DEV) for t in tensors)


def routed_inputs(m):
    """Record what each routed layer's router and each MoE receives (forward pre-hooks): {module: input}."""
    seen = {}
    for module in m.modules():
        if isinstance(module, (RoutedBlock, MoE)):
            target = module.router if isinstance(module, RoutedBlock) else module
            target.register_forward_pre_hook(lambda mod, args, key=target: seen.__setitem__(key, args[0].detach()))
    return seen


# ---------------------------------------------------------------------------------------------------------------------
# the model under autocast

@pytest.mark.device
@pytest.mark.parametrize('dtype', list(DTYPES))
@pytest.mark.parametrize('impl', ['fast', 'naive'])
@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
def test_trains_evaluates_and_generates_under_autocast(model, impl, dtype):
    """A few training steps (float16 through the grad scaler, as train.py does), top-k and causal evaluation, and
    generation with the KV cache at batch 1 and 3: in reduced precision its logits, teacher-forced on the tokens it
    generated, equal one causal forward of them within 4 units of the dtype's last place (relative to the largest
    logit: the cached and the uncached kernels round differently, and a near tie at the top may then pick another
    token, as seen on CUDA); in float32 greedy tokens with and without the cache are the same."""
    torch.manual_seed(0)
    m = GPT(tiny(model, impl=impl, n_layer=5, stride=4 if model == 'xmod' else 2)).to(DEV)
    opt = m.configure_optimizers(0.1, 3e-3, (0.9, 0.99), DEV.split(':')[0])
    scaler = torch.amp.GradScaler(DEV.split(':')[0], enabled=dtype == 'float16')
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = on_dev(torch.randint(0, V, (3, 32), generator=g), torch.randint(0, V, (3, 32), generator=g))
        with autocast(dtype):
            logits, loss, aux = m(x, y, return_aux=True)
        assert logits.dtype == DTYPES[dtype] and torch.isfinite(loss)      # autocast really ran the matmuls
        scaler.scale(loss).backward()
        m.calibrate([aux['layers']])
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    assert all(torch.isfinite(p).all() for p in m.parameters())
    m.eval()
    with torch.no_grad(), autocast(dtype):
        for routing in ('topk', 'causal'):
            assert torch.isfinite(m(x, y, routing=routing)[1])
    for B in (1, 3):
        with autocast(dtype):
            out = m.generate(x[:B, :6], 12, top_k=1)                                  # (B, 18)
            with torch.no_grad():
                cache = KVCache(m, B)
                steps = [m(out[:, :6], routing='causal', cache=cache)[0]]
                steps += [m(out[:, [t]], routing='causal', cache=cache)[0] for t in range(6, 17)]
                full = m(out[:, :17], out[:, :17], routing='causal')[0][:, 5:]        # (B, 12, V) at 5..16
        assert rel_err(torch.cat(steps, 1).float(), full.float()) <= 4 * torch.finfo(DTYPES[dtype]).eps, B
        # float32: the same greedy tokens; the same sampling RNG for both, in case two logits tie exactly at the top
        torch.manual_seed(2)
        cached = m.generate(x[:B, :6], 12, top_k=1, use_cache=True)
        torch.manual_seed(2)
        window = m.generate(x[:B, :6], 12, top_k=1, use_cache=False)
        assert torch.equal(cached, window), (B, cached, window)


@pytest.mark.device
@pytest.mark.parametrize('dtype', list(DTYPES))
@pytest.mark.parametrize('model', ['mod', 'xmod', 'moe'])
def test_routers_run_in_float32_under_autocast(model, dtype):
    """Under autocast the routers' scores are float32 and equal, bit for bit, the float32 router outside autocast on
    the same input; top-k's mask is exactly scores > cut and causal routing's exactly scores > threshold. The MoE's
    z-loss is that of float32 logits (bf16 logits would miss it by ~1e-3)."""
    torch.manual_seed(0)
    m = GPT(tiny(model, n_layer=4, stride=2)).to(DEV)
    seen = routed_inputs(m)
    x, y = on_dev(*batch(3, 32))
    m.calibrate([m(x, y, return_aux=True)[2]['layers']])
    for routing in ('topk', 'causal'):
        with torch.no_grad(), autocast(dtype):
            _, _, aux = m(x, y, routing=routing, return_aux=True)
        for layer, a in zip(m.transformer.h, aux['layers']):
            if isinstance(layer, RoutedBlock):
                r = a.scores
                assert r.dtype == torch.float32
                assert torch.equal(r, layer.router(seen[layer.router]))              # float32, outside autocast
                cut = a.cut.unsqueeze(1) if routing == 'topk' else layer.router.threshold()
                assert torch.equal(a.mask, r > cut), routing
            elif model == 'moe':
                xf = seen[layer.mlp].reshape(-1, layer.mlp.w_fc.size(1)).float()
                logits = F.linear(xf, layer.mlp.router.weight)                         # (N, E) float32
                want = torch.logsumexp(logits, dim=-1).pow(2).mean()
                assert rel_err(a.zloss, want) <= 1e-6
                probs = F.softmax(logits, dim=-1)
                chosen = probs.topk(m.config.expert_top_k).indices.flatten()
                assert torch.equal(a.load, torch.bincount(chosen, minlength=8).float() / chosen.numel())


@pytest.mark.device
def test_float32_router_is_unchanged():
    """In float32 the router is the plain computation it was before the autocast guard: nothing changes there."""
    torch.manual_seed(0)
    for gate in ('variance', 'plain'):
        router = GPT(tiny('xmod', gate=gate)).transformer.h[1].router.to(DEV)
        x = torch.randn(3, 32, 32, device=DEV)
        w = router.weight
        want = (F.linear(F.rms_norm(x, (32,)), w / w.norm()) if gate == 'variance' else F.linear(x, w)).squeeze(-1)
        assert torch.equal(router(x), want)


@pytest.mark.device
@pytest.mark.parametrize('model,B,T,capacity,stride', CASES)
def test_naive_equals_fast_under_bf16(model, B, T, capacity, stride):
    """naive == fast under bf16 autocast, in top-k and causal routing, to a bf16-sized tolerance (2 units of the last
    place on the logits; measured: equal logits, gradients within 8e-3)."""
    cfg = tiny(model, n_layer=4 if stride < 4 else 5, capacity=capacity, stride=stride)
    torch.manual_seed(1)
    fast, naive = GPT(cfg).to(DEV), GPT(replace(cfg, impl='naive')).to(DEV)
    x, y = on_dev(*batch(B, T, seed=2))
    fast.calibrate([fast(x, y, return_aux=True)[2]['layers']])
    naive.load_state_dict(fast.state_dict())
    for routing in ('topk', 'causal'):
        fast.zero_grad()
        naive.zero_grad()
        with autocast('bfloat16'):
            lf, Lf = fast(x, y, routing=routing)
            ln, Ln = naive(x, y, routing=routing)
        Lf.backward()
        Ln.backward()
        assert rel_err(lf.float(), ln.float()) <= 2 ** -7 and rel_err(Lf, Ln) <= 2 ** -7, routing
        for (name, pf), pn in zip(fast.named_parameters(), naive.parameters()):
            if pf.grad is not None:
                assert rel_err(pf.grad, pn.grad) <= 3e-2, (routing, name)


@pytest.mark.device
def test_compiles_without_graph_breaks_under_autocast():
    """The autocast-off region around the routers stays inside the one graph, in both routings."""
    torch._dynamo.reset()
    for model in ('xmod', 'moe'):
        torch.manual_seed(0)
        m = GPT(tiny(model, n_layer=2)).to(DEV)
        x, y = on_dev(*batch(2, 32))
        with torch._dynamo.config.patch(capture_scalar_outputs=True), autocast('bfloat16'):
            for routing in ('topk', 'causal'):
                explained = torch._dynamo.explain(m)(x, y, routing=routing)
                assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------------------------------
# train.py, sample.py, bench.py with --dtype

def test_train_bf16_resumes_exactly_and_samples(corpus, tmp_path):
    """train.py --dtype=bfloat16 on X-MoD: finite losses, run.json says bfloat16, a run stopped after step 7 and
    resumed from its step-5 checkpoint logs exactly the uninterrupted run's numbers; sample.py generates from the
    bf16 run's checkpoint in bf16, with and without the cache, and in float32 the same greedy text both ways (in
    bf16 a 10-step model's near-tied logits can round either way between the cached and the uncached kernels: seen
    here, 'e' and 'b' swapped at the 24th new token). train.py and sample.py run in this process (in_process)."""
    args = [f'--data_dir={corpus}', '--model=xmod', '--dtype=bfloat16', *TINY]
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    r = in_process(train.main, *args, f'--out_dir={a}')
    assert r.returncode == 0, r.stderr
    assert read_json(a)['dtype'] == 'bfloat16' and 'cpu bfloat16' in r.stdout
    assert in_process(train.main, *args, f'--out_dir={b}', '--stop_iter=7').returncode == 0
    r = in_process(train.main, '--init_from=resume', f'--out_dir={b}', '--dtype=bfloat16')
    assert r.returncode == 0, r.stderr
    rows_a, rows_b = read_log(a), read_log(b)
    assert [x['step'] for x in rows_a] == [x['step'] for x in rows_b] == ['0', '5', '10']
    for x, y in zip(rows_a, rows_b):
        for k in x:
            if k not in ('elapsed_s', 'tokens_per_s'):
                assert x[k] == y[k], (x['step'], k)
    assert float(rows_a[-1]['val_loss_causal']) < float(rows_a[0]['val_loss_causal'])
    texts = {}
    for dtype in ('bfloat16', 'float32'):
        for cache in ('True', 'False'):
            r = in_process(sample.main, f'--out_dir={a}', f'--dtype={dtype}', '--start=to be', '--num_samples=1',
                    '--max_new_tokens=30', '--top_k=1', f'--use_cache={cache}', '--window=exact')   # past block_size
            assert r.returncode == 0 and r.stderr == '', r.stderr
            assert r.stdout.startswith('to be') and len(r.stdout.split('\n---------------\n')[0]) == len('to be') + 30
            texts[dtype, cache] = r.stdout
    assert texts['float32', 'True'] == texts['float32', 'False']
    r = in_process(sample.main, f'--out_dir={a}', '--dtype=fp8')
    assert_bad_input(r.returncode, r.stderr, "--dtype='fp8'", 'bfloat16')


def test_train_float16_uses_the_grad_scaler(corpus, tmp_path):
    """--dtype=float16 on the CPU (the old-GPU path: float16 autocast and a GradScaler): finite losses, and the
    scaler's state lives in the checkpoint, for an exact resume."""
    out = str(tmp_path / 'fp16')
    r = in_process(train.main, f'--data_dir={corpus}', '--model=xmod', '--dtype=float16', f'--out_dir={out}', *TINY)
    assert r.returncode == 0, r.stderr
    rows = read_log(out)
    assert read_json(out)['dtype'] == 'float16' and float(rows[-1]['val_loss']) < float(rows[0]['val_loss'])
    scaler = run_folder.load_checkpoint(os.path.join(out, 'ckpt.pt'))['scaler']
    assert scaler and 0 < scaler['scale'] <= 2.0 ** 16


def test_train_bf16_compiled(corpus, tmp_path):
    """--dtype=bfloat16 --compile=True: the compiled run trains (top-k), evaluates (top-k and causal) and logs the
    eager bf16 run's losses to within bf16 rounding (the eager run in this process)."""
    # Drrr (4 layers, FLOP-matched to 2 dense ones): every kind of layer, a third of the default's compile time
    args = [f'--data_dir={corpus}', '--model=xmod', '--dense_layers=2', '--dtype=bfloat16', *TINY[:4],
            '--max_iters=4', '--eval_interval=4', '--eval_tokens=256', '--warmup_iters=2', '--log_interval=2']
    eager, compiled = str(tmp_path / 'eager'), str(tmp_path / 'compiled')
    assert in_process(train.main, *args, f'--out_dir={eager}').returncode == 0
    r = run(TRAIN, *args, f'--out_dir={compiled}', '--compile=True', timeout=600)    # compiles in a fresh process
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same_losses(eager, compiled, ('train_loss', 'val_loss', 'val_loss_causal'), 0.02)


@pytest.mark.device
@needs_devices(2)
def test_ddp_two_processes_match_one_in_bf16(corpus, tmp_path):
    """2 gloo processes under bf16 autocast at the same global batch give the 1-process losses to bf16 rounding."""
    args = [f'--data_dir={corpus}', '--gradient_accumulation_steps=2', '--dtype=bfloat16', *TINY]
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    r = in_process(train.main, *args, f'--out_dir={one}')
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', TRAIN,
                        *args, f'--out_dir={two}'], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert read_json(two)['world_size'] == 2 and read_json(two)['dtype'] == 'bfloat16'
    assert_same_losses(one, two, ('train_loss', 'val_loss', 'val_loss_causal'), 0.01)


def test_bench_in_bf16(tmp_path):
    """bench.py --dtype=bfloat16 at a toy size: every phase of both models runs and is timed."""
    import json
    out = tmp_path / 'bench.json'
    r = in_process(bench_main, '--contexts=40', '--n_embd=32', '--n_head=2', '--steps=1', '--rounds=1', '--prompt=8',
                   '--new_tokens=8', '--extras=False', '--dtype=bfloat16', f'--json={out}')
    assert r.returncode == 0, r.stderr
    assert 'cpu bfloat16' in r.stdout
    rows = json.load(open(out))
    assert {(x['model'], x['phase']) for x in rows} >= {(m, p) for m in ('dense', 'xmod') for p in
                                                        ('train', 'eval_causal', 'decode_b1', 'decode_b8')}
    assert all(x['tokens_per_s'] > 0 for x in rows)
    assert all(x['model_tflops'] > 0 for x in rows if x['phase'] in ('train', 'eval_causal'))


def test_gpu_selection_is_the_device_tests():
    """What gpu_check.sh's precision step runs on a GPU (pytest -m device): the autocast tests of every family, impl
    and dtype, the float32 routers, naive == fast, one graph under compile, 2-process DDP; never the smoke script
    itself (it would rerun every step) nor the CPU-only tests (train.py runs, the exercises, the fits)."""
    script = open(os.path.join(ROOT, 'tools', 'gpu_check.sh')).read()
    assert 'TESTS="-m device"' in script and '-m pytest -q tests $TESTS' in script
    r = subprocess.run([sys.executable, '-m', 'pytest', '--collect-only', '-q', '-m', 'device', 'tests',
                        '-p', 'no:cacheprovider'], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:]
    ids = [line for line in r.stdout.splitlines() if '::' in line]
    assert all(i.startswith('tests/test_precision.py::') for i in ids), ids
    autocast_ids = {i.split('[')[1].rstrip(']') for i in ids
                    if '::test_trains_evaluates_and_generates_under_autocast[' in i}
    assert autocast_ids == {f'{m}-{impl}-{d}' for m in ('dense', 'mod', 'xmod', 'moe') for impl in ('fast', 'naive')
                            for d in DTYPES}
    functions = {i.split('::')[1].split('[')[0] for i in ids}
    assert functions == {'test_trains_evaluates_and_generates_under_autocast',
                         'test_routers_run_in_float32_under_autocast', 'test_float32_router_is_unchanged',
                         'test_naive_equals_fast_under_bf16', 'test_compiles_without_graph_breaks_under_autocast',
                         'test_ddp_two_processes_match_one_in_bf16'}
    assert len([i for i in ids if '::test_naive_equals_fast_under_bf16[' in i]) == len(CASES)
