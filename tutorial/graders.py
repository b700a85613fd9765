"""
graders.py: the checks of tutorial/exercises.py, one grader per exercise (GRADERS), and the whole-model checks that
`check --all` runs after them (WHOLE_MODEL).

A grader is grade_NAME(m, ref, g): m is the student's module (their copy of xmod.py or fit_law.py), ref the
repository's own file loaded under another module name, g the Grading whose `with g.check('what'):` runs one check.
Expected values come from ref or are computed here by hand, never from helpers in m: a bug outside the exercise's
function must not sit on both sides of a comparison.
"""
import math
from dataclasses import asdict, replace

import numpy as np
import torch
import torch.nn.functional as F


class Fail(Exception):
    """A check failed; the message is its one-line hint."""


def expect(ok, hint):
    if not ok:
        raise Fail(hint)


def same(a, b, atol=1e-5, rtol=1e-4):
    if a is None or b is None:
        return False
    a, b = (torch.as_tensor(np.asarray(v.detach() if torch.is_tensor(v) else v, dtype=np.float64)) for v in (a, b))
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=rtol))


def match(got, expected, mistakes, otherwise, atol=1e-5):
    """Pass when got equals expected; else fail with the hint of the first typical mistake whose output got equals
    (each computed here), or with `otherwise`."""
    if same(got, expected, atol):
        return
    for wrong, hint in mistakes:
        if same(got, wrong, atol):
            raise Fail(hint)
    raise Fail(otherwise)


# ----------------------------------------------------------------------------------------------------------------------
# Graders: one per exercise, each a few checks. m is the student's module, ref the repository's.

def with_weights(ref_module, theirs):
    """ref_module (a class of the repository's, already built) holding the student's module's weights and buffers."""
    missing, unexpected = ref_module.load_state_dict(theirs.state_dict(), strict=False)
    expect(not missing and not unexpected, f"your copy's {type(theirs).__name__} has other weights than the "
                                           f"repository's: missing {missing}, unexpected {unexpected}")
    return ref_module


def routed_block(m, ref, **kw):
    """A routed layer of a tiny X-MoD (layer 1 of D r), its attention sharpened so that positions matter, and the
    repository's RoutedBlock with the same weights: the oracle, whatever the copy's Block and Attention do."""
    shape = dict(model='xmod', n_layer=2, n_head=2, n_embd=16, block_size=16, vocab_size=32, stride=2,
                 capacity=0.25, **kw)
    block = m.GPT(m.GPTConfig(**shape)).transformer.h[1]
    with torch.no_grad():
        block.block.attn.c_attn.weight.mul_(20.0)     # at init attention is nearly uniform, and positions barely show
    return block, with_weights(ref.RoutedBlock(ref.GPTConfig(**shape), 1), block)


def gated_update(oracle, x, positions, w, renumber=False, update=lambda x, w, f: x + w * f):
    """What a routed block returns (computed here, one sequence at a time): x, with update(x_i, w_i, f_i) on each
    sequence's selected tokens, f the update of the repository's block (oracle) on those tokens alone at their
    original positions (or at 0..k-1 with renumber)."""
    out = x.clone()
    for b, pos in enumerate(positions):
        if len(pos):
            f = oracle.block.delta(x[b, pos][None], torch.arange(len(pos)) if renumber else pos)[0]   # (k_b, C)
            out[b, pos] = update(x[b, pos], w[b, pos, None], f)
    return out


def routed_mistakes(block, x, positions, w):
    return [(gated_update(block, x, positions, w, update=lambda x, w, f: x + w * (x + f)),
             'the residual is added twice: x + w*(x + f) adds the block output; add w * f (Block.delta) to x'),
            (gated_update(block, x, positions, w, renumber=True),
             'positions renumbered 0..k-1 after the gather: RoPE must rotate each token at its original position'),
            (gated_update(block, x, positions, w, update=lambda x, w, f: x + f),
             'the gate w is missing: x + w * f'),
            (gated_update(block, x, positions, w, update=lambda x, w, f: w * f),
             'the residual x is missing: a selected token becomes x + w * f')]


def grade_routed_k(m, ref, g):
    with g.check('round half up: 6.5 -> 7, 8.5 -> 9, 3.75 -> 4, 16 of 128 at c = 0.125'):
        cases = [(0.125, 128, 16), (0.5, 13, 7), (0.5, 17, 9), (0.25, 30, 8), (0.1, 32, 3), (0.125, 30, 4),
                 (1.0, 32, 32)]
        got = [m.routed_k(c, T) for c, T, _ in cases]
        like = lambda rule: got == [rule(c * T) for c, T, _ in cases]
        bad = [f'routed_k({c}, {T}) = {n}, expected {k}' for (c, T, k), n in zip(cases, got) if n != k]
        expect(not bad, f'{bad[0] if bad else ""}: ' + (
            'rounded down (int(c*T)); round half up: int(c*T + 0.5)' if like(int) else
            "Python's round() rounds half to even (6.5 -> 6); round half up: int(c*T + 0.5)" if like(round) else
            'rounded up (ceil); round half up: int(c*T + 0.5)' if like(math.ceil) else
            'k is capacity*T rounded half up'))
    with g.check('never 0: a routed layer takes at least one token'):
        for c, T in [(0.001, 128), (0.01, 32), (0.0625, 7)]:
            got = m.routed_k(c, T)
            expect(got == 1, f'routed_k({c}, {T}) = {got}: ' + ('capacity rounded down to 0: max(1, ...)'
                                                                  if got == 0 else 'expected 1'))
    with g.check('an int (a tensor size and a topk k)'):
        expect(type(m.routed_k(0.25, 32)) is int, f'routed_k returns {type(m.routed_k(0.25, 32)).__name__}, '
                                                   f'not int')


def topk_by_hand(scores, k):
    """Each row's k highest positions (ascending) and a cut between its k-th and (k+1)-th score, by sorting."""
    idx, cut = [], []
    for row in scores.tolist():
        order = sorted(range(len(row)), key=lambda i: -row[i])
        idx.append(sorted(order[:k]))
        cut.append((row[order[k - 1]] + row[order[k]]) / 2 if k < len(row) else None)
    return idx, cut


