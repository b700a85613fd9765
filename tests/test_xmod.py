"""Tests of xmod.py: the four families, naive == fast, compile, causality, RoPE positions, the residual, router
gradients and targets, FLOP accounting, balancing, causal calibration, the MoE's losses and drops, bad configs."""
import math
import os
import sys
import warnings
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from conftest import CASES, V, batch, rel_err, tiny
from xmod import (
    GPT,
    GPTConfig,
    MoE,
    MoEAux,
    RoutedAux,
    RoutedBlock,
    Router,
    expert_slots,
    flops_per_token,
    gate_slope,
    layer_kinds,
    match_flops,
    route_topk,
    routed_k,
    routing_stats,
)

# these tests route causally on models no training step calibrated, on purpose (routing's mechanics, not its
# thresholds): xmod.py's one warning about it is expected here, and test_xmod.py checks that it is given
pytestmark = pytest.mark.filterwarnings('ignore:causal routing with thresholds that were never calibrated')

torch.set_num_threads(min(2, torch.get_num_threads()))


def bigram_corpus(n=30000, seed=0):
    """Text-like tokens: a sparse random bigram chain (each token has 4 likely successors), no dominant token."""
    g = torch.Generator().manual_seed(seed)
    succ = torch.randint(0, V, (V, 4), generator=g)
    out = torch.empty(n, dtype=torch.long)
    t = 0
    for i in range(n):
        t = int(succ[t, torch.randint(0, 4, (1,), generator=g)]) if torch.rand(1, generator=g) < 0.9 else \
            int(torch.randint(0, V, (1,), generator=g))
        out[i] = t
    return out


CORPUS = None


def corpus_batch(B, T, g):
    global CORPUS
    if CORPUS is None:
        CORPUS = bigram_corpus()
    ix = torch.randint(0, len(CORPUS) - T - 1, (B,), generator=g)
    return (torch.stack([CORPUS[i:i + T] for i in ix]), torch.stack([CORPUS[i + 1:i + T + 1] for i in ix]))


def routed_layers(model):
    return [layer for layer in model.transformer.h if isinstance(layer, RoutedBlock)]


def measured(m, x, y, routing='topk'):
    """logits, loss and everything the log would record of one forward: the unweighted losses (lm, router_bce, ...)
    and routing_stats."""
    logits, loss, aux = m(x, y, routing=routing, return_aux=True)
    return logits, loss, {**aux['losses'], **routing_stats(m, aux['layers'], routing)}


# ---------------------------------------------------------------------------------------------------------------------
# basics

@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
def test_shapes_finite_and_learns_a_batch(model):
    torch.manual_seed(0)
    m = GPT(tiny(model))
    x, y = batch(4, 32)
    logits, loss = m(x, y)
    assert logits.shape == (4, 32, V) and torch.isfinite(loss)
    logits, loss = m(x)
    assert logits.shape == (4, 1, V) and loss is None
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    start = measured(m, x, y)[2]['lm'].item()
    for _ in range(50):
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert measured(m, x, y)[2]['lm'].item() < start / 2


def test_layer_layout():
    assert layer_kinds(tiny('xmod', n_layer=8, stride=4)) == ['dense', 'routed', 'routed', 'routed'] * 2
    assert layer_kinds(tiny('mod', n_layer=4)) == ['dense', 'routed'] * 2
    assert layer_kinds(tiny('xmod', n_layer=4, stride=1)) == ['dense'] * 4             # stride 1 is dense
    assert layer_kinds(tiny('moe')) == ['moe'] * 4
    assert tiny('xmod').gate == 'variance' and tiny('mod').gate == 'plain'
    assert tiny('xmod').depth_balance > 0 and tiny('mod').depth_balance == 0


def test_same_state_dict_across_impls():
    for model in ['mod', 'xmod', 'moe']:
        fast, naive = GPT(tiny(model)), GPT(tiny(model, impl='naive'))
        assert fast.state_dict().keys() == naive.state_dict().keys()
        naive.load_state_dict(fast.state_dict())   # strict


# ---------------------------------------------------------------------------------------------------------------------
# naive == fast, compile

@pytest.mark.parametrize('model,B,T,capacity,stride', CASES)
def test_naive_equals_fast(model, B, T, capacity, stride):
    extra = dict(expert_capacity_factor=0.6) if model == 'moe' and T == 32 else {}   # force MoE drops
    cfg = tiny(model, n_layer=4 if stride < 4 else 5, capacity=capacity, stride=stride, **extra)
    torch.manual_seed(1)
    fast = GPT(cfg)
    naive = GPT(replace(cfg, impl='naive'))
    x, y = batch(B, T, seed=2)
    fast.calibrate([fast(x, y, return_aux=True)[2]['layers']])   # one training step's calibration: thresholds
    naive.load_state_dict(fast.state_dict())
    for routing, train in [('topk', True), ('topk', False), ('causal', False)]:
        for m in (fast, naive):
            m.train(train)
            m.zero_grad()
        lf, Lf, sf = measured(fast, x, y, routing)
        Lf.backward()
        ln, Ln, sn = measured(naive, x, y, routing)
        Ln.backward()
        assert rel_err(lf, ln) <= 1e-4 and rel_err(Lf, Ln) <= 1e-4
        assert sf.keys() == sn.keys()
        for k in sf:
            assert rel_err(sf[k], sn[k]) <= 1e-4, k
        for (name, pf), pn in zip(fast.named_parameters(), naive.parameters()):
            assert (pf.grad is None) == (pn.grad is None), name
            if pf.grad is not None:
                assert rel_err(pf.grad, pn.grad) <= 1e-4, (routing, name)
        for bf, bn in zip(fast.buffers(), naive.buffers()):
            assert torch.allclose(bf, bn), routing
    if model == 'moe' and extra:
        fast.train()
        assert measured(fast, x, y)[2]['moe_drop_frac'] > 0        # the case really exercised dropping


