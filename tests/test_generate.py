"""KV-cache generation: GPT.forward with a KVCache, the prompt in one pass, then each new token runs each layer once;
a routed layer caches only the tokens it took. The cached decode equals the causal forward (logits to 1e-4, the same
greedy tokens) for every family, batch > 1 with different selections per sequence, and past block_size (the exact
sliding window, and the default refilled one)."""

import pytest
import torch

from xmod import GPT, GPTConfig, KVCache, RoutedBlock

# these tests route causally on models no training step calibrated, on purpose (routing's mechanics, not its
# thresholds): xmod.py's one warning about it is expected here, and test_xmod.py checks that it is given
pytestmark = pytest.mark.filterwarnings('ignore:causal routing with thresholds that were never calibrated')

torch.set_num_threads(1)
V = 48


def calibrated(model, **kw):
    """A tiny model whose causal thresholds were calibrated on one batch, so routed layers take about c of it."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(model=model, n_layer=5, n_embd=32, n_head=2, block_size=32, vocab_size=V,
                      stride=2 if model == 'mod' else 4, capacity=0.25, **kw))
    x = torch.randint(0, V, (8, 32), generator=torch.Generator().manual_seed(1))
    m.calibrate([m(x, x, return_aux=True)[2]['layers']])
    return m.eval()


def prompts(B, T, seed=2):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def decode(m, idx, cache):
    """Logits (B, T, V) of idx (B, T) fed one token at a time through the cache."""
    return torch.cat([m(idx[:, [t]], routing='causal', cache=cache)[0] for t in range(idx.size(1))], dim=1)


@pytest.mark.parametrize('B', [3, 1])        # batch 1 takes its own path in a routed layer (no index ops)
@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
def test_cached_decode_equals_the_causal_forward(model, B):
    m = calibrated(model)
    idx = prompts(3, 32)[:B]
    _, _, aux = m(idx, idx, routing='causal', return_aux=True)
    full, _ = m(idx, idx, routing='causal')                              # (B, T, V)
    cache = KVCache(m, B)
    step = decode(m, idx, cache)
    assert (step - full).abs().max().item() < 1e-4 and cache.offset == 32
    # a routed layer's cache holds exactly the tokens the causal forward selected there, at their positions
    for layer, cache, a in zip(m.transformer.h, cache.layers, aux['layers']):
        if isinstance(layer, RoutedBlock):
            mask = a.mask                                                # (B, T)
            assert torch.equal(cache.length, mask.sum(1))
            for b in range(B):
                assert cache.pos[b, :cache.length[b]].tolist() == mask[b].nonzero().squeeze(1).tolist()
        else:
            assert cache.length.tolist() == [32] * B and cache.filled == 32
    if model in ('mod', 'xmod') and B > 1:                                         # the sequences really differ
        routed = [a.mask for a in aux['layers'] if a is not None]
        assert any(not torch.equal(mk[0], mk[1]) for mk in routed)
        assert 0 < sum(mk.sum() for mk in routed) < sum(mk.numel() for mk in routed)


@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
def test_greedy_generation_is_the_same_with_and_without_the_cache(model):
    """Batch 2, a prompt of 10, then 40 new tokens: past block_size=32 the window slides (window='exact')."""
    m = calibrated(model)
    idx = prompts(2, 10, seed=3)
    torch.manual_seed(0)
    a = m.generate(idx, 40, top_k=1, use_cache=True, window='exact')
    torch.manual_seed(0)
    b = m.generate(idx, 40, top_k=1, use_cache=False)
    assert torch.equal(a, b)
    assert a.shape == (2, 50)


@pytest.mark.parametrize('B', [2, 1])
@pytest.mark.parametrize('model', ['dense', 'xmod', 'moe'])
def test_refill_window_equals_recomputing_the_same_windows(model, B):
    """The default past block_size (window='refill'): when the window is full the cache is re-filled from the last
    half window, at positions 0.., and decoding goes on until it is full again. Each step's logits equal an uncached
    causal forward of that same window, so greedy tokens agree; a prompt of 40 > block_size=32 starts with the last
    32 of it, then 70 new tokens refill the cache three times."""
    m = calibrated(model)
    idx = prompts(B, 40, seed=5)
    torch.manual_seed(0)
    got = m.generate(idx, 70, top_k=1)
    assert torch.equal(got[:, :40], idx)
    T_max, start, windows = 32, 40 - 32, set()
    for T in range(40, 110):                      # the token at T from the window the rule gives: [start, T)
        if T - start > T_max:
            start = T - T_max // 2
        windows.add(T - start)
        with torch.no_grad():
            logits, _ = m(got[:, start:T], routing='causal')
        assert torch.equal(logits[:, -1].argmax(-1), got[:, T]), T
    assert min(windows) == T_max // 2 and max(windows) == T_max
    with pytest.raises(ValueError, match='window'):
        m.generate(idx, 1, window='slide')


@pytest.mark.parametrize('B', [3, 1])
@pytest.mark.parametrize('model', ['dense', 'mod', 'xmod', 'moe'])
def test_prefill_equals_decoding_the_prompt_token_by_token(model, B):
    """The prompt in one causal pass through an empty cache: the same next-token logits as the causal forward, the
    same routing (return_aux), and every layer's cache holds the same tokens at the same positions with the same keys
    and values as T decode steps."""
    m = calibrated(model)
    idx = prompts(3, 20)[:B]
    one, steps = KVCache(m, B), KVCache(m, B)
    with torch.no_grad():
        logits, _, aux = m(idx, routing='causal', cache=one, return_aux=True)
        last = decode(m, idx, steps)[:, -1]
        full, _, full_aux = m(idx, routing='causal', return_aux=True)
    assert (logits[:, -1] - full[:, -1]).abs().max().item() < 1e-4 and (logits[:, -1] - last).abs().max() < 1e-4
    assert one.offset == steps.offset == 20
    for a, b in zip(aux['layers'], full_aux['layers']):
        assert (a is None) == (b is None) and (a is None or torch.equal(a.mask if model != 'moe' else a.load,
                                                                       b.mask if model != 'moe' else b.load))
    for a, b in zip(one.layers, steps.layers):
        assert torch.equal(a.length, b.length) and a.filled == b.filled
        for row in range(B):
            n = int(a.length[row])
            assert torch.equal(a.pos[row, :n], b.pos[row, :n])
            assert torch.allclose(a.k[row, :, :n], b.k[row, :, :n], atol=1e-5)
            assert torch.allclose(a.v[row, :, :n], b.v[row, :, :n], atol=1e-5)
    if model in ('mod', 'xmod'):
        lengths = [int(c.length.sum()) for c, layer in zip(one.layers, m.transformer.h)
                   if isinstance(layer, RoutedBlock)]
        assert 0 < sum(lengths) < 20 * B * len(lengths)                # some tokens taken, not all


@pytest.mark.parametrize('B', [3, 1])
def test_routed_layers_that_take_none_or_all_of_the_prompt(B):
    """One routed layer whose threshold nothing passes (its cache stays empty after the prompt: no padding slot
    counts as a token), one that everything passes: cached greedy decoding still equals recomputing the window."""
    m = calibrated('xmod')
    routed = [layer for layer in m.transformer.h if isinstance(layer, RoutedBlock)]
    with torch.no_grad():
        routed[0].router.thr_sum.fill_(1e9)                                # nothing passes
        routed[1].router.thr_sum.fill_(-1e9)                               # everything passes
    idx = prompts(3, 12, seed=4)[:B]
    cache = KVCache(m, B)
    with torch.no_grad():
        m(idx, routing='causal', cache=cache)
    first, second = (cache.layers[list(m.transformer.h).index(layer)] for layer in routed[:2])
    assert first.filled == 0 and first.length.tolist() == [0] * B
    assert second.filled == 12 and second.length.tolist() == [12] * B
    torch.manual_seed(0)
    a = m.generate(idx, 8, top_k=1, use_cache=True)
    torch.manual_seed(0)
    b = m.generate(idx, 8, top_k=1, use_cache=False)
    assert torch.equal(a, b)


def test_the_cache_gives_positions_and_refuses_what_it_cannot_serve():
    """The cache knows how far its sequences go: a token after a 10-token prompt is at position 10, as in the
    uncached forward. A cache serves causal routing only, one token per sequence after the prompt, and no further
    than block_size: each otherwise a ValueError that says so."""
    m = calibrated('xmod')
    idx = prompts(2, 14, seed=6)
    cache = KVCache(m, 2)
    with torch.no_grad():
        m(idx[:, :10], routing='causal', cache=cache)
        assert cache.offset == 10
        logits, _ = m(idx[:, 10:11], routing='causal', cache=cache)
        full, _ = m(idx[:, :11], routing='causal')
        assert cache.offset == 11 and (logits[:, -1] - full[:, -1]).abs().max().item() < 1e-4
        with pytest.raises(ValueError, match="routing='topk' with a KV cache.*routing='causal'"):
            m(idx[:, 11:12], cache=cache)
        with pytest.raises(ValueError, match='one new token per sequence'):
            m(idx[:, 11:], routing='causal', cache=cache)
        full_cache = KVCache(m, 2)
        m(prompts(2, 32), routing='causal', cache=full_cache)
        with pytest.raises(ValueError, match='exceeds block_size'):
            m(idx[:, :1], routing='causal', cache=full_cache)


def test_a_generation_reads_each_router_once_and_leaves_none_frozen(monkeypatch):
    """GPT.generate has each router compute its threshold and unit weight once (frozen_routers), not at each of its
    forwards; afterwards, and after an error inside, nothing stays frozen, so a threshold changed later counts."""
    import xmod
    m = calibrated('xmod')
    routed = m.routed_layers()
    calls, threshold = [], xmod.Router.threshold

    def computed(self):                                                # a call that computes, not one that reads
        if self.frozen is None:
            calls.append(self)
        return threshold(self)

    monkeypatch.setattr(xmod.Router, 'threshold', computed)
    m.generate(prompts(2, 8), 20, top_k=1)
    assert len(calls) == len(routed) and all(layer.router.frozen is None for layer in routed)
    with pytest.raises(RuntimeError):
        m.generate(prompts(2, 8).float(), 2)                       # an error inside the generation
    assert all(layer.router.frozen is None for layer in routed)
    with torch.no_grad():
        routed[0].router.thr_sum.fill_(1e9)
    _, _, aux = m(prompts(2, 8), routing='causal', return_aux=True)
    assert not aux['layers'][1].mask.any()                             # layer 1: the new threshold, nothing passes