def grade_route_topk(m, ref, g):
    B, T, k = 4, 12, 3
    scores = torch.randperm(B * T, generator=torch.Generator().manual_seed(1)).view(B, T).float() / 7   # no ties
    scores[1] += 10.0                                  # one sequence scores high: a batch-wide top-k takes only it
    taken_hand, cut_hand = topk_by_hand(scores, k)
    mask_hand = torch.zeros(B, T, dtype=torch.bool)
    for b, pos in enumerate(taken_hand):
        mask_hand[b, pos] = True
    with g.check("mask: each sequence's own k highest scores"):
        taken, mask, cut = m.route_topk(scores, k)
        expect(torch.is_tensor(mask) and mask.dtype == torch.bool and mask.shape == (B, T),
               f'mask must be a (B, T) = ({B}, {T}) bool tensor, got {getattr(mask, "shape", type(mask))}')
        per_row = mask.sum(1).tolist()
        expect(per_row == [k] * B, f'rows keep {per_row} tokens: top-k taken over the whole batch, not per '
                                   f'sequence: each sequence keeps exactly k = {k}' if sum(per_row) == B * k else
               f'rows keep {per_row} tokens, expected k = {k} each')
        expect(torch.equal(mask, mask_hand), "mask differs from each row's k highest scores, found by sorting")
    with g.check('taken (B, k): the selected positions in ascending order'):
        taken = m.route_topk(scores, k)[0]
        expect(tuple(taken.shape) == (B, k), f'taken has shape {tuple(taken.shape)}, expected (B, k) = ({B}, {k})')
        expect(taken.tolist() == taken_hand, 'taken is in order of score: sort it by position (the routed tokens keep '
                                         'their order)' if taken.sort(1).values.tolist() == taken_hand else
               "taken differs from each row's k highest positions")
    with g.check("cut (B,): between each row's k-th and (k+1)-th score, mask == scores > cut, on the graph"):
        s = scores.clone().requires_grad_()
        _, mask, cut = m.route_topk(s, k)
        expect(tuple(cut.shape) == (B,), f'cut has shape {tuple(cut.shape)}, expected (B,)')
        expect(torch.equal(s.detach() > cut.detach()[:, None], mask), 'mask != scores > cut[:, None]')
        expect(same(cut, cut_hand), "cut is not the midpoint of each row's k-th and (k+1)-th highest score")
        expect(cut.requires_grad, 'cut is detached: keep it on the graph (the router BCE pushes the two tokens '
                                  'beside the cut apart through it)')
    with g.check('k = T keeps every token, k = 1 keeps the top one'):
        _, mask, cut = m.route_topk(scores, T)
        expect(bool(mask.all()) and bool((scores > cut[:, None]).all()), 'with k = T every token is selected')
        taken = m.route_topk(scores, 1)[0]
        expect(taken[:, 0].tolist() == scores.argmax(1).tolist(), 'with k = 1 taken is each row\'s argmax')


def grade_apply_rope(m, ref, g):
    B, nh, T, hs = 2, 3, 5, 8
    pos = torch.tensor([[0, 3, 4, 9, 15], [2, 5, 6, 7, 12]])              # original positions after a gather
    inv_freq = 10000.0 ** (-torch.arange(0, hs, 2).double() / hs)

    def tables(pos):
        angle = pos.double()[..., None] * inv_freq                          # (B, T, hs/2)
        return angle.cos().float(), angle.sin().float()

    def rotated(x, pos, sign=1.0, interleaved=False):
        """x rotated pair by pair, as complex numbers: (x1 + i x2) * exp(i * sign * angle)."""
        x = x.double()
        x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else x.chunk(2, dim=-1)
        angle = sign * pos.double()[..., None] * inv_freq
        z = torch.complex(x1, x2) * torch.polar(torch.ones_like(angle), angle)[:, None]   # broadcast over heads
        if interleaved:
            return torch.stack([z.real, z.imag], -1).flatten(-2)
        return torch.cat([z.real, z.imag], dim=-1)

    x = torch.randn(B, nh, T, hs)
    cos, sin = tables(pos)
    with g.check("each pair (x_j, x_j+hs/2) rotated by the angle at the token's own position"):
        match(m.apply_rope(x, cos, sin), rotated(x, pos), [
            (rotated(x, torch.arange(T).expand(B, T)), 'positions renumbered 0..T-1: rotate each token by the cos/sin '
                                                       'given, gathered at its original position'),
            (rotated(x, pos[:1].expand(B, T)), "every sequence rotated at the first one's positions: cos/sin are per "
                                               "batch element (B, T, hs/2)"),
            (rotated(x, pos, sign=-1.0), 'rotation by minus the angle: (x1 cos - x2 sin, x1 sin + x2 cos)'),
            (rotated(x, pos, interleaved=True), 'pairs taken interleaved (x0, x1), (x2, x3): the tables pair the '
                                                'two halves, (x_j, x_j+hs/2)')],
              'not the rotation of each pair (x1_j, x2_j) by the given angle: (x1 cos - x2 sin, x1 sin + x2 cos)')
    with g.check('a rotation keeps every vector\'s norm'):
        got = m.apply_rope(x, cos, sin)
        expect(same(got.norm(dim=-1), x.norm(dim=-1)), 'norms changed: not a rotation')
    with g.check('one (1, T, hs/2) table broadcasts over batch and heads (a dense layer)'):
        c1, s1 = tables(pos[:1])
        match(m.apply_rope(x, c1, s1), rotated(x, pos[:1].expand(B, T)), [
            (rotated(x, pos[:1].expand(B, T), interleaved=True), 'pairs taken interleaved, as in the first check: '
                                                                'this follows from it, the table broadcasts fine')],
              'with cos/sin of shape (1, T, hs/2) every sequence must be rotated at those positions')
    with g.check("q . k after RoPE depends only on the distance between the two tokens' positions"):
        q, k = torch.randn(hs), torch.randn(hs)
        pairs = torch.tensor([[3, 1], [10, 8], [7, 5], [15, 13]])           # (4, 2): the same distance, 2
        xq = torch.stack([q, k]).expand(4, 1, 2, hs)                        # (B=4, nh=1, T=2, hs)
        c, s = tables(pairs)
        out = m.apply_rope(xq, c, s)
        dots = (out[:, 0, 0] * out[:, 0, 1]).sum(-1)
        expect(same(dots, dots[:1].expand(4), atol=1e-4), f'q . k at the same distance differs with the '
               f'positions ({", ".join(f"{d:.4f}" for d in dots.tolist())}): rotate by the given angles')


def check_routed_block(g, oracle, forward, x, positions, w):
    """The checks that forward_naive and forward_fast share; forward(x, w) is the student's path on one selection,
    positions each sequence's selected positions, oracle the repository's block with the same weights."""
    mask = selection(positions, x.size(1))
    with torch.no_grad():
        expected = gated_update(oracle, x, positions, w)
    with g.check("selected tokens: x + w * f(x), f on the sequence's selected tokens at their original positions"):
        with torch.no_grad():
            out = forward(x, w)
            match(out[mask], expected[mask], [(wrong[mask], hint) for wrong, hint in
                                              routed_mistakes(oracle, x, positions, w)],
                  "selected tokens differ from x + w * f, f = block.delta on that sequence's selected tokens")
    with g.check('every other token passes bit for bit, x itself is not modified'):
        x0 = x.clone()
        with torch.no_grad():
            out = forward(x, w)
        expect(torch.equal(x, x0), 'x was modified in place: return a new tensor (x.clone(); scatter_add, not '
                                   'scatter_add_)')
        expect(torch.equal(out[~mask], x[~mask]), 'unselected tokens changed: they must pass exactly as x (add the '
                                                  'update onto the selected rows only)')
    with g.check('gradients reach x and the gate w'):
        probe = torch.linspace(-1, 1, x.numel()).view_as(x)          # d loss / d out, a fixed pattern
        grads = []
        for fn in (forward, lambda x, w: gated_update(oracle, x, positions, w)):
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            (fn(xg, wg) * probe).sum().backward()
            grads.append((xg.grad, wg.grad))
        (gx, gw), (ex, ew) = grads
        expect(gw is not None and bool(gw.abs().sum() > 0), 'no gradient reaches the gate w: it must stay on the '
                                                            'graph (the router learns through it)')
        # The gate's gradient is judged against the student's own forward, not the oracle's: out = x + w * f is
        # linear in w, so d out / d w_i = (out_i - x_i) / w_i. A wrong f (positions renumbered, say) fails the
        # first check, and only that one, instead of also reading as a gate that is off the graph.
        with torch.no_grad():
            out = forward(x, w)
        implied = ((out - x) * probe).sum(-1) / w * mask
        expect(same(gw, implied), "the gate's gradient is off: d out / d w_i = f_i on selected tokens, 0 elsewhere")
        if gx is None or not same(gx, ex):
            raise Fail("x's gradient is off" + (', as the values are (the first check): fix those first'
                                                if not same(out[mask], expected[mask]) else ''))