@pytest.mark.parametrize('model', ['xmod', 'moe'])
def test_fast_path_compiles_without_graph_breaks(model):
    """One graph in both routings. In causal mode a routed layer's padded count k_max comes from the data: with
    capture_scalar_outputs (train.py and bench.py set it) it is an unbacked size in the graph, so a second batch
    that takes a different k_max reuses the graph (no recompile) and still equals eager."""
    torch._dynamo.reset()
    cfg = tiny(model, n_layer=2)
    torch.manual_seed(0)
    m = GPT(cfg)
    x, y = batch(2, 32)
    m.calibrate([m(x, y, return_aux=True)[2]['layers']])                  # routed layers take about c
    m.eval()
    x2, _ = batch(2, 32, seed=2)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        for routing in ('topk', 'causal'):
            explained = torch._dynamo.explain(m)(x, y, routing=routing)
            assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(m, fullgraph=True)
        for routing in ('topk', 'causal'):
            for xb in (x, x2):
                lc, Lc = compiled(xb, y, routing=routing)
                le, Le = m(xb, y, routing=routing)
                assert rel_err(lc, le) <= 1e-4 and rel_err(Lc, Le) <= 1e-4
    if model == 'xmod':
        counts = [int(m(xb, routing='causal', return_aux=True)[2]['layers'][1].mask.sum(1).max())
                  for xb in (x, x2)]
        assert counts[0] != counts[1], counts                             # the two batches' k_max really differ
        assert torch._dynamo.utils.counters['stats']['unique_graphs'] == 2   # topk and causal: no recompile
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------------------------------
# causality, k tokens, pass-through, RoPE, residual

@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_causal_routing_does_not_see_the_future(model, impl):
    torch.manual_seed(0)
    m = GPT(tiny(model, impl=impl, capacity=0.25))
    x, y = batch(3, 32)
    m.calibrate([m(x, y, return_aux=True)[2]['layers']])       # calibrate thresholds once
    m.eval()
    t = 12
    x2 = x.clone()
    x2[:, t + 1:] = (x2[:, t + 1:] + 1 + torch.arange(32 - t - 1)) % V
    l1, _ = m(x, y, routing='causal')
    l2, _ = m(x2, y, routing='causal')
    assert torch.allclose(l1[:, :t + 1], l2[:, :t + 1], atol=1e-6, rtol=0)
    if model in ('mod', 'xmod'):
        # the test can fail: top-k routing over a sequence does leak the future
        l1, _ = m(x, y, routing='topk')
        l2, _ = m(x2, y, routing='topk')
        assert not torch.allclose(l1[:, :t + 1], l2[:, :t + 1], atol=1e-6, rtol=0)


def record_routed_io(model):
    """Hooks: each routed layer's input x, output x, selection mask, and the token count its block processed."""
    log = []

    def hook(layer, args, out):
        log.append(dict(layer=layer, x_in=args[0].detach().clone(), x_out=out[0].detach().clone(),
                        mask=out[1].mask, scores=out[1].scores.detach()))

    def count(layer, args, out):
        counts.append(args[0].shape[:2])

    counts = []
    handles = [l.register_forward_hook(hook) for l in routed_layers(model)]
    handles += [l.block.ln_1.register_forward_hook(count) for l in routed_layers(model)]
    return log, counts, handles


@pytest.mark.parametrize('impl', ['fast', 'naive'])
@pytest.mark.parametrize('model', ['mod', 'xmod'])
def test_topk_processes_exactly_k_and_unselected_pass_bit_for_bit(model, impl):
    torch.manual_seed(0)
    B, T, c = 3, 30, 0.2
    m = GPT(tiny(model, impl=impl, capacity=c, n_layer=6, stride=2 if model == 'mod' else 3))
    k = routed_k(c, T)
    log, counts, _ = record_routed_io(m)
    m(*batch(B, T))
    assert len(log) == len(routed_layers(m))
    for rec in log:
        assert (rec['mask'].sum(1) == k).all()
        keep = ~rec['mask']
        assert torch.equal(rec['x_out'][keep], rec['x_in'][keep])
        assert not torch.equal(rec['x_out'][rec['mask']], rec['x_in'][rec['mask']])
    # what the blocks actually computed on: (B, k) tokens at once (fast) or k per sequence (naive)
    expect = [(B, k)] if impl == 'fast' else [(1, k)] * B
    assert counts == expect * len(log)
    # causal routing: unselected tokens pass through too
    log.clear()
    m.eval()
    m(*batch(B, T), routing='causal')
    for rec in log:
        keep = ~rec['mask']
        assert torch.equal(rec['x_out'][keep], rec['x_in'][keep])


@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_routed_attention_uses_original_positions_and_adds_the_residual_once(impl):
    torch.manual_seed(0)
    m = GPT(tiny('xmod', impl=impl, n_layer=2, capacity=0.25)).eval()
    layer = routed_layers(m)[0]
    with torch.no_grad():
        layer.block.attn.c_attn.weight.mul_(20.0)   # sharp attention, so positions matter (at init it is uniform)
    log, _, _ = record_routed_io(m)
    m(*batch(2, 32))
    rec = log[0]
    for b in range(2):
        pos = rec['mask'][b].nonzero().squeeze(1)
        assert pos.max() >= len(pos)              # positions really differ from 0..k-1
        xs = rec['x_in'][b, pos].unsqueeze(0)
        w = layer.router.gate(rec['scores'][b, pos]).unsqueeze(-1)
        with torch.no_grad():
            f_orig = layer.block.delta(xs, pos)[0]
            f_renum = layer.block.delta(xs, torch.arange(len(pos)))[0]
        got = rec['x_out'][b, pos]
        assert torch.allclose(got, xs[0] + w * f_orig, atol=1e-6)       # x + g*w(r)*f(x): residual added once
        assert not torch.allclose(got, xs[0] + w * f_renum, atol=1e-3)  # renumbered positions would be caught
        assert not torch.allclose(got, 2 * xs[0] + w * f_orig, atol=1e-4)