def selection(positions, T):
    """(B, T) bool mask of each sequence's selected positions."""
    mask = torch.zeros(len(positions), T, dtype=torch.bool)
    for b, pos in enumerate(positions):
        mask[b, pos] = True
    return mask


def grade_forward_naive(m, ref, g):
    block, oracle = routed_block(m, ref, impl='naive')
    B, T, C = 4, 16, 16
    x = torch.randn(B, T, C)
    positions = [torch.tensor([1, 4, 9, 13]), torch.tensor([], dtype=torch.long), torch.tensor([7]), torch.arange(T)]
    # scattered (not 0..k-1); none (causal routing can take none); one token; every token
    mask, w = selection(positions, T), torch.rand(B, T) + 0.5
    check_routed_block(g, oracle, lambda x, w: block.forward_naive(x, mask, w), x, positions, w)
    with g.check("a selected token sees only its sequence's selected tokens (attention among them)"):
        x2 = x.clone()
        x2[~mask] += torch.randn(int((~mask).sum()), C)
        with torch.no_grad():
            a, b = block.forward_naive(x, mask, w), block.forward_naive(x2, mask, w)
        expect(same(a[mask], b[mask], atol=1e-6), 'changing unselected tokens changed the selected ones: run the '
                                                  'block on the selected subsequence only')


def grade_forward_fast(m, ref, g):
    block, oracle = routed_block(m, ref)
    B, T, C, k = 3, 16, 16, 4
    x, w = torch.randn(B, T, C), torch.rand(B, T) + 0.5
    idx = torch.tensor([[1, 4, 9, 13], [0, 1, 2, 3], [5, 6, 14, 15]])        # (B, k) ascending, mostly not 0..k-1
    check_routed_block(g, oracle, lambda x, w: block.forward_fast(x, idx, w), x, idx, w)
    with g.check('the block runs once, batched, on (B, k, C): static shapes'):
        shapes = []
        hook = block.block.ln_1.register_forward_hook(lambda mod, args, out: shapes.append(tuple(args[0].shape)))
        try:
            with torch.no_grad():
                block.forward_fast(x, idx, w)
        finally:
            hook.remove()
        expect(shapes == [(B, k, C)], f'the block ran on {shapes}, expected once on (B, k, C) = {(B, k, C)}: gather '
                                      f'the k tokens of every sequence and run them together')


def router_of(m, gate, **kw):
    cfg = m.GPTConfig(model='xmod' if gate == 'variance' else 'mod', n_embd=16, n_head=2, gate=gate, **kw)
    router = m.Router(cfg)
    with torch.no_grad():
        router.weight.normal_(0.0, 0.02)                # GPT's init (the weight is created empty)
    return router


def grade_router_score(m, ref, g):
    B, T, C = 2, 8, 16
    x = torch.randn(B, T, C) * torch.linspace(0.2, 5.0, T)[:, None]       # tokens of very different scales
    router = router_of(m, 'variance')
    w = router.weight.detach()[0]
    xn = x / (x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps).sqrt()
    with g.check('variance gate: unit-norm weight . RMSNorm(x_i), shape (B, T)'):
        r = router(x)
        expect(tuple(r.shape) == (B, T), f'scores have shape {tuple(r.shape)}, expected (B, T) = {(B, T)}')
        match(r, xn @ (w / w.norm()), [
            (x @ w, 'raw scores x . w: the variance gate normalises the token (RMSNorm) and the weight (unit norm)'),
            (xn @ w, 'the router weight is not normalised: use w / w.norm() (one scale of scores at every depth)'),
            (x @ (w / w.norm()), 'the token is not normalised: RMSNorm(x_i) (F.rms_norm over the last dim)')],
              'scores differ from (w / |w|) . RMSNorm(x_i)')
    with g.check('variance gate: the same scores when a token or the weight is rescaled'):
        r = router(x)
        scaled = x * torch.rand(B, T, 1).add(0.5) * 4
        expect(same(router(scaled), r, atol=1e-4), "a token's score changes with its scale: normalise it (RMSNorm)")
        with torch.no_grad():
            router.weight.mul_(7.0)
        expect(same(router(x), r, atol=1e-4), "scores change with the weight's scale: use the unit-norm weight")
    with g.check("a token's score uses that token alone (no statistic across positions: causality)"):
        for gate in ('variance', 'plain'):
            rt = router_of(m, gate)
            x2 = x.clone()
            x2[:, 5:] = torch.randn(B, T - 5, C) * 9
            expect(same(rt(x)[:, :5], rt(x2)[:, :5], atol=1e-6),
                   f'{gate} gate: changing later tokens changed earlier scores: a normalisation across positions '
                   f'leaks the future into causal routing')
    with g.check('plain gate (MoD): the raw score w . x_i'):
        rt = router_of(m, 'plain')
        match(rt(x), x @ rt.weight.detach()[0], [], 'plain gate: the score is x_i . w, unnormalised')
    with g.check('gradient reaches the router weight'):
        for gate in ('variance', 'plain'):
            rt = router_of(m, gate)
            (rt(x) * torch.randn(B, T)).sum().backward()
            expect(rt.weight.grad is not None and bool(rt.weight.grad.abs().sum() > 0),
                   f'{gate} gate: no gradient reaches router.weight')


def grade_router_gate(m, ref, g):
    r = torch.linspace(-4, 4, 9).view(1, 9) + torch.tensor([[1.5]])
    with g.check('variance gate: the learnable gain times sigmoid(r)'):
        router = router_of(m, 'variance')
        with torch.no_grad():
            router.gain.fill_(0.7)
        match(router.gate(r), 0.7 * torch.sigmoid(r), [
            (torch.sigmoid(r), 'the learnable gain g_l is missing: g_l * sigmoid(r)'),
            (0.7 * (r > 0).float(), 'a hard 0/1 choice has no gradient: g_l * sigmoid(r)'),
            (r, 'the raw score is the plain (MoD) gate: the variance gate is g_l * sigmoid(r)')],
              'gate(r) differs from gain * sigmoid(r)')
    with g.check('plain gate (MoD): the raw score r'):
        match(router_of(m, 'plain').gate(r), r, [(torch.sigmoid(r), 'plain gate: the raw score r, no sigmoid')],
              'plain gate: gate(r) = r')
    with g.check('gradients reach r and the gain'):
        router = router_of(m, 'variance')
        rg = r.clone().requires_grad_()
        router.gate(rg).sum().backward()
        s = torch.sigmoid(r)
        expect(rg.grad is not None and same(rg.grad, router.gain.detach() * s * (1 - s)),
               'd gate / d r is not gain * sigmoid(r) * (1 - sigmoid(r)): keep r on the graph')
        expect(router.gain.grad is not None and same(router.gain.grad, s.sum()), 'no gradient reaches the gain')


def grade_update_threshold(m, ref, g):
    B, T, k, mom = 4, 16, 2, 0.9
    batches = [torch.randn(B, T, generator=torch.Generator().manual_seed(s)) + 1.5 for s in range(3)]  # not centred

    def batch_cut(r, n):
        top = sorted(r.flatten().tolist(), reverse=True)
        return (top[n - 1] + top[n]) / 2

    # the threshold read by the repository's Router.threshold from the buffers that update_threshold writes: the
    # copy's threshold() is not this exercise (check --all's whole-model checks test it)
    threshold = lambda router: float(ref.Router.threshold(router))
    with g.check("one update: the threshold is the batch's cut (B*k of its B*T scores above it)"):
        router = router_of(m, 'variance', router_momentum=mom)
        router.update_threshold(batches[0], k)
        got, cut = threshold(router), batch_cut(batches[0], B * k)
        per_seq = float(np.mean([batch_cut(row, k) for row in batches[0]]))
        match(got, cut, [
            (0.0, 'a fixed threshold at r = 0 (sigmoid(r) > 0.5) keeps far fewer than c of the tokens when scores are '
                  'not centred: track the cut of the batch'),
            (per_seq, "each sequence's cut averaged: take the cut of the whole batch's B*k highest (r flattened)"),
            (batch_cut(batches[0], k), 'the k highest of the whole batch: the batch holds B*k selected tokens')],
              f'threshold {got:.4f}, expected {cut:.4f}: the cut between the batch\'s (B*k)-th and (B*k+1)-th scores'
              + (' (is thr_steps counted? threshold() divides by 1 - momentum**thr_steps)'
                 if float(router.thr_steps) != 1 else ''))
        rate = int((batches[0] > threshold(router)).sum())
        expect(rate == B * k, f'{rate} of the batch\'s scores pass the threshold, expected B*k = {B * k}')
    with g.check('an EMA with momentum over updates, debiased'):
        router = router_of(m, 'variance', router_momentum=mom)
        ema, cuts = 0.0, []
        for r in batches:
            router.update_threshold(r, k)
            cuts.append(batch_cut(r, B * k))
            ema = mom * ema + (1 - mom) * cuts[-1]
        expected = ema / (1 - mom ** 3)
        wrong = 0.0
        for c in cuts:
            wrong = (1 - mom) * wrong + mom * c
        match(threshold(router), expected, [
            (cuts[-1], 'the last batch\'s cut only: keep a running EMA, thr_sum <- m * thr_sum + (1 - m) * cut'),
            (wrong / (1 - mom ** 3), 'momentum the wrong way round: thr_sum <- m * thr_sum + (1 - m) * cut')],
              f'threshold after 3 updates {threshold(router):.4f}, expected the debiased EMA {expected:.4f}')
        expect(float(router.thr_steps) == 3, f'thr_steps = {float(router.thr_steps)} after 3 updates')


def grade_depth_balance_loss(m, ref, g):
    R, B, T, c = 3, 2, 5, 0.25
    p = torch.rand(R, B, T, generator=torch.Generator().manual_seed(3))
    target = c * R
    by_hand = sum((sum(float(p[l, b, t]) for l in range(R)) - target) ** 2
                  for b in range(B) for t in range(T)) / (B * T) / R
    with g.check("the mean over tokens of (depth - c*R)^2 / R, depth = a token's p summed over layers"):
        match(m.depth_balance_loss(p, target), by_hand, [
            (by_hand * R, 'not divided by R: normalise by the number of routed layers so the coefficient does not '
                          'scale with depth'),
            (((p - c) ** 2).mean() / R, "each layer balanced on its own: balance each token's depth, p summed over "
                                        "the layers"),
            (((torch.sigmoid(p).sum(0) - target) ** 2).mean() / R,
             'p squashed by a sigmoid: p is already each layer\'s soft choice sigmoid(r - cut), centred on its cut; '
             'balancing a sigmoid of it (or of r) does not act on the realised selection'),
            (((p.mean(0) - target) ** 2).mean() / R, 'depth is the sum of p over layers (compared with c*R), not '
                                                     'the mean'),
            ((p.sum(0) - target).abs().mean() / R, 'the squared deviation, not its absolute value')],
              f'got {float(m.depth_balance_loss(p, target)):.6f}, expected {by_hand:.6f}')
    with g.check('zero when every token is taken by exactly c*R routed layers'):
        taken = torch.zeros(4, B, T)
        for b in range(B):
            for t in range(T):
                taken[(b + t) % 4, b, t] = 1.0          # each token by one of 4 layers: depth 1 = 0.25 * 4
        loss = float(m.depth_balance_loss(taken, 1.0))
        expect(abs(loss) < 1e-9, f'loss {loss:.4g} on selections of exactly c*R layers each: ' + (
            "p is already each layer's soft choice centred on its top-k cut: don't apply a sigmoid to it"
            if abs(loss - float(((torch.sigmoid(taken).sum(0) - 1.0) ** 2).mean() / 4)) < 1e-6 else
            'it must vanish when every depth is on target'))
    with g.check('gradient: 2 (depth - c*R) / (R * B * T) on every layer\'s p'):
        pg = p.clone().requires_grad_()
        m.depth_balance_loss(pg, target).backward()
        expected = (2 * (p.sum(0) - target) / (R * B * T)).expand(R, B, T)
        expect(pg.grad is not None and bool(pg.grad.abs().sum() > 0), 'no gradient reaches p: keep p on the graph')
        # a loss with a wrong scale or form has a gradient off by the same mistake: name it, not the graph
        match(pg.grad, expected, [
            (expected * R, 'R times the expected: it follows from the loss not divided by R (the first check)')],
              'the gradient to p is off: build the loss from p with torch ops, as above', atol=1e-7)


def moe_of(m):
    cfg = m.GPTConfig(model='moe', n_layer=1, n_head=2, n_embd=8, block_size=16, vocab_size=32, n_expert=4,
                      expert_top_k=2, expert_hidden=6)
    moe = m.MoE(cfg)
    with torch.no_grad():
        moe.w_fc.normal_(0.0, 0.5)                    # created empty: GPT's init would do this
        moe.w_proj.normal_(0.0, 0.5)
    return moe


def moe_by_hand(moe, xf, tope, weights, cap, order='choice'):
    """y and the number of kept assignments, one assignment at a time in priority order: 'choice' (first choices,
    then second, each by token: the rule), 'token' (token by token) or 'late' (later tokens first)."""
    N, K = tope.shape
    if order == 'token':
        queue = [(t, c) for t in range(N) for c in range(K)]
    else:
        queue = [(t, c) for c in range(K) for t in (range(N) if order == 'choice' else reversed(range(N)))]
    y, used, kept = torch.zeros_like(xf), [0] * moe.E, 0
    for t, c in queue:
        e = int(tope[t, c])
        if used[e] < cap:
            used[e], kept = used[e] + 1, kept + 1
            y[t] = y[t] + weights[t, c] * (F.gelu(xf[t] @ moe.w_fc[e]) @ moe.w_proj[e])
    return y, kept