@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_full_capacity_with_unit_gate_is_a_dense_block(impl):
    """With c = 1 and the gate forced to 1, a routed layer must compute exactly the dense block x + f(x)."""
    torch.manual_seed(0)
    m = GPT(tiny('xmod', impl=impl, n_layer=2, capacity=1.0)).eval()
    layer = routed_layers(m)[0]
    layer.router.gate = lambda r, thr=None: torch.ones_like(r)
    x = torch.randn(2, 32, 32)
    out, _ = layer(x, torch.arange(32))
    with torch.no_grad():
        assert torch.allclose(out, layer.block(x, torch.arange(32))[0], atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# the router: gradients, BCE targets per batch element, batch independence

@pytest.mark.parametrize('gate', ['variance', 'plain', 'calibrated'])
def test_gradients_reach_the_router_through_the_gate(gate):
    torch.manual_seed(0)
    m = GPT(tiny('xmod', gate=gate, router_bce=0.0, depth_balance=0.0))   # only the gated update carries gradient
    _, loss = m(*batch(2, 32))
    loss.backward()
    for layer in routed_layers(m):
        assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0


def test_calibrated_gate_centres_the_sigmoid_on_the_threshold():
    """gate='calibrated' is gain * sigmoid(r - threshold): a token at the threshold gets half the gain and the steepest
    slope, gain / 4, wherever the scores' level has drifted. The variance gate, gain * sigmoid(r), is saturated at the
    same scores (slope near 0): the mechanism the calibrated gate exists for."""
    torch.manual_seed(0)
    routers = {gate: Router(tiny('xmod', gate=gate)) for gate in ('variance', 'calibrated')}
    for router in routers.values():
        router.add_cut(torch.tensor(6.0))                         # one EMA step: the threshold is 6 (debiased)
        assert abs(router.threshold().item() - 6.0) < 1e-5
    r = 6.0 + torch.linspace(-0.5, 0.5, 11).unsqueeze(0)          # (1, 11) scores around a high threshold
    for gate, router in routers.items():
        g = router.gain.detach()
        want = g * torch.sigmoid(r - 6.0) if gate == 'calibrated' else g * torch.sigmoid(r)
        assert torch.allclose(router.gate(r).detach(), want, atol=1e-6)
    cal, var = (gate_slope(routers[gate], r) for gate in ('calibrated', 'variance'))
    g = routers['calibrated'].gain.item()
    assert abs(cal[0, 5].item() - g / 4) < 1e-6                    # at the threshold: the sigmoid's steepest point
    assert (cal > 0.2 * g).all() and (var < 0.01 * g).all()


@pytest.mark.parametrize('gate,router', [('variance', 'learned'), ('calibrated', 'learned'), ('plain', 'learned'),
                                         ('variance', 'random')])
def test_gate_slope_is_logged_per_routed_layer(gate, router):
    """routing_stats logs gate_slope_l, the mean of d gate / d r over the tokens layer l took: gain * s (1 - s) for a
    sigmoid gate (s its sigmoid), 1 for the plain gate, 0 for random routing (its gate is the gain alone)."""
    torch.manual_seed(0)
    m = GPT(tiny('xmod', gate=gate, router=router))
    _, _, aux = m(*batch(2, 32), return_aux=True)
    stats = routing_stats(m, aux['layers'], 'topk')
    for l, layer in enumerate(m.transformer.h):
        if layer.kind != 'routed':
            assert f'gate_slope_{l}' not in stats
            continue
        a, rt = aux['layers'][l], layer.router
        if router == 'random':
            want = torch.zeros(())
        elif gate == 'plain':
            want = torch.ones(())
        else:
            s = torch.sigmoid(a.scores - (rt.threshold() if gate == 'calibrated' else 0.0))
            want = (rt.gain * s * (1 - s))[a.mask].mean()
        assert abs(stats[f'gate_slope_{l}'].item() - want.item()) < 1e-6


@pytest.mark.parametrize('gate,router', [('variance', 'learned'), ('calibrated', 'learned'), ('plain', 'learned'),
                                         ('variance', 'random')])
def test_gate_slope_is_autograds_derivative_bit_for_bit(gate, router):
    """gate_slope is the gate's derivative in closed form (routing_stats, no autograd.grad per layer): the same bits
    as autograd's, for every gate."""
    torch.manual_seed(0)
    rt = Router(tiny('xmod', gate=gate, router=router))
    rt.add_cut(torch.tensor(0.3))
    r = torch.randn(3, 40) * 3
    rr = r.clone().requires_grad_()
    slope, = torch.autograd.grad(rt.gate(rr).sum(), rr, allow_unused=True)
    assert torch.equal(gate_slope(rt, r), torch.zeros_like(r) if slope is None else slope)


@pytest.mark.parametrize('gate', ['variance', 'calibrated', 'plain'])
def test_shared_routers_are_each_routers_own_bit_for_bit(gate):
    """The fast path computes every router's unit weight and threshold at once (GPT.shared_routers): each is what the
    router computes alone, bit for bit; the naive path and frozen routers compute their own."""
    torch.manual_seed(0)
    m = GPT(tiny('xmod', gate=gate, n_layer=8, stride=4))
    for step in range(3):
        m.calibrate([m(*batch(2, 32, seed=step), return_aux=True)[2]['layers']])
    shared = m.shared_routers('causal')
    assert len(shared) == len(m.routed_layers()) == 6
    for (unit, thr), layer in zip(shared, m.routed_layers()):
        assert torch.equal(thr, layer.router.threshold())
        assert torch.equal(unit, layer.router.unit_weight()) if gate != 'plain' else unit is None
    assert all(s is None for s in GPT(tiny('xmod', impl='naive')).shared_routers('causal'))


@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_router_bce_targets_are_per_sequence(impl):
    torch.manual_seed(0)
    m = GPT(tiny('xmod', impl=impl, n_layer=4, capacity=0.25))
    log, _, _ = record_routed_io(m)
    B, T = 4, 32
    stats = measured(m, *batch(B, T))[2]
    k = routed_k(0.25, T)
    expected = []
    for rec in log:
        r = rec['scores']
        own = torch.zeros(B, T, dtype=torch.bool)
        for b in range(B):                               # each sequence's own top-k, computed independently
            own[b, torch.topk(r[b], k).indices] = True
        assert torch.equal(rec['mask'], own)
        first_only = own[0].expand(B, T)
        assert not torch.equal(own, first_only)          # targets from sequence 0 alone would differ
        cut = torch.stack([(r[b].sort(descending=True).values[k - 1] + r[b].sort(descending=True).values[k]) / 2
                           for b in range(B)])
        expected.append(F.binary_cross_entropy_with_logits(r - cut[:, None], own.float()))
    assert abs(stats['router_bce'].item() - torch.stack(expected).mean().item()) < 1e-6


@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
def test_batch_elements_are_independent(model):
    """A batch gives each sequence the logits and loss it gets alone (top-k is per sequence; the loss targets line up
    for B > 1). The MoE is checked without drops, since a batch-wide capacity couples sequences by design."""
    torch.manual_seed(0)
    m = GPT(tiny(model, expert_capacity_factor=4.0)).eval()
    x, y = batch(3, 32)
    logits, _, stats = measured(m, x, y)
    lm = stats['lm']
    singles = [m(x[b:b + 1], y[b:b + 1]) for b in range(3)]
    assert torch.allclose(logits, torch.cat([s[0] for s in singles]), atol=1e-5)
    per_seq = torch.stack([F.cross_entropy(s[0][0], y[b]) for b, s in enumerate(singles)])
    assert abs(lm.item() - per_seq.mean().item()) < 1e-5


def test_route_topk_cut_and_order():
    scores = torch.tensor([[0.1, 0.9, 0.3, 0.8, 0.2], [5.0, 4.0, 3.0, 2.0, 1.0]])
    idx, mask, cut = route_topk(scores, 2)
    assert idx.tolist() == [[1, 3], [0, 1]]
    assert torch.equal(mask, scores > cut[:, None])


# ---------------------------------------------------------------------------------------------------------------------
# accounting

@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
@pytest.mark.parametrize('T', [32, 64])
def test_flops_per_token_matches_flop_counter(model, T):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    B = 2
    cfg = tiny(model, n_embd=64, n_head=4, block_size=64, n_layer=6, stride=2 if model == 'mod' else 3,
               capacity=0.125)
    m = GPT(cfg)
    x, y = batch(B, T)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        m(x, y)
    measured = counter.get_total_flops() / (B * T)
    assert abs(flops_per_token(m.config, T, batch_size=B) / measured - 1) < 0.02


def test_flop_matching_lands_within_two_percent_or_says_so():
    dense = GPTConfig(n_layer=4, n_embd=128, n_head=4, block_size=256)
    target = flops_per_token(dense)
    for model, kw in [('xmod', dict(stride=4)), ('xmod', dict(stride=8)), ('xmod', dict(stride=4, n_layer=16)),
                      ('mod', {})]:
        cfg = match_flops(dense, model, **kw)
        assert cfg.model == model and abs(flops_per_token(cfg) / target - 1) <= 0.02
        assert routed_k(cfg.capacity, cfg.block_size) == round(cfg.capacity * cfg.block_size)
    assert match_flops(dense, 'xmod', stride=4, n_layer=16).n_layer == 16
    stride1 = match_flops(dense, 'xmod', stride=1)             # stride 1: all anchors, the dense model itself
    assert layer_kinds(stride1) == ['dense'] * 4 and flops_per_token(stride1) == target
    with pytest.raises(ValueError, match='mod | xmod'):
        match_flops(dense, 'moe')                              # the MoE is matched on active parameters instead
    with pytest.raises(ValueError, match='within'):
        match_flops(dense, 'xmod', stride=2, n_layer=10)       # 5 dense anchors already exceed 4 dense layers


def test_param_accounting():
    for model in ['dense', 'mod', 'xmod', 'moe']:
        m = GPT(tiny(model))
        total = sum(p.numel() for p in m.parameters())
        assert m.num_params(non_embedding=False) == total
        assert m.num_params() == total - V * 32
        if model == 'dense':
            assert m.num_active_params() == m.num_params()
        else:
            assert m.num_active_params() < m.num_params()
    m = GPT(tiny('xmod', n_layer=4, stride=2, capacity=0.25))  # D r D r
    block = sum(p.numel() for p in m.transformer.h[0].parameters())
    router = sum(p.numel() for p in routed_layers(m)[0].router.parameters())
    assert m.num_active_params() == pytest.approx(2 * block + 2 * (0.25 * block + router) + 32)


# ---------------------------------------------------------------------------------------------------------------------
# training behaviour: depth balancing, causal calibration

def train_xmod(balance, seed, steps=40):
    torch.manual_seed(seed)
    cfg = tiny('xmod', n_layer=8, stride=4, capacity=0.25, depth_balance=balance)
    m = GPT(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        _, loss, aux = m(*corpus_batch(16, 32, g), return_aux=True)
        opt.zero_grad()
        loss.backward()
        m.calibrate([aux['layers']])
        opt.step()
    return m.eval()


def test_depth_balancing_cuts_realised_depth_spread_and_causal_rate_is_calibrated():
    spread = {0.0: [], 0.1: []}
    eval_batch = corpus_batch(64, 32, torch.Generator().manual_seed(123))
    for seed in range(3):
        for balance in spread:
            m = train_xmod(balance, seed)
            with torch.no_grad():
                spread[balance].append(measured(m, *eval_batch)[2]['depth_std'].item())       # realised: top-k masks summed
                if balance > 0:
                    stats = measured(m, *eval_batch, routing='causal')[2]
                    for layer in routed_layers(m):
                        rate = stats[f'causal_rate_{layer.router.layer_idx}'].item()
                        assert 0.7 * 0.25 <= rate <= 1.3 * 0.25, (seed, layer.router.layer_idx, rate)
    off, on = sum(spread[0.0]) / 3, sum(spread[0.1]) / 3
    assert on <= 0.8 * off, spread


# ---------------------------------------------------------------------------------------------------------------------
# the MoE

def moe_layer(**kw):
    cfg = tiny('moe', n_expert=4, expert_top_k=2, **kw)
    return GPT(cfg), cfg


@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_moe_balance_loss_is_one_when_uniform_and_drops_are_counted(impl):
    m, cfg = moe_layer(impl=impl, expert_capacity_factor=1.0)
    moe = m.transformer.h[0].mlp
    assert isinstance(moe, MoE)
    with torch.no_grad():
        moe.router.weight.zero_()                       # uniform probabilities
    x = torch.randn(2, 16, 32)
    _, aux = moe(x)
    assert isinstance(aux, MoEAux) and abs(aux.balance.item() - 1.0) < 1e-6
    # send every token to experts 0 (first choice) and 1 (second choice)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0], moe.router.weight[1, 0] = 10.0, 5.0
    x = torch.randn(2, 16, 32)
    x[..., 0] = x[..., 0].abs() + 1.0
    _, aux = moe(x, 'topk')
    N, cap = 32, math.ceil(1.0 * 2 * 32 / 4)            # 16 slots per expert
    assert cap == expert_slots(cfg, N)
    assert abs(aux.drop_frac.item() - (1 - 2 * cap / (2 * N))) < 1e-6
    assert aux.load.tolist() == [0.5, 0.5, 0.0, 0.0]
    _, aux = moe(x, 'causal')                            # causal routing drops nothing
    assert aux.drop_frac.item() == 0.0


# ---------------------------------------------------------------------------------------------------------------------
# bad configs

@pytest.mark.parametrize('kw,field', [
    (dict(n_embd=30, n_head=4), 'n_embd'),
    (dict(capacity=0.0), 'capacity'),
    (dict(capacity=1.5), 'capacity'),
    (dict(stride=0), 'stride'),
    (dict(n_expert=2, expert_top_k=3), 'expert_top_k'),
    (dict(model='moed'), 'model'),
    (dict(impl='slow'), 'impl'),
    (dict(gate='sigmoid'), 'gate'),
    (dict(router='hash'), 'router'),
    (dict(bce_logits='sigmoid'), 'bce_logits'),
    (dict(router_bce=-0.1), 'router_bce'),
    (dict(resid_init='depth'), 'resid_init'),
    (dict(capacity=0.01, block_size=32), 'capacity'),    # int(0.01*32 + 0.5) = 0: no token would be routed
])
def test_bad_configs_raise(kw, field):
    with pytest.raises(ValueError, match=field):
        GPTConfig(**kw)


def test_stride_is_a_family_default_and_mod_refuses_another():
    """stride=None is the family's: MoD's alternation (2), 4 for the rest. MoD with any other stride is refused,
    naming the family that has one (the command line says the same: train.py builds a GPTConfig)."""
    assert [GPTConfig(model=m).stride for m in ('dense', 'mod', 'xmod', 'moe')] == [4, 2, 4, 4]
    assert GPTConfig(model='mod', stride=2).anchor_stride() == 2 and GPTConfig(model='xmod', stride=8).stride == 8
    with pytest.raises(ValueError, match=r"stride=4 does nothing for model='mod'.*model='xmod'.*--stride=4"):
        GPTConfig(model='mod', stride=4)
    assert match_flops(GPTConfig(), 'mod').stride == 2 and match_flops(GPTConfig(stride=2), 'xmod').stride == 4


def test_a_capacity_that_would_be_ignored_is_refused():
    """capacity=None is 0.125. With n_layer given, match_flops solves the capacity, so a capacity given too would
    be ignored: refused, naming the two ways that take it (train.py builds its sparse models through match_flops)."""
    assert GPTConfig().capacity == 0.125 and GPTConfig(capacity=None).capacity == 0.125
    dense = GPTConfig(model='dense', n_layer=4)
    assert match_flops(dense, 'xmod', stride=4, n_layer=8).n_layer == 8          # the capacity solved
    assert match_flops(dense, 'xmod', stride=4, capacity=0.25).capacity != 0.125  # the depth searched near 0.25
    with pytest.raises(ValueError, match=r"n_layer=8 fixes the depth.*capacity=0.3 would be ignored.*--n_layer=0"):
        match_flops(dense, 'xmod', stride=4, n_layer=8, capacity=0.3)


def test_usage_model_zoo_is_what_python_xmod_prints():
    """docs/usage.md's model zoo table is the output of `python xmod.py`, row for row (the same default X-MoD as the
    Quickstart trains)."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, os.path.join(root, 'xmod.py')], capture_output=True, text=True, check=True,
                         cwd=root).stdout
    table = [line for line in out.splitlines() if line.startswith('|')]
    with open(os.path.join(root, 'docs', 'usage.md')) as f:
        usage = f.read()
    assert len(table) == 7 and all(line in usage.splitlines() for line in table), table
    assert '| xmod | 4 | 12 | 0.1250 | DrrrDrrrDrrr |' in out             # the Quickstart's model, c = 16/128


def test_calibrate_cuts_every_layer_as_update_threshold_does_alone():
    """GPT.calibrate's one batched top-k over all routed layers gives each router, bit for bit, the threshold that
    update_threshold on that layer's scores alone gives (two micro-batches, three steps)."""
    torch.manual_seed(0)
    cfg = tiny('xmod', n_layer=9, stride=4, capacity=0.25)
    m, ref = GPT(cfg), GPT(cfg)
    ref.load_state_dict(m.state_dict())
    for step in range(3):
        steps_layers = [m(*batch(3, 32, seed=10 * step + i), return_aux=True)[2]['layers'] for i in range(2)]
        m.calibrate(steps_layers)
        for l, layer in enumerate(ref.transformer.h):
            if isinstance(layer, RoutedBlock):
                r = torch.cat([layers[l].scores for layers in steps_layers])
                layer.router.update_threshold(r, routed_k(0.25, 32))
    assert len(routed_layers(m)) == 6
    for a, b in zip(routed_layers(m), routed_layers(ref)):
        assert a.router.thr_steps.item() == 3 and torch.equal(a.router.thr_sum, b.router.thr_sum)


def test_calibration_is_once_per_step_over_the_whole_batch():
    """Four micro-batches of 4 sequences calibrate the thresholds exactly as one batch of 16 does: the cut of all
    64 x T scores together, not the EMA of four micro-batch cuts. A forward alone changes nothing."""
    torch.manual_seed(0)
    cfg = tiny('xmod', n_layer=5, stride=4, capacity=0.25)
    big, small = GPT(cfg).eval(), GPT(cfg).eval()
    small.load_state_dict(big.state_dict())
    x, y = batch(16, 32, seed=3)
    before = [b.clone() for b in big.buffers()]
    layers = big.train()(x, y, return_aux=True)[2]['layers']
    assert all(torch.equal(a, b) for a, b in zip(before, big.buffers()))     # a training forward changes nothing
    big.eval().calibrate([layers])
    small.calibrate([small(x[i:i + 4], y[i:i + 4], return_aux=True)[2]['layers'] for i in range(0, 16, 4)])
    for rb, rs in zip(routed_layers(big), routed_layers(small)):
        assert rb.router.thr_steps.item() == rs.router.thr_steps.item() == 1
        assert torch.equal(rb.router.threshold(), rs.router.threshold())
    # the threshold is the cut between the (16k)-th and (16k+1)-th highest score of the whole batch
    _, _, aux = big(x, y, return_aux=True)
    k = routed_k(0.25, 32)
    for layer, a in zip(big.transformer.h, aux['layers']):
        if isinstance(a, RoutedAux):
            top = a.scores.flatten().sort(descending=True).values
            assert torch.allclose(layer.router.threshold(), (top[16 * k - 1] + top[16 * k]) / 2, atol=1e-6)


@pytest.mark.parametrize('model', ['mod', 'xmod'])
def test_causal_fast_path_equals_naive_when_none_or_all_pass(model):
    """forward_fast_causal gathers each sequence's taken tokens (padded to the batch's largest count for attention,
    packed for the MLP) and equals the naive path, with a sequence that takes nothing, one that takes everything and
    one in between; and a batch where nothing passes at all."""
    torch.manual_seed(0)
    m = GPT(tiny(model, n_layer=5, capacity=0.25))
    layer = routed_layers(m)[0]
    x = torch.randn(3, 16, 32)
    w = torch.rand(3, 16)
    mask = torch.zeros(3, 16, dtype=torch.bool)
    mask[1] = True                                       # every token passes
    mask[2, [0, 3, 4, 9, 15]] = True                     # some pass; sequence 0: none
    for mk in (mask, torch.zeros_like(mask)):
        fast, naive = layer.forward_fast_causal(x, mk, w), layer.forward_naive(x, mk, w)
        assert rel_err(fast, naive) <= 1e-5
        assert torch.equal(fast[~mk], x[~mk])            # untaken tokens pass bit for bit
    cost = []                  # attention runs on (B, k_max) tokens, not (B, T); the MLP on their sum, packed
    hooks = [module.register_forward_hook(lambda mod, args, out: cost.append(tuple(args[0].shape[:-1])))
             for module in (layer.block.ln_1, layer.block.mlp)]
    mask[1] = False
    mask[1, :2] = True
    layer.forward_fast_causal(x, mask, w)
    for h in hooks:
        h.remove()
    assert cost == [(3, 5), (0 + 2 + 5,)]


def test_router_zloss_is_the_mean_squared_score_and_off_by_default():
    """The router z-loss ablation: in the loss with its weight only when on; its value is the routed layers' mean
    squared score; it trains the routers."""
    idx, tgt = batch(2, 32)
    torch.manual_seed(0)
    off = GPT(tiny('xmod'))
    _, _, aux = off(idx, tgt, return_aux=True)
    assert 'router_zloss' not in aux['losses']
    torch.manual_seed(0)
    model = GPT(tiny('xmod', router_zloss=0.5))
    _, loss, aux = model(idx, tgt, return_aux=True)
    scores = [a.scores for a in aux['layers'] if isinstance(a, RoutedAux)]
    expect = torch.stack([s.square().mean() for s in scores]).mean()
    assert torch.allclose(aux['losses']['router_zloss'], expect)
    others = sum(getattr(model.config, k) * v for k, v in aux['losses'].items() if k not in ('lm', 'router_zloss'))
    assert torch.allclose(loss, aux['losses']['lm'] + others + 0.5 * expect, atol=1e-6)
    model.zero_grad()
    (0.5 * expect).backward()
    routers = [m.router.weight.grad for m in model.modules() if isinstance(m, RoutedBlock)]
    assert routers and all(g is not None and g.abs().sum() > 0 for g in routers)
    with pytest.raises(ValueError, match='router_zloss'):
        tiny('xmod', router_zloss=-1.0)


def test_causal_routing_warns_once_when_the_thresholds_were_never_calibrated():
    """A loop that never calls GPT.calibrate gets causal thresholds of 0 (about half the tokens taken instead of c):
    the first causal forward says so, once; a calibrated model, and top-k routing, say nothing."""
    m = GPT(tiny('xmod', n_layer=4, stride=2))
    x = torch.randint(0, 48, (2, 32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        m(x, x)                                                    # top-k: no threshold involved
        assert caught == []
        m(x, routing='causal')
        m(x, routing='causal')
        m.generate(x[:, :4], 2)
    assert [str(w.message).split(':')[0] for w in caught] == ['causal routing with thresholds that were never calibrated']
    m = GPT(tiny('xmod', n_layer=4, stride=2))
    _, _, aux = m(x, x, return_aux=True)
    m.calibrate([aux['layers']])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        m(x, routing='causal')
        m.generate(x[:, :4], 2)
    assert caught == []


@pytest.mark.parametrize('model', ['xmod', 'mod', 'moe'])
def test_each_aux_loss_is_weighted_by_the_coefficient_of_its_name(model):
    """The training loss is the LM loss plus each auxiliary loss (log.csv's column) times GPTConfig's coefficient of
    the same name: router_bce, depth_balance and router_zloss for routed layers, moe_balance and moe_zloss for MoE."""
    kw = (dict(moe_balance=0.02, moe_zloss=0.003) if model == 'moe' else
          dict(router_bce=0.3, depth_balance=0.2, router_zloss=0.05))
    torch.manual_seed(0)
    m = GPT(tiny(model, **kw))
    _, loss, aux = m(*batch(2, 32), return_aux=True)
    parts = aux['losses']
    assert set(parts) == {'lm', *kw}
    assert torch.allclose(loss, parts['lm'] + sum(w * parts[k] for k, w in kw.items()), atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------------
# the switches of the baseline panel: the router BCE's logits, random routing, the residual init's depth

@pytest.mark.parametrize('model, bce', [('mod', 'raw'), ('xmod', 'centred'), ('mod', 'centred'), ('xmod', 'raw')])
def test_router_bce_logits_are_raw_for_mod_and_centred_for_xmod(model, bce):
    """MoD as published trains its router with a BCE on the raw scores (its family default); X-MoD centres them on each
    sequence's cut. Both take each sequence's own top-k as targets."""
    default = GPTConfig(model=model).bce_logits
    assert default == ('raw' if model == 'mod' else 'centred')
    torch.manual_seed(0)
    m = GPT(tiny(model, bce_logits=bce if bce != default else None, n_layer=4, capacity=0.25))
    assert m.config.bce_logits == bce
    log, _, _ = record_routed_io(m)
    stats = measured(m, *batch(4, 32))[2]
    expected = []
    for rec in log:
        r, own = rec['scores'], rec['mask']
        top = r.sort(dim=1, descending=True).values
        cut = (top[:, 7] + top[:, 8]) / 2                   # k = 8 of 32
        expected.append(F.binary_cross_entropy_with_logits(r - cut[:, None] if bce == 'centred' else r, own.float()))
    assert abs(stats['router_bce'].item() - torch.stack(expected).mean().item()) < 1e-6


@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_random_routing_takes_random_tokens_deterministically_with_the_gain_as_gate(impl):
    torch.manual_seed(0)
    m = GPT(tiny('xmod', impl=impl, router='random', n_layer=4, stride=2, capacity=0.25))
    x, y = batch(4, 32)
    masks = {}
    for key in ((0, 5, 0), (0, 5, 0), (0, 6, 0), (1, 5, 0)):
        m.set_draw(*key[:2], row0=key[2])
        _, loss, aux = m(x, y, return_aux=True)
        masks.setdefault(key, []).append(aux['layers'][1].mask)
        assert set(aux['losses']) == {'lm'}                     # no router loss: nothing to learn
        assert aux['layers'][1].mask.sum(1).tolist() == [8] * 4
    assert torch.equal(*masks[(0, 5, 0)])                       # the same seed, step and rows: the same draw
    assert not torch.equal(masks[(0, 5, 0)][0], masks[(0, 6, 0)][0])   # another step, another draw
    assert not torch.equal(masks[(0, 5, 0)][0], masks[(1, 5, 0)][0])   # another seed, another draw
    mask = masks[(0, 5, 0)][0]
    assert not torch.equal(mask[0], mask[1])                    # each sequence draws its own tokens
    assert not torch.equal(aux['layers'][1].mask, aux['layers'][3].mask)   # each layer too
    # the scores do not depend on the tokens: another batch, the same selection
    m.set_draw(1, 5)
    assert torch.equal(m(*batch(4, 32, seed=1), return_aux=True)[2]['layers'][1].mask, masks[(1, 5, 0)][0])
    # rows 2-3 of the batch drawn as a micro-batch of their own (row0 = 2) draw what they drew in the whole batch
    m.set_draw(1, 5, row0=2)
    assert torch.equal(m(*batch(2, 32, seed=1), return_aux=True)[2]['layers'][1].mask, masks[(1, 5, 0)][0][2:])
    loss.backward()
    for layer in routed_layers(m):
        assert layer.router.weight.grad is None and not layer.router.weight.requires_grad
        assert layer.router.gain.grad is not None and layer.router.gain.grad.abs() > 0
        r = torch.rand(3, 5)
        assert torch.equal(layer.router.gate(r), layer.router.gain.expand(3, 5))


def test_random_routing_is_uniform_over_positions_and_causal_at_rate_c():
    """Top-k: every position equally likely (a chi-square test over 2,000 sequences); causal mode: each token passes
    with probability c, with no look at any other position; evaluation draws from one fixed seed."""
    torch.manual_seed(0)
    m = GPT(tiny('xmod', router='random', n_layer=2, stride=2, capacity=0.25))
    router = m.transformer.h[1].router
    counts = torch.zeros(32)
    for step in range(50):
        m.set_draw(0, step)
        r = router(torch.zeros(40, 32, 32), torch.arange(32))
        counts += route_topk(r, 8)[1].sum(0)
    expected = counts.sum() / 32
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 61.1                                          # chi-square, 31 dof, p = 0.001
    m.eval()
    r_eval = router(torch.zeros(2000, 32, 32), torch.arange(32))
    rate = (r_eval > router.threshold()).float().mean()
    assert abs(rate - 0.25) < 0.01                              # 64,000 draws: SE 0.0017
    m.set_draw(0, 99)
    assert torch.equal(router(torch.zeros(3, 32, 32), torch.arange(32)), r_eval[:3])   # eval: always EVAL_DRAW
    # causal: a token's score depends only on its own sequence and position, so a prefix scores the same
    assert torch.equal(router(torch.zeros(3, 10, 32), torch.arange(10)), r_eval[:3, :10])
    m.train()
    assert not torch.equal(router(torch.zeros(3, 32, 32), torch.arange(32)), r_eval[:3])


@pytest.mark.parametrize('impl', ['fast', 'naive'])
def test_random_routing_generates_with_and_without_the_cache_alike(impl):
    torch.manual_seed(0)
    m = GPT(tiny('xmod', impl=impl, router='random', n_layer=4, stride=2, capacity=0.25))
    x, y = batch(3, 32)
    m.set_draw(0, 0)
    _, _, aux = m(x, y, return_aux=True)
    m.calibrate([aux['layers']])
    m.eval()
    outs = []
    for use_cache in (True, False):
        torch.manual_seed(1)
        outs.append(m.generate(x[:, :6], 20, use_cache=use_cache))
    assert torch.equal(*outs)
    assert routing_stats(m, m(x, y, routing='causal', return_aux=True)[2]['layers'], 'causal')['causal_rate_1'] > 0


def test_resid_init_active_scales_the_projections_by_the_depth_a_token_passes():
    """0.02/sqrt(2L): L = n_layer by default (GPT-2's rule), anchors + c * routed layers with resid_init='active'."""
    cfg = tiny('xmod', n_layer=12, stride=4, capacity=0.125, n_embd=256, n_head=4, block_size=128)
    assert cfg.init_depth() == 12
    active = replace(cfg, resid_init='active')
    assert active.init_depth() == pytest.approx(3 + 9 * 16 / 128)
    assert replace(tiny('dense', n_layer=4), resid_init='active').init_depth() == 4
    for c, L in ((cfg, 12), (active, 3 + 9 * 16 / 128)):
        torch.manual_seed(0)
        m = GPT(c)
        w = m.transformer.h[0].attn.c_proj.weight
        assert w.std().item() == pytest.approx(0.02 / math.sqrt(2 * L), rel=0.02)     # 65,536 draws: SE 0.3%
        assert m.transformer.h[0].attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.02)


def test_moe_at_capacity_factor_one_matches_the_dense_flops():
    """The MoE FLOP-matched: with top-2 of 8 experts of hidden 2C, a capacity factor of 1.0 gives each token two
    expert slots, the FLOPs of one dense MLP; only the router's 2*C*E per layer is extra."""
    dense = tiny('dense', n_layer=4, n_embd=128, n_head=4, block_size=128, vocab_size=84)
    moe = replace(dense, model='moe', expert_capacity_factor=1.0)
    assert abs(flops_per_token(moe, batch_size=16) / flops_per_token(dense) - 1) < 0.005
    assert flops_per_token(replace(moe, expert_capacity_factor=1.25), batch_size=16) > 1.1 * flops_per_token(dense)


def test_causal_routing_compiles_where_attention_asks_whether_the_length_is_one(monkeypatch):
    """CUDA's attention dispatch asks whether the sequence length is 1. In causal routing that length is k_max, the
    most tokens a sequence took, a size read from the data that torch.compile knows only by its bounds: the question
    broke the compiled graph at each routed layer (on an H200). Here the CPU's attention is wrapped to ask it too.
    k_max is at least 2 where T allows (padding after the real slots, which the causal mask keeps out of them), so
    the question has an answer: one graph, and the same logits, for a batch whose sequences take at most one token."""
    sdpa, lengths = F.scaled_dot_product_attention, []

    def asking(q, k, v, **kw):
        lengths.append(q.size(-2))
        if q.size(-2) == 1:                                  # the question CUDA's dispatch asks
            return sdpa(q, k, v, **kw)
        return sdpa(q, k, v, **kw)

    torch.manual_seed(0)
    m = GPT(tiny('xmod', n_layer=2, stride=2)).eval()
    m.transformer.h[1].router.thr_sum.fill_(1e9)            # nothing passes: one padding slot would do
    m.transformer.h[1].router.thr_steps.fill_(1)
    x, y = batch(2, 32)
    with torch.no_grad():
        want = m(x, y, routing='causal')[1]
    monkeypatch.setattr(F, 'scaled_dot_product_attention', asking)
    with torch.no_grad():
        assert m(x, y, routing='causal')[1].item() == want.item()
    assert lengths == [32, 2]                                # the anchor's, then the routed layer's k_max
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True), torch.no_grad():
        explained = torch._dynamo.explain(m)(x, y, routing='causal')
    torch._dynamo.reset()
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