def grade_moe_forward_fast(m, ref, g):
    moe = moe_of(m)
    N, C = 12, 8
    xf = torch.randn(N, C)
    # expert 0 is the first choice of tokens 0-7, expert 1 of tokens 8-11 and the second choice of tokens 0-3:
    # at capacity 3 the priority order decides who is dropped
    tope = torch.tensor([[0, 1]] * 4 + [[0, 2], [0, 3], [0, 2], [0, 3]] + [[1, 2], [1, 3], [1, 0], [1, 2]])
    weights = torch.rand(N, 2)
    weights = weights / weights.sum(1, keepdim=True)

    def run(cap):
        y, kept = moe.forward_fast(xf, tope, weights, cap)
        return y, int(kept)

    with g.check('room for all (cap = N): y = the weighted sum of each token\'s chosen experts'):
        with torch.no_grad():
            y, kept = run(N)
            match(y, moe_by_hand(moe, xf, tope, weights, N)[0], [],
                  "y differs from sum over a token's chosen experts of weight * w_proj(gelu(w_fc x))")
        expect(kept == 2 * N, f'kept = {kept}, expected all {2 * N} assignments')
    with g.check('over capacity: each expert keeps its first cap assignments (first choices first, then by token)'):
        with torch.no_grad():
            y, kept = run(3)
            ref, ref_kept = moe_by_hand(moe, xf, tope, weights, 3)
            match(y, ref, [(moe_by_hand(moe, xf, tope, weights, N)[0], 'capacity ignored: an expert takes at most '
                                                                       'cap tokens, the rest are dropped'),
                           (moe_by_hand(moe, xf, tope, weights, 3, 'token')[0], 'priority order: every first choice '
                                                                               'before any second choice'),
                           (moe_by_hand(moe, xf, tope, weights, 3, 'late')[0], 'priority order: earlier tokens first '
                                                                              '(a stable sort keeps that order)')],
                  'y differs from the dispatch in priority order with cap = 3 slots per expert')
        expect(kept == ref_kept, f'kept = {kept}, expected {ref_kept} of {2 * N} assignments at cap = 3' +
               (' (capacity ignored: nothing dropped)' if kept == 2 * N else ''))
    with g.check('gradients: to the experts, and to the weights of kept assignments only'):
        grads = []
        for fn in (lambda w: moe.forward_fast(xf, tope, w, 3)[0], lambda w: moe_by_hand(moe, xf, tope, w, 3)[0]):
            moe.zero_grad()
            wg = weights.clone().requires_grad_()
            (fn(wg) * torch.linspace(-1, 1, N * C).view(N, C)).sum().backward()
            grads.append((wg.grad, moe.w_fc.grad.clone() if moe.w_fc.grad is not None else None))
        (gw, gfc), (ew, efc) = grads
        expect(gw is not None and same(gw, ew), 'the routing weights\' gradient is off (a dropped assignment gets '
                                                'none: it contributes nothing)')
        expect(gfc is not None and same(gfc, efc), "the experts' gradient (w_fc) is off")


_counted = {}


def counted_flops(ref, cfg, T, B=2):
    """Forward FLOPs per token of the repository's GPT of config cfg (any module's GPTConfig), measured by torch's
    FlopCounterMode (math attention, as tests/test_xmod.py). Remembered: the repository's model does not change
    between checks, and the counter is the slowest part of check --all."""
    key = (tuple(sorted(asdict(cfg).items())), T, B)
    if key not in _counted:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.utils.flop_counter import FlopCounterMode
        model = ref.GPT(ref.GPTConfig(**asdict(cfg)))
        idx = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(idx, idx)
        _counted[key] = counter.get_total_flops() / (B * T)
    return _counted[key]


def grade_flops_per_token(m, ref, g):
    base = m.GPTConfig(n_layer=6, n_head=4, n_embd=64, block_size=64, vocab_size=48, stride=3, capacity=0.125)
    tips = {'dense': 'a dense layer is 24d^2 + 4Td (QKV, projection, MLP, QK^T and AV) and the LM head 2dV',
            'routed': 'a routed layer runs k of T tokens: (k/T) 24d^2 + 4k^2 d/T, plus 2d for its router',
            'moe': "an MoE layer: attention 8d^2 + 4Td, router 2dE, and E * expert_slots / N slots per token of "
                   "4 d expert_hidden (the capacity's padding included)"}
    for model, T in [('dense', 64), ('xmod', 64), ('xmod', 32), ('mod', 64), ('moe', 64)]:
        cfg = replace(base, model=model, stride=2 if model == 'mod' else base.stride, gate=None, depth_balance=None)
        with g.check(f'{model} at T={T}: within 2% of torch\'s FlopCounterMode'):
            measured, got = counted_flops(ref, cfg, T), m.flops_per_token(cfg, T, batch_size=2)
            if abs(got / measured - 1) < 0.02:
                continue
            if model in ('mod', 'xmod'):
                as_dense = counted_flops(ref, replace(cfg, model='dense'), T)
                expect(abs(got / as_dense - 1) >= 0.02, f'{got:.4g} FLOPs/token is what the model costs with every '
                       f'layer dense: routed layers counted as dense. {tips["routed"]}')
            kind = 'moe' if model == 'moe' else 'routed' if model != 'dense' else 'dense'
            raise Fail(f'{got:.4g} FLOPs/token, the counter measures {measured:.4g} ({got / measured - 1:+.1%}): '
                       f'{tips[kind]}')
    with g.check('T=None means config.block_size'):
        cfg = replace(base, model='xmod')
        expect(m.flops_per_token(cfg) == m.flops_per_token(cfg, cfg.block_size), 'flops_per_token(cfg) differs from '
                                                                                  'flops_per_token(cfg, block_size)')


def feasible(ref, dense, model, stride, tol=0.02):
    """The documented search, by hand, in the repository's accounting (ref): for every depth, the k whose FLOPs are
    closest to the dense model's; the (n_layer, k) pairs that land within tol, shallowest first."""
    flops = lambda cfg: ref.flops_per_token(ref.GPTConfig(**asdict(cfg)))
    target, T, out = flops(dense), dense.block_size, []
    for L in range(1, 8 * dense.n_layer + 1):
        cfg = replace(dense, model=model, stride=stride, n_layer=L, gate=None, depth_balance=None)
        if 'routed' in ref.layer_kinds(ref.GPTConfig(**asdict(cfg))):
            k = min(range(1, T + 1), key=lambda k: abs(flops(replace(cfg, capacity=k / T)) - target))
            if abs(flops(replace(cfg, capacity=k / T)) / target - 1) <= tol:
                out.append((L, k))
    return out


def grade_match_flops(m, ref, g):
    dense = m.GPTConfig()                                 # train.py's defaults: 4 layers, width 128, T 128
    flops = lambda cfg: ref.flops_per_token(ref.GPTConfig(**asdict(cfg)))    # the repository's count, any config
    target = flops(dense)
    # (model, stride, n_layer, k of 128): docs/usage.md's model zoo, and stride 8
    for model, stride, n_layer, k in [('xmod', 4, 12, 16), ('mod', 2, 6, 47), ('xmod', 2, 6, 47), ('xmod', 8, 16, 21)]:
        with g.check(f"{model}{f' stride {stride}' if model == 'xmod' else ''}: {n_layer} layers, k = {k} of 128 "
                     f"(within 2%, the capacity closest to c = 0.125 in ratio)"):
            cfg = m.match_flops(dense, model, stride=stride)
            off = flops(cfg) / target - 1
            expect(cfg.model == model and cfg.stride == stride, f'returned model={cfg.model!r}, stride={cfg.stride}')
            expect(abs(off) <= 0.02, f'{cfg.n_layer} layers at capacity {cfg.capacity:.4f} are {off:+.1%} off the '
                                     f'dense FLOPs (tolerance 2%)')
            got_k = cfg.capacity * 128
            expect(float(got_k).is_integer(), f'capacity {cfg.capacity} is not k/T for an integer k')
            if (cfg.n_layer, got_k) != (n_layer, k):
                found = feasible(ref, dense, model, stride)
                raise Fail(f'got {cfg.n_layer} layers at k = {got_k:g}: ' + (
                    'the first depth within tolerance; try every depth and keep the capacity closest to the target in '
                    'ratio' if found and cfg.n_layer == found[0][0] else
                    'keep the capacity closest to the target in ratio, |log(c/0.125)|' if (cfg.n_layer, got_k) in found
                    else "for each depth solve the k whose FLOPs are closest to the dense model's"))
            expect((cfg.gate, cfg.depth_balance) == (replace(cfg, gate=None, depth_balance=None).gate,
                                                     replace(cfg, gate=None, depth_balance=None).depth_balance),
                   f"gate={cfg.gate!r}, depth_balance={cfg.depth_balance}: the dense config's are MoD's ('plain', 0); "
                   f"reset them to None so that {model} gets its family defaults")
    with g.check('n_layer=9 given: kept, and k = 24 of 128 solved for it'):
        cfg = m.match_flops(dense, 'xmod', stride=4, n_layer=9)
        expect((cfg.n_layer, cfg.capacity * 128) == (9, 24), f'got {cfg.n_layer} layers at k = {cfg.capacity * 128:g} '
               f'({flops(cfg) / target - 1:+.1%} FLOPs): keep n_layer, solve the k closest in FLOPs')
    with g.check('stride 1 is the dense model itself'):
        cfg = m.match_flops(dense, 'xmod', stride=1)
        ours = ref.GPTConfig(**asdict(cfg))
        expect(ref.layer_kinds(ours) == ['dense'] * 4 and flops(cfg) == target,
               f'stride 1 gave layout {ref.layout_string(ours)}: every layer an anchor, the dense depth')
    with g.check('ValueError when nothing lands within tol, for a non-dense base, for model=moe'):
        for args, kw in [((dense, 'xmod'), dict(stride=2, n_layer=10)), ((dense, 'moe'), {}),
                         ((replace(dense, model='xmod'), 'xmod'), {})]:
            try:
                cfg = m.match_flops(*args, **kw)
            except ValueError:
                continue
            raise Fail(f'match_flops({args[0].model} config, {args[1]!r}, {kw}) returned {cfg.n_layer} layers at '
                       f'c={cfg.capacity:.4f} instead of raising ValueError: never return a config outside tol')


def law_points():
    N, D = (a.ravel() for a in np.meshgrid(np.geomspace(1e5, 1e8, 4), np.geomspace(1e6, 1e9, 4)))
    return np.log(N), np.log(D)


def log_law(theta, logN, logD):
    """log L by hand, one run at a time, with math (exact where nothing overflows)."""
    a, alpha, b, beta, e = theta
    return np.array([math.log(math.exp(a - alpha * n) + math.exp(b - beta * d) + math.exp(e))
                     for n, d in zip(logN, logD)])


def grade_dense_log_pred_torch(m, ref, g):
    logN, logD = law_points()
    theta = np.array([6.0, 0.34, 6.0, 0.28, 0.5])
    t = lambda v: torch.tensor(v, dtype=torch.float64)
    with g.check('log L = LSE(a - alpha log N, b - beta log D, e), by hand'):
        got = m.dense_log_pred_torch(t(theta), t(logN), t(logD))
        expected = log_law(theta, logN, logD)
        match(got, expected, [(np.exp(expected), 'returns L: the law is fitted in log space, return log L'),
                              (log_law([*theta[:4], -50.0], logN, logD), 'E (the e term) is missing from the sum')],
              'not log(exp(a - alpha log N) + exp(b - beta log D) + exp(e))', atol=1e-9)
    with g.check('no overflow where exp(a) alone would (a = 750)'):
        big = np.array([750.0, 0.34, 6.0, 0.28, 0.5])
        got = m.dense_log_pred_torch(t(big), t(logN), t(logD))
        expected = 750.0 - 0.34 * logN + np.log1p(np.exp(6.0 - 0.28 * logD - 750.0 + 0.34 * logN)
                                                  + np.exp(0.5 - 750.0 + 0.34 * logN))
        expect(torch.isfinite(torch.as_tensor(got)).all(), 'exp overflowed (inf): use torch.logsumexp over the three '
                                                          'terms stacked, not log(exp + exp + exp)')
        expect(same(got, expected, atol=1e-9), 'wrong value at a = 750')
    with g.check('gradients w.r.t. theta: each term\'s softmax weight (L-BFGS needs them)'):
        th = t(theta).requires_grad_()
        m.dense_log_pred_torch(th, t(logN), t(logD)).sum().backward()
        terms = np.stack([theta[0] - theta[1] * logN, theta[2] - theta[3] * logD, np.full_like(logN, theta[4])])
        p = np.exp(terms - terms.max(0)) / np.exp(terms - terms.max(0)).sum(0)     # (3, n) softmax over the terms
        expected = [p[0].sum(), -(p[0] * logN).sum(), p[1].sum(), -(p[1] * logD).sum(), p[2].sum()]
        expect(th.grad is not None and same(th.grad, expected, atol=1e-9),
               'gradient w.r.t. (a, alpha, b, beta, e) is off: compute on theta in torch (no numpy, no .item())')


def huber_by_hand(r, delta):
    r = np.abs(r)
    return np.where(r < delta, 0.5 * r ** 2, delta * (r - 0.5 * delta))


def grade_dense_objective(m, ref, g):
    logN, logD = law_points()
    theta = np.array([6.0, 0.34, 6.0, 0.28, 0.5])
    pred = log_law(theta, logN, logD)
    resid = np.array([0.0002, -0.0004, 0.003, -0.02, 0.0009, 0.05, -0.0001, 0.0015] * 2)   # each side of delta
    logL = pred - resid
    w = np.array([1, 2, 0, 1, 3, 1, 1, 0, 1, 1, 2, 1, 1, 1, 0, 1], dtype=np.float64)
    delta = ref.HUBER_DELTA
    t = lambda v: torch.tensor(v, dtype=torch.float64)
    with g.check('sum over runs of w * Huber(log L_pred - log L), delta = HUBER_DELTA, by hand'):
        got = m.dense_objective(t(theta), t(logN), t(logD), t(logL), t(w))
        L_resid = np.exp(pred) - np.exp(logL)
        match(got, (w * huber_by_hand(resid, delta)).sum(), [
            ((w * 0.5 * resid ** 2).sum(), f'a squared loss (or Huber with delta 1.0, torch\'s default): Huber with '
                                           f'delta = HUBER_DELTA = {delta} is linear beyond delta, robust to outliers'),
            ((w * huber_by_hand(L_resid, delta)).sum(), 'fitting L instead of log L: the residual is '
                                                        'log L_pred - log L'),
            ((w * huber_by_hand(resid, delta)).mean(), 'a mean over runs: the objective is the sum (OBJ_SCALE and '
                                                       "L-BFGS's tolerances assume it)"),
            (huber_by_hand(resid, delta).sum(), 'the weights w are ignored (a bootstrap resample is integer weights)'),
            (huber_by_hand(w * resid, delta).sum(), 'w inside the Huber: weight each run\'s loss, w * huber(r)')],
              f'got {float(got):.6g}, expected {(w * huber_by_hand(resid, delta)).sum():.6g}', atol=1e-12)
    with g.check('gradients reach theta'):
        th = t(theta).requires_grad_()
        m.dense_objective(th, t(logN), t(logD), t(logL), t(w)).backward()
        oracle = t(theta).requires_grad_()
        r = ref.dense_log_pred_torch(oracle, t(logN), t(logD)) - t(logL)
        (t(w) * torch.where(r.abs() < delta, 0.5 * r ** 2, delta * (r.abs() - 0.5 * delta))).sum().backward()
        expect(th.grad is not None and same(th.grad, oracle.grad, atol=1e-12, rtol=1e-6),
               'the gradient w.r.t. theta is off: build the objective from theta with torch ops')
    with g.check('L-BFGS with it recovers a known law from one start (fit_law.lbfgs_fit)'):
        true = np.array([np.log(400.0), 0.34, np.log(410.0), 0.28, np.log(1.7)])
        fitted, _ = m.lbfgs_fit([5.0, 0.5, 5.0, 0.5, 0.5], logN, logD, log_law(true, logN, logD))
        expect(np.allclose(fitted[[1, 3]], true[[1, 3]], atol=0.01) and abs(np.exp(fitted[4]) / 1.7 - 1) < 0.01,
               f'fitted alpha {fitted[1]:.3f}, beta {fitted[3]:.3f}, E {np.exp(fitted[4]):.3f}; true 0.34, 0.28, 1.7')


def grade_wls(m, ref, g):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    coef = np.array([0.02, -0.015, 0.008])
    y = X @ coef + 0.004 * rng.normal(size=10) + 0.01                 # noise and an offset the law does not have
    w = rng.integers(0, 4, size=10).astype(np.float64)
    with g.check('noiseless: the coefficients come back exactly'):
        got = m.wls(X, X @ coef)
        expect(np.shape(got) == (3,), f'returned shape {np.shape(got)}, expected one coefficient per column (3,)' +
               (': an intercept? the law has no constant term (Delta must vanish at rho = 1)'
                if np.shape(got) == (4,) else ''))
        expect(same(got, coef, atol=1e-10), 'least squares on noiseless data must return the true coefficients')
    with g.check('no intercept: Delta = X coef vanishes at rho = 1'):
        ones = np.column_stack([np.ones(10), X])
        match(m.wls(X, y), np.linalg.lstsq(X, y, rcond=None)[0], [
            (np.linalg.lstsq(ones, y, rcond=None)[0][1:], 'an intercept was fitted: the law has none (Delta must '
                                                           'vanish at rho = 1, where every column is 0)')],
              'differs from the least-squares solution of X coef = y', atol=1e-10)
    with g.check('weights: an integer weight counts as that many copies of the pair (the bootstrap)'):
        rows = np.repeat(np.arange(10), w.astype(int))
        expected = np.linalg.lstsq(X[rows], y[rows], rcond=None)[0]
        match(m.wls(X, y, w), expected, [
            (np.linalg.lstsq(X, y, rcond=None)[0], 'the weights are ignored'),
            (np.linalg.lstsq(X * w[:, None], y * w, rcond=None)[0], 'rows scaled by w: scale by sqrt(w), so that '
                                                                    'each squared residual weighs w')],
              'weighted least squares: minimise sum w_i (x_i . coef - y_i)^2', atol=1e-10)



GRADERS = {
    'routed_k': grade_routed_k,
    'route_topk': grade_route_topk,
    'apply_rope': grade_apply_rope,
    'forward_naive': grade_forward_naive,
    'forward_fast': grade_forward_fast,
    'router_score': grade_router_score,
    'router_gate': grade_router_gate,
    'update_threshold': grade_update_threshold,
    'depth_balance_loss': grade_depth_balance_loss,
    'moe_forward_fast': grade_moe_forward_fast,
    'flops_per_token': grade_flops_per_token,
    'match_flops': grade_match_flops,
    'dense_log_pred_torch': grade_dense_log_pred_torch,
    'dense_objective': grade_dense_objective,
    'wls': grade_wls,
}


# ----------------------------------------------------------------------------------------------------------------------
# Whole-model checks (the end of check --all): the copy's GPT of every family against the repository's, with the
# same weights. They see what the exercises cannot: a bug in a function that no exercise blanks (Attention, Block,
# RoutedBlock.forward, expert_slots, Router.threshold, generation, ...). Each check is check(m, ref) and raises
# Fail naming the family and where the two models part; exercises.py then names the copy's function that does it.

FAMILIES = [('dense', 'fast'), ('mod', 'fast'), ('mod', 'naive'), ('xmod', 'fast'), ('xmod', 'naive'),
            ('moe', 'fast'), ('moe', 'naive')]


def twin_shape(model, impl):
    """Tiny, but every path runs: mod DrDr, xmod DrrrD (routed layers take 4 of 16 tokens), the MoE's 3 experts
    with 2 choices each overflow their capacity."""
    return dict(model=model, impl=impl, n_layer={'dense': 2, 'mod': 4, 'xmod': 5, 'moe': 2}[model], n_head=2,
                n_embd=16, block_size=16, vocab_size=32, stride=2 if model == 'mod' else 4, capacity=0.25, n_expert=3,
                expert_top_k=2)


def tokens(seed, B=3, T=16):
    return torch.randint(0, 32, (B, T), generator=torch.Generator().manual_seed(seed))


_twin_states = {}


def twins(m, ref, model, impl):
    """The copy's GPT and the repository's with the same weights: drawn larger than GPT's init (std 0.3), so that
    attention is sharp and every layer's update shows in the logits, and the causal thresholds calibrated by three
    steps of the repository's code (thr_steps = 3, where the EMA's debiasing matters). The weights are made once per
    family (every check and every copy gets the same)."""
    kw = twin_shape(model, impl)
    torch.manual_seed(0)
    ours = ref.GPT(ref.GPTConfig(**kw))
    if (model, impl) not in _twin_states:
        with torch.no_grad():
            for p in ours.parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, 0.3)
            for s in range(3):
                _, _, aux = ours(tokens(100 + s), routing='topk', return_aux=True)
                ours.calibrate([aux['layers']])
        _twin_states[model, impl] = {k: v.clone() for k, v in ours.state_dict().items()}
    ours.load_state_dict(_twin_states[model, impl])
    theirs = m.GPT(m.GPTConfig(**kw))
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    expect(not missing and not unexpected, f"your copy's GPT has other weights than the repository's: missing "
                                           f"{missing}, unexpected {unexpected}")
    return theirs, ours


def each_family(m, ref, problem):
    """problem(m, ref, theirs, ours) -> None or what differs, for every family; fails on the first that differs."""
    for model, impl in FAMILIES:
        theirs, ours = twins(m, ref, model, impl)
        found = problem(m, ref, theirs, ours)
        if found:
            raise Fail(f'{model} ({impl}): {found}')


def layer_outputs(model, idx, routing):
    """Each layer's output x (the residual stream after it) in one forward."""
    outs = []
    hooks = [layer.register_forward_hook(lambda mod, args, out: outs.append(out[0].detach()))
             for layer in model.transformer.h]
    try:
        with torch.no_grad():
            model(idx, idx, routing=routing)
    finally:
        for h in hooks:
            h.remove()
    return outs


def first_layer(theirs_outs, ours_outs, kinds, upto=None):
    """'from layer l (kind) on': the first layer whose outputs differ (at positions < upto only, when given)."""
    for l, (a, b) in enumerate(zip(theirs_outs, ours_outs)):
        if not same(a[:, :upto], b[:, :upto]):
            return f'from layer {l} ({kinds[l]}) on'
    return 'after the last layer (ln_f, lm_head)'


def forward_problem(routing):
    def problem(m, ref, theirs, ours):
        idx = tokens(0)
        with torch.no_grad():
            (lt, Lt), (lo, Lo) = theirs(idx, idx, routing=routing), ours(idx, idx, routing=routing)
        if not same(lt, lo):
            where = first_layer(layer_outputs(theirs, idx, routing), layer_outputs(ours, idx, routing),
                                ref.layer_kinds(ours.config))
            return f'the logits differ {where}'
        if not same(Lt, Lo):
            return (f"the loss differs ({float(Lt):.5f}, the repository's {float(Lo):.5f}) with the same logits: the "
                    f"auxiliary losses")
    return problem


def gradient_problem(m, ref, theirs, ours):
    idx = tokens(0)
    theirs(idx, idx)[1].backward()
    ours(idx, idx)[1].backward()
    grads = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        mine, expected = p.grad, grads[name].grad
        if (mine is None) != (expected is None) or (mine is not None and not same(mine, expected)):
            upstream = forward_problem('topk')(m, ref, *twins(m, ref, theirs.config.model, theirs.config.impl))
            return f'the gradient of {name} differs' + (f' (it follows from the forward: {upstream})'
                                                         if upstream else '')


def causality_problem(m, ref, theirs, ours):
    """Causal routing: changing tokens 9.. must leave the logits at positions 0..8 as they were."""
    idx = tokens(0)
    later = idx.clone()
    later[:, 9:] = (later[:, 9:] + 1) % 32
    with torch.no_grad():
        a, b = theirs(idx, idx, routing='causal')[0], theirs(later, later, routing='causal')[0]
    if not same(a[:, :9], b[:, :9], atol=1e-6):
        where = first_layer(layer_outputs(theirs, idx, 'causal'), layer_outputs(theirs, later, 'causal'),
                            ref.layer_kinds(ours.config), upto=9)
        return f"changing tokens 9.. changed the logits at positions 0..8 in causal routing, {where}"


def flops_problem(m, ref, theirs, ours):
    for T in (16, 8):
        got, expected = m.flops_per_token(theirs.config, T), ref.flops_per_token(ours.config, T)
        if abs(got / expected - 1) > 1e-9:
            return f"flops_per_token at T={T} gives {got:.6g}, the repository's {expected:.6g}"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    idx = tokens(0, B=2)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        theirs(idx, idx)
    ran, counted = counter.get_total_flops() / idx.numel(), counted_flops(ref, ours.config, 16)
    if abs(ran / counted - 1) > 0.01:
        return (f"your model runs {ran:.6g} FLOPs per token (torch's FlopCounterMode), the repository's "
                f"{counted:.6g}")


@torch.no_grad()
def decoded(module, model, idx, prompt=6):
    """Logits (B, T - prompt + 1, V): GPT.forward with a KVCache, the prompt in one pass, then one token at a time."""
    cache = module.KVCache(model, idx.size(0))
    out = [model(idx[:, :prompt], routing='causal', cache=cache)[0]]
    for t in range(prompt, idx.size(1)):
        out.append(model(idx[:, t:t + 1], routing='causal', cache=cache)[0])
    return torch.cat(out, 1)


def generation_problem(m, ref, theirs, ours):
    theirs.eval()
    ours.eval()
    for B in (3, 1):                               # batch 1: RoutedBlock.forward_step's branch without index ops
        idx = tokens(0, B=B)
        if not same(decoded(m, theirs, idx), decoded(ref, ours, idx)):
            return f'the cached logits (the prompt, then one token at a time) differ at batch {B}'
        with torch.random.fork_rng(devices=[]):
            got = theirs.generate(idx[:, :6], 8, top_k=1)                 # greedy: no sampling noise
            expected = ours.generate(idx[:, :6], 8, top_k=1)
        if not torch.equal(got, expected):
            return f'GPT.generate (greedy, batch {B}) gives other tokens: {got[0, 6:].tolist()}, the repository\'s ' \
                   f'{expected[0, 6:].tolist()}'


def calibration_problem(m, ref, theirs, ours):
    """One more calibration step of each model, from the same scores (the repository's forward)."""
    _, _, aux = ours(tokens(7), routing='topk', return_aux=True)
    theirs.calibrate([aux['layers']])
    ours.calibrate([aux['layers']])
    mine, expected = theirs.state_dict(), ours.state_dict()
    for name in expected:
        if name.endswith(('thr_sum', 'thr_steps')) and not same(mine[name], expected[name]):
            return f'after calibrate, {name} is {float(mine[name]):.5g}, the repository\'s {float(expected[name]):.5g}'


INIT_SIGMAS = 6         # a fresh tensor's mean or std this many standard errors off the repository's: a wrong init


def init_shape(model):
    """twin_shape, 64 wide: enough numbers in each weight for its mean and std to tell a wrong init from sampling
    error (a 64 x 64 matrix's std to about 2%)."""
    return dict(twin_shape(model, 'fast'), n_embd=64)


def fresh(module, model, seed):
    """The state_dict of a freshly initialised GPT of `module`'s, drawn from this seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return module.GPT(module.GPTConfig(**init_shape(model))).state_dict()


def shown(t):
    return f'{float(t):.4g}' if t.numel() == 1 else f'mean {float(t.mean()):.3g}, std {float(t.std()):.3g}'


def init_problem(m, ref, model):
    """A fresh GPT of the copy against a fresh one of the repository's (the twins' checks copy the repository's
    weights into the copy's model, so they never see how the copy initialises them): the same tensor names and
    shapes; each tensor that the repository sets whatever the seed (gains, thresholds, norms' weights, tables) the
    same; each drawn at random with its mean and std within INIT_SIGMAS standard errors of the repository's."""
    mine, ours, again = fresh(m, model, 0), fresh(ref, model, 0), fresh(ref, model, 1)
    shapes = lambda sd: {k: tuple(v.shape) for k, v in sd.items()}
    if shapes(mine) != shapes(ours):
        other = sorted(set(shapes(mine).items()) ^ set(shapes(ours).items()))
        return f"a fresh GPT of your copy has other tensors than the repository's (name, shape): {other[:4]}"
    for name, expected in ours.items():
        got, expected = mine[name].double(), expected.double()
        if torch.equal(expected, again[name].double()):         # not drawn: a constant or a formula
            if not same(got, expected, atol=1e-6, rtol=1e-6):
                return f"{name} of a fresh model is {shown(got)}, the repository's {shown(expected)}"
            continue
        n, sd = expected.numel(), float(expected.std())
        if (abs(float(got.mean() - expected.mean())) > INIT_SIGMAS * sd * math.sqrt(2 / n) or
                abs(float(got.std()) - sd) > INIT_SIGMAS * sd / math.sqrt(n)):
            return (f"{name} of a fresh model is drawn with {shown(got)}, the repository's {shown(expected)}: "
                    f"more than sampling error")


def initialisation(m, ref):
    for model in ('dense', 'mod', 'xmod', 'moe'):                  # the init does not depend on impl
        found = init_problem(m, ref, model)
        if found:
            raise Fail(f'{model}: {found}')


WHOLE_MODEL = [
    ('logits and loss in top-k routing (training)', lambda m, ref: each_family(m, ref, forward_problem('topk'))),
    ('logits and loss in causal routing (sampling, honest validation)',
     lambda m, ref: each_family(m, ref, forward_problem('causal'))),
    ('gradients of the training loss', lambda m, ref: each_family(m, ref, gradient_problem)),
    ("causal routing is causal: a position's logits never change with later tokens",
     lambda m, ref: each_family(m, ref, causality_problem)),
    ('FLOPs per token: flops_per_token, and what the model runs (FlopCounterMode)',
     lambda m, ref: each_family(m, ref, flops_problem)),
    ('cached generation: GPT.forward with a KVCache, generate',
     lambda m, ref: each_family(m, ref, generation_problem)),
    ('the causal thresholds after a calibration step (GPT.calibrate)',
     lambda m, ref: each_family(m, ref, calibration_problem)),
    ("initialisation: a fresh GPT against a fresh one of the repository's (names, shapes, each tensor's mean and "
     "std, the scalars)", initialisation),
]
