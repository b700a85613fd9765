"""
xmod.py: Dense, Mixture-of-Depths (MoD), X-MoD and a small Mixture-of-Experts (MoE), side by side,
in one file.

Read it top to bottom (the tutorial's chapters follow the same order):
  1. GPTConfig ....... the model's shape, with a clear error for every bad field; the layer layout
                       (layer_kinds); routed_k, the k tokens per sequence a routed layer takes
  2. the backbone .... RMSNorm, RoPE attention at explicit positions (Attention.qkv), MLP, Block
                       (its MLP, the dense one or the MoE, called alike: y, aux = mlp(h, routing))
  3. top-k routing ... topk_cut, route_topk: each sequence's own k highest scores
  4. RoutedBlock ..... MoD / X-MoD: a whole block that only k tokens per sequence go through
                       (naive: a loop over sequences, boolean masks; fast: batched gather/scatter)
  5. Router .......... the score (float32 under autocast), the gate on the update, the threshold
  6. balancing ....... depth_balance_loss: every token's expected routed depth near c * R
  7. MoE ............. token-choice top-k over experts (naive: a loop over experts; fast: bmm)
  8. GPT ............. one forward for training, evaluation and generation: one loop over layers,
                       each called as x, aux = layer(x, pos, routing, cache); the losses; the causal
                       thresholds (calibrate); parameter counts; the optimizer; generate
  9. routing_stats ... what the training log records about routing
 10. accounting ...... flops_per_token and match_flops, from the config alone
 11. generation ...... KVCache: the position reached and each layer's keys and values (LayerCache)
 12. `python xmod.py`  the model zoo table

The paper ("X-MoD: Practical Scaling Laws for Sparse-Depth Routing Beyond Mixture-of-Depths") is
known to us by its abstract only; where a choice below is our reading of it, the comment says so.
Shapes: B batch, T time (context), C channels (n_embd), k tokens routed per sequence, E experts,
H expert hidden size.
"""
__version__ = '0.5.0.dev0'       # CHANGELOG.md: what each version changed

import contextlib
import functools
import math
import os
import sys
import warnings
import zlib
from dataclasses import dataclass, replace
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ('dense', 'mod', 'xmod', 'moe')
IMPLS = ('fast', 'naive')
GATES = ('variance', 'plain', 'calibrated')
ROUTERS = ('learned', 'random')   # 'random': the control, a random k tokens (as in MoD's paper)
BCE_LOGITS = ('centred', 'raw')   # the router BCE's logits: r - cut (ours) or r (MoD's paper)
RESID_INITS = ('layers', 'active')
ROUTINGS = ('topk', 'causal')
WINDOWS = ('refill', 'exact')    # generation past block_size (GPT.generate)


# --------------------------------------------------------------------------------------------------
# 1. Config

@dataclass
class GPTConfig:
    # backbone (defaults: the laptop-sized char-level Shakespeare model)
    block_size: int = 128           # train.py's default context (what `python xmod.py` shows)
    vocab_size: int = 84            # char-level Shakespeare (modern spelling): 84 characters
    n_layer: int = 4
    n_head: int = 4                 # attention heads
    n_embd: int = 128               # width C
    dropout: float = 0.0            # dropout probability (0 for small data that is seen about once)
    bias: bool = False              # biases in Linear layers
    resid_init: str = 'layers'      # residual projections' init std 0.02/sqrt(2L): L = n_layer |
                                    # the depth a token passes, 'active' (init_depth)
    model: str = 'dense'            # 'dense' | 'mod' | 'xmod' | 'moe'
    impl: str = 'fast'              # 'fast' (static shapes, compiles) | 'naive' (the idea, plainly)
    # sparse depth (mod, xmod)
    stride: Optional[int] = None    # layer l is a dense anchor when l % stride == 0; None = family
                                    # default (mod 2, MoD's alternation, its only stride; the rest 4)
    capacity: Optional[float] = None  # fraction c of each sequence's tokens a routed layer processes;
                                      # None = 0.125 (MoD's), or what match_flops solves
    gate: Optional[str] = None      # 'variance' (X-MoD) | 'plain' (MoD's) | 'calibrated'
                                    # (variance, sigmoid centred on the threshold); None = family default
    depth_balance: Optional[float] = None  # depth-balance loss coefficient; None = family default
                                           # (xmod 0.1, mod 0)
    router: str = 'learned'         # 'learned' | 'random' (control: random tokens, gate = gain)
    bce_logits: Optional[str] = None  # 'centred' | 'raw' logits of the router's BCE; None = family
                                      # default (mod raw)
    router_bce: float = 0.1         # BCE teaching the router its own top-k choice (causal routing)
    router_momentum: float = 0.9    # EMA momentum of the calibrated causal threshold (0 = each
                                    # step's own quantile)
    router_zloss: float = 0.0       # ablation: penalty on the routers' mean squared score
    # mixture of experts (moe)
    n_expert: int = 8               # moe: experts per layer
    expert_top_k: int = 2           # moe: experts per token
    expert_hidden: Optional[int] = None   # None: 4*n_embd // expert_top_k (active params: an MLP's)
    expert_capacity_factor: float = 1.25   # moe: expert slots = factor * top_k * tokens / experts
    moe_balance: float = 0.01       # Switch load-balancing loss coefficient
    moe_zloss: float = 0.001        # router z-loss coefficient

    def __post_init__(self):
        def bad(name, allowed):
            raise ValueError(f"GPTConfig.{name}={getattr(self, name)!r} is invalid: allowed {allowed}")
        if self.model not in MODELS:
            bad('model', ' | '.join(MODELS))
        if self.impl not in IMPLS:
            bad('impl', ' | '.join(IMPLS))
        for name in ('n_layer', 'n_head', 'n_embd', 'block_size', 'vocab_size', 'n_expert', 'expert_top_k'):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(name, 'an integer >= 1')
        if self.n_embd % self.n_head != 0:
            bad('n_embd', f'a multiple of n_head={self.n_head}')
        if (self.n_embd // self.n_head) % 2 != 0:
            bad('n_head', f'a divisor of n_embd={self.n_embd} leaving an even head size (RoPE rotates pairs)')
        if self.capacity is None:
            self.capacity = 0.125
        if not 0.0 < self.capacity <= 1.0:
            bad('capacity', 'a number in (0, 1]')
        if int(self.capacity * self.block_size + 0.5) == 0:
            bad('capacity', f'at least {0.5 / self.block_size:.4g} so that a routed layer of block_size='
                            f'{self.block_size} selects at least one token (k = int(capacity*block_size + 0.5))')
        if self.stride is None:
            self.stride = 2 if self.model == 'mod' else 4
        if self.stride < 1:
            bad('stride', 'an integer >= 1')
        if self.model == 'mod' and self.stride != 2:
            raise ValueError(f"GPTConfig.stride={self.stride} does nothing for model='mod': MoD alternates dense and "
                             f"routed layers (stride 2); for an anchor every {self.stride} layers use model='xmod' "
                             f"(train.py: --model=xmod --stride={self.stride})")
        if self.gate is None:
            self.gate = 'variance' if self.model == 'xmod' else 'plain'
        if self.gate not in GATES:
            bad('gate', ' | '.join(GATES))
        if self.depth_balance is None:
            self.depth_balance = 0.1 if self.model == 'xmod' else 0.0
        if self.bce_logits is None:
            # MoD as published (raw); X-MoD centred, our reading
            self.bce_logits = 'raw' if self.model == 'mod' else 'centred'
        for name, allowed in (('router', ROUTERS), ('bce_logits', BCE_LOGITS), ('resid_init', RESID_INITS)):
            if getattr(self, name) not in allowed:
                bad(name, ' | '.join(allowed))
        for name in ('depth_balance', 'router_bce', 'router_zloss', 'moe_balance', 'moe_zloss'):
            if getattr(self, name) < 0:
                bad(name, 'a coefficient >= 0')
        if not 0.0 <= self.router_momentum < 1.0:
            bad('router_momentum', 'a number in [0, 1)')
        if self.expert_top_k > self.n_expert:
            bad('expert_top_k', f'an integer in [1, n_expert={self.n_expert}]')
        if self.expert_hidden is None:
            self.expert_hidden = max(1, 4 * self.n_embd // self.expert_top_k)
        if self.expert_hidden < 1:
            bad('expert_hidden', 'an integer >= 1')
        if self.expert_capacity_factor <= 0:
            bad('expert_capacity_factor', 'a number > 0')
        if not 0.0 <= self.dropout < 1.0:
            bad('dropout', 'a number in [0, 1)')

    def anchor_stride(self):
        """The spacing of dense anchors: MoD alternates one dense layer and one routed (Raposo et
        al., 2024), stride 2, the only one it accepts; X-MoD puts an anchor every `stride` layers,
        capacity independent of stride; stride 1 is dense."""
        return self.stride

    def is_dense_layer(self, l):
        """The layer layout: layer l is a dense anchor, or a routed layer (mod, xmod)."""
        if self.model in ('mod', 'xmod'):
            return l % self.anchor_stride() == 0
        return True                      # dense; moe (its attention is dense, its MLP is a mixture)


    def init_depth(self):
        """L in the residual projections' init std 0.02/sqrt(2L) (GPT.__init__). 'layers': n_layer,
        GPT-2's rule. 'active': the depth a token actually passes, anchors + c * routed layers
        (X-MoD stride 4 at c = 0.125: 3 + 9/8 = 4.1, where n_layer = 12 would make its projections
        sqrt(3) smaller than its 4-layer dense partner's)."""
        kinds = layer_kinds(self)
        if self.resid_init == 'layers' or 'routed' not in kinds:
            return self.n_layer
        routed = kinds.count('routed')
        return len(kinds) - routed + routed * routed_k(self.capacity, self.block_size) / self.block_size


def layer_kinds(config):
    """e.g. ['dense', 'routed', 'routed', 'routed', 'dense', ...] for xmod with stride 4
    (GPTConfig.is_dense_layer)."""
    if config.model == 'moe':
        return ['moe'] * config.n_layer
    return ['dense' if config.is_dense_layer(l) else 'routed' for l in range(config.n_layer)]


def layout_string(config):
    """e.g. 'DrrrDrrrDrrr': D dense (an anchor), r routed, E MoE."""
    return ''.join({'dense': 'D', 'routed': 'r', 'moe': 'E'}[k] for k in layer_kinds(config))


def routed_k(capacity, T):
    """k, the tokens per sequence that a routed layer processes at capacity c and context T: round
    half up, never 0. Routing, the FLOP count and FLOP matching all use it (GPTConfig refuses a c
    that rounds to 0)."""
    return max(1, int(capacity * T + 0.5))


# --------------------------------------------------------------------------------------------------
# 2. The backbone: a pre-norm block whose RoPE attention takes each token's position explicitly

def rope_tables(head_size, block_size, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_size, 2).float() / head_size))
    angles = torch.outer(torch.arange(block_size).float(), inv_freq)   # (block_size, hs/2)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x (B, nh, T, hs), or q and k stacked (2, B, nh, T, hs) to rotate both in one call; cos/sin (B
    or 1, T, hs/2) gathered at each token's own position."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)    # broadcast over heads
    # (x1 cos - x2 sin, x1 sin + x2 cos) as x * (cos, cos) + (x2, x1) * (-sin, sin): the same bits,
    # and on x's size two multiplies, one add and one cat instead of four, two and one (the tables
    # are nh times smaller)
    return x * torch.cat([cos, cos], dim=-1) + torch.cat([x2, x1], dim=-1) * torch.cat([-sin, sin], dim=-1)


class Attention(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.n_head, self.dropout = config.n_head, config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        cos, sin = rope_tables(config.n_embd // config.n_head, config.block_size)
        self.register_buffer('cos', cos, persistent=False)   # not in the state_dict: both impls
                                                             # load the same
        self.register_buffer('sin', sin, persistent=False)

    def qkv(self, x, pos):
        """x (B, T, C) -> q, k, v (B, nh, T, hs), q and k rotated by RoPE at pos (T,) or (B, T):
        each token's ORIGINAL position in its sequence. After a routed gather the tokens are a
        subsequence, and RoPE must still rotate them by where they were, not by 0..k-1 (a known bug
        of public MoD code)."""
        B, T, C = x.size()
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head)
        qkv = qkv.permute(2, 0, 3, 1, 4)                                    # (3, B, nh, T, hs)
        # the tables in q and k's dtype: float32 tables would promote autocast's bf16 q and k to
        # float32 (extra full-size passes, cast back by SDPA). In float32 the cast is a no-op: the
        # same bits as before. cos, sin (T, hs/2) or (B, T, hs/2)
        cos, sin = self.cos[pos].to(qkv.dtype), self.sin[pos].to(qkv.dtype)
        if cos.dim() == 2:
            cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
        q, k = apply_rope(qkv[:2], cos, sin)                # q and k in one rotation: half the ops
        return q, k, qkv[2]

    def forward(self, x, pos, cache=None, seqs=None):
        """Causal attention among the tokens of x (B, T, C), in the given order, at positions pos
        (qkv). cache (generation, this layer's LayerCache): empty, it keeps every token's key and
        value (after RoPE): the prompt in one pass. Once it holds the prompt, x (n, 1, C) is the
        next token of each of the sequences seqs (None: all) at position pos (1,): its key and value
        join the cache and it attends over all its sequence has cached (all earlier: no causal mask;
        a padding mask where sequences hold different numbers of tokens)."""
        B, T, C = x.size()
        q, k, v = self.qkv(x, pos)
        if cache is not None and cache.prefilled:
            keys, values, valid = cache.read(seqs, cache.append(seqs, pos, k, v))
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=valid)   # (n, nh, 1, hs)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        if cache is not None:
            cache.fill(pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, h, routing='topk'):
        """h (..., C) -> y, aux: the MoE's call (section 7), with nothing to report (aux None) and
        nothing to route."""
        return self.dropout(self.c_proj(F.gelu(self.c_fc(h)))), None


class Block(nn.Module):
    """A pre-norm transformer block, dense (an anchor) or with the MoE as its MLP (kind 'moe'). Its
    update is f(x) = a + m, attention then MLP: the block's output is x + f(x). Routed layers add
    g * w(r) * f(x) instead (`delta`), so the residual x is added exactly once (public MoD code
    that adds the block's *output* x + f(x) back onto x counts the residual twice)."""

    def __init__(self, config, kind='dense'):
        super().__init__()
        self.kind = kind
        self.ln_1 = nn.RMSNorm(config.n_embd)
        self.attn = Attention(config)
        self.ln_2 = nn.RMSNorm(config.n_embd)
        self.mlp = MoE(config) if kind == 'moe' else MLP(config)

    def forward(self, x, pos, routing='topk', cache=None):
        """Every token, in either routing mode. Every layer of GPT is called the same way, x, aux =
        layer(x, pos, routing, cache) (a routed layer also takes its router's weights, computed
        with every other router's: GPT.shared_routers); aux is what the MLP reports (None from a
        dense one). cache: generation's (Attention.forward), the prompt in one pass or one new
        token."""
        a = self.attn(self.ln_1(x), pos, cache)
        m, aux = self.mlp(self.ln_2(x + a), routing)
        return x + (a + m), aux

    def delta(self, x, pos, cache=None, slots=None, seqs=None, xhat=None):
        """The update f(x) alone, for a routed layer's selected tokens x (B, k, C) at positions pos.
        slots (n,): the MLP runs on these rows of the flattened (B*k, C) only, packed, and f is (n,
        C) (causal routing's real slots: attention needs each sequence's tokens side by side, the
        MLP, 2/3 of the FLOPs, needs no neighbours). cache and seqs: generation's, as
        Attention.forward takes them. xhat: rms_norm(x), when the caller has it already (the fast
        path's router normalised every token: RoutedBlock.forward); ln_1's weight times it is
        ln_1(x), bit for bit, one multiply instead of ln_1's six ops."""
        h = self.ln_1(x) if xhat is None else xhat * self.ln_1.weight
        a = self.attn(h, pos, cache, seqs)                                  # (B, k, C)
        if slots is not None:
            x, a = x.flatten(0, 1)[slots], a.flatten(0, 1)[slots]           # (n, C) each
        return a + self.mlp(self.ln_2(x + a))[0]


# --------------------------------------------------------------------------------------------------
# 3. Top-k routing: which k tokens of each sequence a routed layer takes

def topk_cut(scores, k):
    """The k highest entries of the last dim and a cut between the k-th and the (k+1)-th, so that
    exactly those k have scores > cut (with k = all of them, a cut below the lowest). Top-k routing
    cuts each sequence here, the causal threshold tracks the cut of the whole batch. scores (..., n)
    -> cut (...), order (..., k): the top k's indices, highest score first."""
    n = scores.size(-1)
    top, order = torch.topk(scores, min(k + 1, n), dim=-1)             # (..., k+1), highest first
    # the mean of the k-th and (k+1)-th: (a + b) / 2 in one op, bit for bit
    cut = top[..., k - 1:k + 1].mean(-1) if k < n else top[..., -1] - 1.0
    return cut, order[..., :k]


def route_topk(scores, k):
    """Expert-choice top-k over each sequence (MoD, Raposo et al. 2024): the k highest scores of
    every row. scores (B, T) -> taken (B, k) the positions taken, ascending, mask (B, T) bool, cut
    (B,) with mask == scores > cut. Selection is per batch element: a token competes only with its
    own sequence. It is NOT causal: whether token i is kept depends on later tokens' scores."""
    cut, order = topk_cut(scores, k)
    taken = order.sort(dim=1).values                                    # (B, k) in original order
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter(1, taken, True)
    return taken, mask, cut


# --------------------------------------------------------------------------------------------------
# 4. The routed block (MoD and X-MoD)

class RoutedAux(NamedTuple):
    """What a routed layer reports beside x: the router's verdict on each token. GPT.aux_losses
    turns it into the router's BCE and depth balancing, GPT.calibrate into the causal threshold,
    routing_stats into the log."""
    scores: torch.Tensor                       # (B, T) router scores r, float32
    mask: torch.Tensor                         # (B, T) bool: the tokens the layer took
    cut: Optional[torch.Tensor] = None         # (B,) top-k only: each sequence's cut (topk_cut),
                                               # without gradient (GPT.aux_losses cuts with it)

    @property
    def centred(self):
        """(B, T) top-k only: r - cut, > 0 exactly where taken (None in causal mode)."""
        return None if self.cut is None else self.scores - self.cut.unsqueeze(1)


class RoutedBlock(nn.Module):
    """A whole block (attention + MLP) that only some tokens go through; every other token passes
    untouched.
      routing='topk'   (training): exactly k = routed_k(c, T) tokens per sequence, the k highest
                        router scores.
      routing='causal' (sampling, honest validation): token i is taken when its score passes the
                        calibrated threshold, which uses no other position. The number taken varies
                        per sequence.
    Selected tokens keep their order and their original positions; attention runs among them only,
    causally. The update is gated: x_i <- x_i + gate(r_i) * f(x_i)."""
    kind = 'routed'

    def __init__(self, config, layer_idx):
        super().__init__()
        self.capacity, self.impl = config.capacity, config.impl
        self.block = Block(config)
        self.router = Router(config, layer_idx)

    def forward(self, x, pos, routing='topk', cache=None, shared=None):
        """x (B, T, C) -> x, aux: a RoutedAux, this layer's scores and selection, in top-k mode also
        each sequence's cut (the scores centred on it: the router's BCE, depth balancing). cache
        (generation, causal routing; GPT.forward refuses it with top-k): the prompt in one pass
        fills it with the tokens taken, on the fast path whatever impl (the naive loop keeps no
        cache); once filled, x (B, 1, C) is each sequence's next token. shared: this router's unit
        weight and threshold (either None), as GPT.shared_routers computed them with every other
        router's (the fast path); None: the router computes its own."""
        B, T, C = x.size()
        unit, thr = shared if shared is not None else (None, None)
        if thr is None and (routing == 'causal' or self.router.calibrated):
            thr = self.router.threshold()
        # (B, T) scores; xhat (B, T, C) the normalised input they were scored on (variance gate)
        r, xhat = self.router(x, pos, unit, True)
        if cache is not None and cache.prefilled:
            mask = r > thr                                                  # (B, 1)
            return self.forward_step(x, pos, r, mask, cache), RoutedAux(r, mask)
        w = self.router.gate(r, thr)                                        # (B, T)
        if routing == 'topk':
            # the selection needs no gradient: the cut's, through the scores, GPT.aux_losses takes
            # with every routed layer's at once
            taken, mask, cut = route_topk(r.detach(), routed_k(self.capacity, T))
            # The router learns to predict its own top-k choice from the token alone (for causal
            # routing): this sequence's own mask is the target of its BCE, whose logits are the
            # scores centred on this sequence's own cut, or the raw scores (bce_logits;
            # GPT.aux_losses, all routed layers in one call); sigmoid(centred) is its soft choice,
            # for depth balancing.
            aux = RoutedAux(r, mask, cut=cut)
        else:
            taken, mask = None, r > thr                           # causal: token i's own score only
            aux = RoutedAux(r, mask)
        if self.impl == 'naive' and cache is None:
            x = self.forward_naive(x, mask, w)
        elif routing == 'topk':
            x = self.forward_fast(x, taken, w)
        else:
            x = self.forward_fast_causal(x, mask, w, cache, xhat)
        return x, aux

    def forward_naive(self, x, mask, w):
        """The idea, plainly: for each sequence, pick its selected tokens with a boolean mask, run
        the block on that subsequence at the tokens' original positions, and add the gated update
        back onto those tokens only."""
        out = x.clone()
        for b in range(x.size(0)):
            pos = mask[b].nonzero().squeeze(1)                # (k_b,) original positions, ascending
            if pos.numel() == 0:
                continue
            xs = x[b, pos].unsqueeze(0)                                     # (1, k_b, C)
            f = self.block.delta(xs, pos)                                   # (1, k_b, C)
            # in the residual's dtype
            out[b, pos] = x[b, pos] + (w[b, pos].unsqueeze(-1) * f[0]).to(x.dtype)
        return out

    def forward_fast(self, x, taken, w):
        """Top-k, static shapes: gather the k tokens of every sequence at once, run the block
        batched, scatter-add the gated update. scatter_add touches only the selected rows, so every
        other token is bit-for-bit x. Under autocast f is bf16/fp16 and the gate float32: the update
        joins the residual stream in x's dtype."""
        C = x.size(-1)
        index = taken.unsqueeze(-1).expand(-1, -1, C)           # (B, k, C)
        # one gather for the tokens and their gates, side by side (B, T, C+1): its backward is one
        # scatter, not two, and the split's one cat
        xw = torch.cat([x, w.unsqueeze(-1).to(x.dtype)], dim=-1)
        xs, ws = torch.gather(xw, 1, taken.unsqueeze(-1).expand(-1, -1, C + 1)).split([C, 1], dim=-1)
        f = self.block.delta(xs, taken)                         # (B, k, C); RoPE at their positions
        return torch.scatter_add(x, 1, index, (ws * f).to(x.dtype))

    def forward_fast_causal(self, x, mask, w, cache=None, xhat=None):
        """Causal routing at the cost of the tokens taken: each sequence's taken tokens, gathered to
        the front in order and padded to the batch's largest count k_max, go through attention at
        their original positions; the MLP runs on the real slots of the whole batch packed together
        (n, their sum, not B * k_max); their gated update is added back onto their rows. cache
        (prefill) keeps the real slots only. xhat: the router's rms_norm(x) (B, T, C), reused as
        ln_1's (Block.delta), or None."""
        B, T, C = x.size()
        counts = mask.sum(1)                                      # (B,) tokens taken per sequence
        # k_max and n are the sizes read from the data (one host sync): torch.compile keeps them in
        # one graph as "unbacked" sizes (torch._dynamo.config.capture_scalar_outputs = True, as
        # train.py sets), told only these bounds. n at least 1, so that no tensor is empty: when
        # nothing passes, one padding slot runs through the block, its update times 0. k_max at
        # least 2 (where T allows): CUDA's attention dispatch asks whether the length is 1, a
        # question about an unbacked size that breaks the graph; with k_max >= 2 it is answered.
        # Padding slots sit after the real ones, so under the causal mask they change no real slot.
        # The bounds are applied to the Python ints (sym_max), not as two more ops before the sync.
        lo = min(2, T)
        k_max, n = torch.stack([counts.max(), counts.sum()]).tolist()
        k_max, n = torch.sym_max(k_max, lo), torch.sym_max(n, 1)
        torch._check(k_max >= lo)
        torch._check(k_max <= T)
        torch._check(n >= 1)
        torch._check(n <= B * k_max)
        # The bookkeeping as three stable sorts of the mask's 0/1, taken (1) first, each keeping the
        # order of equals: of each row's mask, the taken positions ascending then the others
        # (taken, B x k_max), its values saying which slots are real; of the real flags of the
        # (B*k_max) slots, the real slots in order (slots, n); of the whole mask, the real tokens'
        # rows in the flattened (B*T) in the same order (token, n), its values zero on padding.
        taken_first = mask.to(torch.uint8)            # as bytes: CUDA sorts no bool before torch 2.6
        real, taken = taken_first.sort(dim=1, descending=True, stable=True)
        real, taken = real[:, :k_max], taken[:, :k_max]           # (B, k_max)
        slots = real.flatten().sort(descending=True, stable=True).indices[:n]
        is_real, token = taken_first.flatten().sort(descending=True, stable=True)
        is_real, token = is_real[:n], token[:n]
        index = taken.unsqueeze(-1).expand(-1, -1, C)
        xs = torch.gather(x, 1, index)                            # (B, k_max, C)
        xhat = None if xhat is None else torch.gather(xhat, 1, index)
        # plain causal attention suffices: a real slot's earlier slots are all real; what padding
        # computes is dropped. f (n, C), RoPE at the tokens' own positions
        f = self.block.delta(xs, taken, cache=cache, slots=slots, xhat=xhat)
        if cache is not None:
            cache.keep(counts)                                    # the padding slots are not cached
        ws = (w.flatten()[token] * is_real).unsqueeze(-1)         # (n, 1); 0 on padding
        return x.flatten(0, 1).index_add(0, token, (ws * f).to(x.dtype)).view(B, T, C)

    def forward_step(self, x, pos, r, mask, cache):
        """Generation's next token of each sequence, x (B, 1, C) at position pos (1,), scored r (B,
        1) and taken where mask (B, 1), with the KV cache. Where it is not taken the layer does
        nothing more for it (no attention, no MLP, no gate, nothing cached); the others attend over
        the tokens this layer took before in their own sequence."""
        if x.size(0) == 1:   # batch 1: a Python branch, no index ops (most tokens are skipped here)
            if not mask.item():
                return x
            f = self.block.delta(x, pos, cache)                     # (1, 1, C)
            return x + (self.router.gate(r).unsqueeze(-1) * f).to(x.dtype)
        seqs = mask[:, 0].nonzero().squeeze(1)                      # (n,) sequences that take it
        if seqs.numel() == 0:
            return x
        f = self.block.delta(x[seqs], pos, cache, seqs=seqs)        # (n, 1, C); their caches only
        w = self.router.gate(r[seqs]).unsqueeze(-1)                 # (n, 1, 1)
        return x.index_add(0, seqs, (w * f).to(x.dtype))            # x + gated f there


# --------------------------------------------------------------------------------------------------
# 5. The router: each token's score, the gate on its update, the causal threshold

def in_float32(forward):
    """A router's forward(self, x) in float32 with autocast off, whatever the precision around it
    ("selective precision": Switch Transformers keeps its router in float32, Fedus et al. 2021).
    Under bf16 autocast, with 8 bits of mantissa, most rows of 128 scores hold ties, and a top-k cut
    between equal scores would no longer make "selected" mean "score > cut"; the causal threshold
    and the router's BCE targets would lose their meaning too. In float32 it changes nothing. Used
    by Router.forward and MoE.router_logits."""
    @functools.wraps(forward)
    def wrapped(self, x, *args):
        with torch.autocast(x.device.type, enabled=False):
            return forward(self, x.float(), *args)
    return wrapped


M32 = 0xFFFFFFFF
EVAL_DRAW = 0x5EED      # the draw of every evaluation and generation: a reproducible val loss


def mix32(h):
    """A 32-bit integer hash (xor-shift and multiply rounds) of int64 values in [0, 2^32);
    multipliers below 2^31 keep every product inside int64, so it gives the same bits on any device,
    eager or compiled."""
    h = h ^ (h >> 16)
    h = (h * 0x7FEB352D) & M32
    h = h ^ (h >> 15)
    h = (h * 0x2C1B3C6D) & M32
    return h ^ (h >> 16)


def random_scores(draw, row0, layer, B, pos):
    """The random-routing control's scores: uniform in [0, 1), a pure function of (draw, layer, the
    sequence's row row0 + b in the global batch, position), so a full forward, a prefill and a
    decoding step give one token the same score, a run and its resume draw alike, and micro-batches
    or DDP ranks draw what one big batch would. pos (T,) or (B, T) -> scores (B, T). The top k of
    each sequence are then a uniformly random k of its tokens, and score > 1 - c takes each token
    with probability c (Router.threshold)."""
    rows = row0 + torch.arange(B, device=pos.device).unsqueeze(1)      # (B, 1)
    h = mix32(mix32(mix32(draw & M32) ^ layer) ^ rows)                 # (B, 1)
    return (mix32(h ^ pos) >> 8).float() * 2.0 ** -24      # (B, T); 24 bits: exact in float32


class Router(nn.Module):
    """Scores each token for one routed layer, turns a score into the gate on the layer's update,
    and keeps the calibrated threshold that causal routing uses. router='random' is the control:
    random scores, no learning."""

    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.variance = config.gate in ('variance', 'calibrated')    # normalised scores, gain * sigmoid
        self.calibrated = config.gate == 'calibrated'
        self.random, self.layer_idx, self.capacity = config.router == 'random', layer_idx, config.capacity
        self.momentum = config.router_momentum
        self.weight = nn.Parameter(torch.empty(1, config.n_embd), requires_grad=not self.random)
        # X-MoD's variance-scaled layer-wise gate (our reading): a learnable scalar g_l per routed
        # layer, initialised to 1/sqrt(routed layers per anchor span) so that a longer span of
        # routed layers does not inflate the residual stream's variance. Unused by the plain gate
        # (kept so state_dicts always match).
        routed_per_span = max(1, config.anchor_stride() - 1)
        self.gain = nn.Parameter(torch.tensor(1.0 / math.sqrt(routed_per_span)))
        # running (debiased) EMA of the batch's top-k cut-off: the causal threshold, frozen at eval
        self.register_buffer('thr_sum', torch.zeros(()))
        self.register_buffer('thr_steps', torch.zeros(()))
        # random routing's draw for training forwards and the batch's first row (GPT.set_draw)
        self.register_buffer('draw', torch.zeros(2, dtype=torch.long), persistent=False)
        self.frozen = None      # (unit weight, threshold) while a generation runs (frozen_routers)

    @in_float32
    def forward(self, x, pos=None, unit=None, normed=False):
        """x (B, T, C) at positions pos (T,) or (B, T), default 0..T-1 -> scores (B, T), in float32
        (in_float32). Only random routing reads pos: a learned score looks at the token alone. The
        variance gate normalises each token's input (RMSNorm) and the weight (unit norm), so scores
        have the same scale at every depth and use no statistics across positions (a per-batch or
        per-sequence normalisation would leak the future into causal routing). unit: the scoring
        vector, when GPT.shared_routers computed it (else unit_weight()). normed=True returns
        (scores, the normalised input rms_norm(x) (B, T, C), or None where the gate does not
        normalise): the fast path reuses it as its block's ln_1 (RoutedBlock.forward)."""
        if self.random:
            pos = torch.arange(x.size(1), device=x.device) if pos is None else pos
            # evaluation: one fixed draw
            draw, row0 = self.draw if self.training else (EVAL_DRAW, self.draw[1])
            r, xhat = random_scores(draw, row0, self.layer_idx, x.size(0), pos), None
        elif self.variance:
            xhat = F.rms_norm(x, (x.size(-1),))
            r = F.linear(xhat, self.unit_weight() if unit is None else unit).squeeze(-1)
        else:
            r, xhat = F.linear(x, self.weight).squeeze(-1), None
        return (r, xhat) if normed else r

    def unit_weight(self):
        """The scoring vector (1, C) that forward uses: the weight, at unit norm for the variance
        gate."""
        if self.frozen is not None:
            return self.frozen[0]
        return self.weight / self.weight.norm() if self.variance else self.weight

    def gate(self, r, thr=None, gain=None):
        """Multiplier on a selected token's update, with the router on the gradient path. thr: the
        threshold, when the caller has it (else threshold()); gain: several routers' gains (R, 1,
        1) for their scores r (R, B, T) (routing_stats), else this router's."""
        gain = self.gain if gain is None else gain
        if self.random:
            return gain.expand_as(r)                # the control: the layer's learnable gain alone
        if self.calibrated:
            # the sigmoid centred on the calibrated threshold: the centred BCE leaves the scores' level
            # free, and sigmoid(r) of the taken tokens drifts to 0.9-0.999, where the gate no longer
            # moves with the score (gate_slope); at r - threshold a taken token sits on the slope
            return gain * torch.sigmoid(r - (self.threshold() if thr is None else thr))
        if self.variance:
            return gain * torch.sigmoid(r)        # X-MoD: g_l * sigmoid(normalised score)
        return r                                  # MoD: the raw router weight (Raposo et al., 2024)

    def threshold(self):
        if self.frozen is not None:
            return self.frozen[1]
        if self.random:                       # each token passes with probability c (random_scores)
            return torch.full_like(self.thr_sum, 1.0 - self.capacity)
        return self.debiased(self.thr_sum, self.thr_steps)

    def debiased(self, thr_sum, thr_steps):
        """The threshold from the EMA's sum and steps, debiased (Adam's correction of a running
        mean started at 0); any shape: router_thresholds hands it every router's, stacked."""
        return thr_sum / (1.0 - self.momentum ** thr_steps).clamp_min(1e-12)

    @torch.no_grad()
    def update_threshold(self, r, k):
        """Track the batch's (1 - c) score quantile: the cut between its (B*k)-th and (B*k+1)-th
        highest scores. A fixed sigmoid(r) > 0.5 would keep far fewer than c of the tokens at small
        capacity (docs/design.md, causal routing)."""
        cut, _ = topk_cut(r.detach().flatten(), r.size(0) * k)
        self.add_cut(cut)

    @torch.no_grad()
    def add_cut(self, cut):
        """One EMA step towards a batch's cut (0-dim): update_threshold's, and GPT.calibrate's,
        which cuts every routed layer in one batched top-k."""
        self.thr_sum.mul_(self.momentum).add_((1 - self.momentum) * cut)
        self.thr_steps.add_(1)


def router_thresholds(routers):
    """Every router's threshold() at once, (R,): two stacks and the EMA's debiasing over all of
    them (Router.debiased), not four ops each; the same bits. Random or frozen routers: each
    router's own."""
    if routers[0].random or routers[0].frozen is not None:
        return torch.stack([router.threshold() for router in routers])
    return routers[0].debiased(torch.stack([router.thr_sum for router in routers]),
                               torch.stack([router.thr_steps for router in routers]))


# --------------------------------------------------------------------------------------------------
# 6. Depth balancing: every token's expected routed depth near c * R

def depth_balance_loss(p, target):
    """X-MoD's depth-wise token balancing (our reading): keep every token's expected routed depth
    near c*R. p (R, B, T): each routed layer's soft choice of each token; target: c*R. Centring p on
    each layer's top-k cut-off (p = sigmoid(r - cut), see RoutedBlock) makes the loss act on the
    realised selection, not on an uncalibrated sigmoid(r); normalised by R so the coefficient does
    not scale with depth."""
    depth = p.sum(0)                                   # (B, T) expected routed depth per token
    return ((depth - target) ** 2).mean() / p.size(0)


# --------------------------------------------------------------------------------------------------
# 7. The small MoE: token-choice top-k over experts, Switch balancing, z-loss, capacity factor

class MoEAux(NamedTuple):
    """What an MoE layer reports beside x: its two losses (GPT.aux_losses) and two statistics
    (routing_stats)."""
    balance: torch.Tensor       # () Switch balancing loss, 1 when uniform (the log's moe_balance)
    zloss: torch.Tensor         # () router z-loss (the log's moe_zloss)
    load: torch.Tensor          # (E,) the fraction of assignments each expert got
    drop_frac: torch.Tensor     # () the fraction of assignments over an expert's capacity, dropped


class MoE(nn.Module):
    """Replaces a block's MLP (Block(config, 'moe')): attention stays dense. Each token picks its expert_top_k experts (softmax over the router's
    logits, renormalised over the chosen ones). Each expert takes at most expert_slots tokens per
    batch; first choices have priority over second choices, then earlier tokens; the rest are
    dropped (they pass through the residual)."""

    def __init__(self, config):
        super().__init__()
        E, C, H = config.n_expert, config.n_embd, config.expert_hidden
        self.config, self.E, self.top_k, self.impl = config, E, config.expert_top_k, config.impl
        self.router = nn.Linear(C, E, bias=False)
        self.w_fc = nn.Parameter(torch.empty(E, C, H))   # expert e: gelu(x @ w_fc[e]) @ w_proj[e]
        self.w_proj = nn.Parameter(torch.empty(E, H, C))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, routing='topk'):
        """x (B, T, C) -> y (B, T, C), aux: the balance and z losses, each expert's load, the
        dropped fraction. In causal routing (generation: each token routed alone) nothing is
        dropped (expert_slots)."""
        B, T, C = x.size()
        xf = x.reshape(B * T, C)                                             # (N, C)
        logits = self.router_logits(xf)                                      # (N, E) float32
        probs = F.softmax(logits, dim=-1)
        topv, tope = torch.topk(probs, self.top_k, dim=-1)                   # (N, K)
        weights = (topv / topv.sum(-1, keepdim=True)).to(x.dtype)
        cap = expert_slots(self.config, B * T, routing)
        if self.impl == 'naive':
            y, kept = self.forward_naive(xf, tope, weights, cap)
        else:
            y, kept = self.forward_fast(xf, tope, weights, cap)
        # Switch load balancing (Fedus et al. 2021): E * sum_e f_e * P_e, f_e the fraction of
        # assignments to e, P_e the mean router probability: equals 1 when routing is uniform.
        load = torch.zeros(self.E, device=x.device).scatter_add(0, tope.flatten(), torch.ones(tope.numel(),
                                                                device=x.device)) / tope.numel()
        aux = MoEAux(balance=self.E * (load * probs.mean(0)).sum(),
                     # router z-loss (Zoph et al. 2022)
                     zloss=torch.logsumexp(logits, dim=-1).pow(2).mean(),
                     load=load.detach(),
                     drop_frac=1.0 - kept.detach().float() / tope.numel())
        return self.dropout(y.view(B, T, C)), aux

    @in_float32
    def router_logits(self, xf):
        return self.router(xf)

    def forward_naive(self, xf, tope, weights, cap):
        """Loop over experts. Assignments in priority order: all first choices (by token), then
        second choices."""
        y = torch.zeros_like(xf)
        kept = torch.zeros((), device=xf.device)
        for e in range(self.E):
            choice, tok = (tope == e).t().nonzero(as_tuple=True)    # choice-major, then token order
            choice, tok = choice[:cap], tok[:cap]                   # the rest overflow the capacity
            h = F.gelu(xf[tok] @ self.w_fc[e]) @ self.w_proj[e]     # expert e on its tokens
            y[tok] += weights[tok, choice].unsqueeze(-1) * h
            kept = kept + tok.numel()
        return y, kept

    def forward_fast(self, xf, tope, weights, cap):
        """Sort assignments by expert (stable, so priority order is kept), give each a slot in its
        expert's buffer (E, cap, C), run all experts as one batched matmul, and add the weighted
        results back to their tokens."""
        N, C = xf.size()
        K, E = self.top_k, self.E
        expert = tope.t().reshape(-1)                                        # (K*N,) priority order
        token = torch.arange(N, device=xf.device).repeat(K)                  # (K*N,)
        weight = weights.t().reshape(-1)                                     # (K*N,)
        order = torch.sort(expert, stable=True).indices
        expert, token, weight = expert[order], token[order], weight[order]
        counts = torch.zeros(E, dtype=torch.long, device=xf.device).scatter_add(0, expert, torch.ones_like(expert))
        start = torch.cumsum(counts, 0) - counts  # first sorted index of each expert
        rank = torch.arange(K * N, device=xf.device) - start[expert]  # position within its expert
        keep = rank < cap
        slot = torch.where(keep, expert * cap + rank, E * cap)   # dropped -> a spare row, discarded
        buf = torch.zeros(E * cap + 1, C, dtype=xf.dtype, device=xf.device).index_copy(0, slot, xf[token])
        h = F.gelu(torch.bmm(buf[:-1].view(E, cap, C), self.w_fc))           # (E, cap, H)
        out = torch.bmm(h, self.w_proj).view(E * cap, C)                     # (E*cap, C)
        out = torch.cat([out, out.new_zeros(1, C)])
        y = torch.zeros_like(xf).index_add(0, token, out[slot] * (weight * keep).unsqueeze(-1))
        return y, keep.sum()


def expert_slots(config, N, routing='topk'):
    """Slots per expert for a batch of N tokens: ceil(capacity_factor * top_k * N / E), at most N
    (MoE routing and flops_per_token). A batch-wide capacity makes a token's fate depend on later
    positions, so causal routing gives every expert room for all N tokens: it drops nothing."""
    if routing == 'causal':
        return N
    return min(N, math.ceil(config.expert_capacity_factor * config.expert_top_k * N / config.n_expert))


# --------------------------------------------------------------------------------------------------
# 8. The model

class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        layers = [RoutedBlock(config, l) if kind == 'routed' else Block(config, kind)
                  for l, kind in enumerate(layer_kinds(config))]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList(layers),
            ln_f=nn.RMSNorm(config.n_embd),
        ))
        # Tied input/output embedding (as GPT-2 and nanoGPT): at GPT-2's vocabulary it is most of a
        # small model's parameters, and every count we report is non-embedding anyway.
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        self.calibration_checked = False    # warn_if_uncalibrated looks once
        for name, p in self.named_parameters():
            # GPT-2's scaled residual projections
            if name.endswith('c_proj.weight') or name.endswith('w_proj'):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.init_depth()))
            elif name.endswith('w_fc'):
                nn.init.normal_(p, mean=0.0, std=0.02)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding, Router)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    # -- forward -----------------------------------------------------------------------------------

    def forward(self, idx, targets=None, routing='topk', cache=None, return_aux=False):
        """idx (B, T) token ids; targets (B, T) or None. routing: 'topk' (training) or 'causal'
        (sampling and the honest validation loss). cache (generation, causal routing only): a
        KVCache that idx continues, at positions from cache.offset on: empty, idx is the prompt;
        after it, one new token per sequence (T = 1). Returns (logits, loss): logits (B, T, V) with
        targets, else (B, 1, V); loss is what training minimises, the LM cross-entropy plus the
        weighted auxiliary losses (router BCE and depth balance in top-k mode, the MoE's always).
        return_aux=True adds a third value, aux = {'losses': each loss, unweighted and detached,
        'lm' the LM cross-entropy; 'layers': what each layer reported, None from a dense layer, a
        RoutedAux or an MoEAux}."""
        if routing not in ROUTINGS:
            raise ValueError(f"routing={routing!r} is invalid: allowed {' | '.join(ROUTINGS)}")
        B, T = idx.size()
        start = 0 if cache is None else cache.offset
        if cache is not None and routing != 'causal':
            raise ValueError(f"routing={routing!r} with a KV cache: generation routes causally (top-k looks at later "
                             f"tokens, which a cache has not seen); pass routing='causal'")
        if start > 0 and T != 1:
            raise ValueError(f"a KV cache that holds {start} tokens takes one new token per sequence, got {T}")
        if start + T > self.config.block_size:
            raise ValueError(f"sequence length {start + T} exceeds block_size={self.config.block_size}")
        if routing == 'causal':
            self.warn_if_uncalibrated()
        # each token's position; a routed layer keeps it
        pos = torch.arange(start, start + T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx))          # (B, T, C)
        layers = []
        caches = cache.layers if cache is not None else [None] * len(self.transformer.h)
        shared = iter(self.shared_routers(routing))   # the routers' weights and thresholds, at once
        for layer, layer_cache in zip(self.transformer.h, caches):  # dense, routed and MoE alike,
            if layer.kind == 'routed':                              # a routed one with its router's
                x, aux = layer(x, pos, routing, layer_cache, next(shared))
            else:
                x, aux = layer(x, pos, routing, layer_cache)
            layers.append(aux)
        if cache is not None:
            cache.offset += T
        x = self.transformer.ln_f(x)
        if targets is None:
            logits = self.lm_head(x[:, [-1], :])             # (B, 1, V): generation needs only this
            return (logits, None, {'losses': {}, 'layers': layers}) if return_aux else (logits, None)
        logits = self.lm_head(x)                                      # (B, T, V)
        # flatten (B, T) together: one target per position of every sequence
        lm = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        aux_losses = self.aux_losses(layers, T, routing)
        # each auxiliary loss weighted by the config's coefficient of the same name (the LM loss: 1)
        loss = lm + sum(getattr(self.config, name) * value for name, value in aux_losses.items())
        if return_aux:
            losses = {name: v.detach() for name, v in dict(lm=lm, **aux_losses).items()}
            return logits, loss, {'losses': losses, 'layers': layers}
        return logits, loss

    def aux_losses(self, layers, T, routing):
        """The auxiliary losses, unweighted, from what the layers reported (`layers`: one aux per
        layer), each named as its coefficient in GPTConfig (and its column in log.csv). Routed
        layers give theirs in top-k mode only: in causal mode there is no top-k choice to learn
        from."""
        # random routing has nothing to learn
        learned = routing == 'topk' and self.config.router == 'learned'
        kinds = [layer.kind for layer in self.transformer.h]
        routed = [a for kind, a in zip(kinds, layers) if kind == 'routed' and learned]  # RoutedAux
        moe = [a for kind, a in zip(kinds, layers) if kind == 'moe']                     # MoEAux
        losses = {}
        if routed:
            # every routed layer at once (R, B, T): one top-k cut of every sequence of every layer,
            # the same cuts as the layers' (RoutedAux.cut), here with their gradient; the scores
            # centred on them; one BCE (the mean of the layers' equal-sized means) and one sigmoid,
            # the soft choice that depth balancing sums over layers
            scores = torch.stack([a.scores for a in routed])
            cut, _ = topk_cut(scores, routed_k(self.config.capacity, T))              # (R, B)
            centred = scores - cut.unsqueeze(-1)
            # the BCE's logits: centred on each sequence's cut (X-MoD, our reading: the scores'
            # level is free), or the raw scores (MoD's paper, Raposo et al. 2024: holds the level
            # near 0, and so the plain gate r)
            logits = centred if self.config.bce_logits == 'centred' else scores
            losses['router_bce'] = F.binary_cross_entropy_with_logits(
                logits, torch.stack([a.mask for a in routed]).float())
            # c * R, with c as realised at T
            target = len(routed) * routed_k(self.config.capacity, T) / T
            losses['depth_balance'] = depth_balance_loss(torch.sigmoid(centred), target)
            if self.config.router_zloss > 0:    # an ablation, off by default: logged only when on
                losses['router_zloss'] = torch.stack([a.scores.square().mean() for a in routed]).mean()
        if moe:
            losses['moe_balance'] = sum(a.balance for a in moe) / len(moe)
            losses['moe_zloss'] = sum(a.zloss for a in moe) / len(moe)
        return losses

    def routed_layers(self):
        """The routed layers (RoutedBlock), in order."""
        return [layer for layer in self.transformer.h if layer.kind == 'routed']

    def shared_routers(self, routing):
        """The fast path's fusion across layers ("routers together"): every routed layer's unit
        weight (the variance gate's) and, where the forward reads it (causal routing, the calibrated
        gate), its threshold, for all the routers at once: a stack and two ops over (R, 1, C)
        instead of two ops per router (and eleven in the backward), and router_thresholds; the same
        bits as each Router.unit_weight() and threshold(). Returns one (unit weight, threshold) per
        routed layer, either None where the router computes its own (the naive path reads each
        router plainly; random routing; frozen_routers has them already)."""
        routers = [layer.router for layer in self.routed_layers()]
        if not routers or self.config.impl == 'naive' or routers[0].frozen is not None:
            return [None] * len(routers)
        units = thresholds = [None] * len(routers)
        if routers[0].variance and not routers[0].random:
            w = torch.stack([router.weight for router in routers])             # (R, 1, C)
            units = w / w.norm(dim=-1, keepdim=True)
        if routing == 'causal' or routers[0].calibrated:
            thresholds = router_thresholds(routers)                            # (R,)
        return list(zip(units, thresholds))

    @torch.no_grad()
    def calibrate(self, steps_layers):
        """Update every routed layer's causal threshold once per optimizer step, from the router
        scores of the whole global batch. steps_layers: aux['layers'] of each micro-batch of the
        step (forward(..., return_aux=True) in training). Under DDP every rank's scores are
        gathered, so each rank gets the threshold one process with the whole batch would get. (An
        update at every forward would track micro-batches, and under DDP rank 0's.)"""
        routed = [l for l, layer in enumerate(self.transformer.h) if layer.kind == 'routed']
        if not routed:
            return
        # every routed layer at once: one all_gather and one top-k, not one of each per layer (27 at
        # 36 layers). r (R, this rank's rows, T)
        r = torch.stack([torch.cat([layers[l].scores.detach() for layers in steps_layers])
                         for l in routed])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            parts = [torch.empty_like(r) for _ in range(torch.distributed.get_world_size())]
            torch.distributed.all_gather(parts, r)
            r = torch.cat(parts, dim=1)                                        # (R, global rows, T)
        # each layer's cut between its (rows*k)-th and (rows*k+1)-th scores: the same selection, so
        # the same bits, as update_threshold's top-k of that layer alone. cuts (R,)
        k = routed_k(self.config.capacity, r.size(2))
        cuts, _ = topk_cut(r.flatten(1), r.size(1) * k)
        for l, cut in zip(routed, cuts):
            self.transformer.h[l].router.add_cut(cut)

    @torch.no_grad()
    def set_draw(self, *key, row0=0):
        """Random routing (router='random'): the draw of the next training forwards, from a key of
        ints (train.py: seed and step) and the index of the batch's first row in the step's global
        batch (row0), so each row's draw is a pure function of them: a resumed run draws what it
        would have, and micro-batches and DDP ranks what one big batch would. In eval mode
        (evaluation, generation) the draw is always EVAL_DRAW and only row0 counts (train.py's
        evaluation: the index of the batch's first window in the validation set, so a val loss does
        not depend on the batch size). A learned router has nothing to set."""
        if self.config.router == 'random':
            draw = zlib.crc32(','.join(map(str, key)).encode())
            for layer in self.routed_layers():
                layer.router.draw.copy_(torch.tensor([draw, row0]))

    def warn_if_uncalibrated(self):
        """Causal routing compares scores with the thresholds that calibrate sets once per training
        step. Never calibrated, they are 0, and a routed layer takes about half the tokens instead
        of c: say so, once."""
        # compiled: no guard on the flag
        if torch.compiler.is_compiling() or self.calibration_checked:
            return
        self.calibration_checked = True
        if any(int(layer.router.thr_steps) == 0 for layer in self.routed_layers()):
            warnings.warn("causal routing with thresholds that were never calibrated: each routed layer takes the "
                          "tokens whose score is > 0, not a fraction `capacity` of them. Call GPT.calibrate once per "
                          "training step, as train.py does", stacklevel=2)

    # -- accounting --------------------------------------------------------------------------------

    def num_params(self, non_embedding=True):
        """Total parameters; non-embedding excludes the (tied) token embedding. There is no position
        table (RoPE)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wte.weight.numel()
        return n

    def num_active_params(self):
        """Active-equivalent non-embedding parameters: what one token uses on average in training
        (top-k) mode. A routed block counts k/T of its block (at T = block_size) plus its router; an
        MoE layer counts its attention, router and expert_top_k experts."""
        c = self.config
        frac = routed_k(c.capacity, c.block_size) / c.block_size
        count = lambda module: sum(p.numel() for p in module.parameters())
        n = count(self.transformer.ln_f)
        for layer in self.transformer.h:
            if layer.kind == 'routed':
                n += frac * count(layer.block) + count(layer.router)
            elif layer.kind == 'moe':
                n += count(layer) - (c.n_expert - c.expert_top_k) * (layer.mlp.w_fc[0].numel() +
                                                                      layer.mlp.w_proj[0].numel())
            else:
                n += count(layer)
        return n

    # -- training and sampling ---------------------------------------------------------------------

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; matrices decay, vectors and scalars (norms, biases, gates) do not. Router weights
        are matrices (1, C) but we keep them out of decay: their scale is the routing decision
        (plain gate)."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 and 'router.weight' not in name else no_decay).append(p)
        groups = [{'params': decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}]
        # fused: one kernel over all parameters, not a dozen small ops per tensor; on a CPU too
        # (docs/speed.md)
        fused = device_type in ('cuda', 'cpu')
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, window='refill'):
        """Sample with causal routing: no routed layer or expert looks at a position after the one
        predicted. use_cache: the prompt in one pass, then each new token runs each layer once with
        the KV cache (section 11; a routed layer caches only the tokens it took), instead of
        recomputing the whole window. Past block_size, window says what the model sees: 'refill'
        (with the cache) re-fills the cache once from the last half window (the last block_size // 2
        tokens in one pass, at positions 0..) and decodes on until the window is full again, so each
        token sees between block_size / 2 and block_size tokens; 'exact' slides the window by one
        token, every position changes, and each step recomputes it (as use_cache=False does)."""
        if window not in WINDOWS:
            raise ValueError(f"window={window!r} is invalid: allowed {' | '.join(WINDOWS)}")
        T_max, cache = self.config.block_size, None
        with frozen_routers(self):               # read once for all the tokens, not per forward
            for _ in range(max_new_tokens):
                if not use_cache or (window == 'exact' and idx.size(1) > T_max):
                    cache, context = None, idx[:, -T_max:]                 # the whole window again
                elif cache is None or cache.offset == T_max:               # the prompt, or a full cache
                    context = idx[:, -T_max:] if cache is None else idx[:, -max(1, T_max // 2):]
                    cache = KVCache(self, idx.size(0))
                else:
                    context = idx[:, -1:]                                  # the newest token
                logits, _ = self(context, routing='causal', cache=cache)
                # float32: autocast's bf16/fp16 logits overflow here
                logits = logits[:, -1, :].float() / max(temperature, 1e-8)
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float('inf')
                idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
                idx = torch.cat((idx, idx_next), dim=1)
        return idx


# --------------------------------------------------------------------------------------------------
# 9. What the log records about routing

@torch.no_grad()
def routing_stats(model, layers, routing):
    """The routing statistics of one forward's `layers` (forward(..., return_aux=True)) in mode
    `routing`, as 0-dim tensors (no host sync); causal mode's names start with causal_. README,
    "Training: what you get", lists them. Every routed layer's are computed at once, on their
    stacked (R, B, T) scores and masks, each layer's a view of the (R,) results: a few dozen ops
    whatever the depth, not a few dozen per layer."""
    stats, drops = {}, []
    prefix = '' if routing == 'topk' else 'causal_'
    routed = [(l, layer.router, a) for l, (layer, a) in enumerate(zip(model.transformer.h, layers))
              if layer.kind == 'routed']
    if routed:
        ls, routers, auxs = zip(*routed)
        mask = torch.stack([a.mask for a in auxs])                    # (R, B, T) bool
        taken = mask.float()
        if routing == 'topk':
            r = torch.stack([a.scores for a in auxs])                 # (R, B, T)
            thr = router_thresholds(routers).view(-1, 1, 1)            # (R, 1, 1)
            gain = torch.stack([router.gain for router in routers]).view(-1, 1, 1)
            std = r.std(dim=2, unbiased=False).clamp_min(1e-12)       # (R, B)
            # does the threshold pick top-k's?
            acc = ((r > thr) == mask).float().mean((1, 2))
            n = taken.sum((1, 2)).clamp_min(1)                        # tokens taken per layer
            # on the tokens taken
            gate_mean = (routers[0].gate(r, thr, gain) * taken).sum((1, 2)) / n
            # d gate / d r on the tokens taken: near 0, the gate is saturated and the LM loss no
            # longer teaches the router through it
            slope = (gate_slope(routers[0], r, thr, gain) * taken).sum((1, 2)) / n
            # overlap with the previous routed layer
            both, either = (mask[1:] & mask[:-1]).sum(2).float(), (mask[1:] | mask[:-1]).sum(2).float()
            jaccard = (both / either.clamp_min(1)).mean(1)            # (R-1,)
            # cut - threshold, in stds
            margin = ((torch.stack([a.cut for a in auxs]) - thr.view(-1, 1)) / std).mean(1)
            score_std = std.mean(1)
            for i, (l, router) in enumerate(zip(ls, routers)):
                stats[f'router_acc_{l}'] = acc[i]
                stats[f'gate_{l}'] = router.gain if router.variance else gate_mean[i]
                stats[f'gate_mean_{l}'] = gate_mean[i]
                stats[f'gate_slope_{l}'] = slope[i]
                if i > 0:
                    stats[f'jaccard_{l}'] = jaccard[i - 1]
                stats[f'margin_{l}'] = margin[i]
                stats[f'score_std_{l}'] = score_std[i]
        else:
            rate = taken.mean((1, 2))                                 # against capacity c
            for i, l in enumerate(ls):
                stats[f'causal_rate_{l}'] = rate[i]
        depth = taken.sum(0)                                          # (B, T) realised routed depth
        if routing == 'causal':
            stats['causal_depth_mean'] = depth.mean()
        stats[prefix + 'depth_std'] = depth.std(unbiased=False)
        # tokens no routed layer took
        stats[prefix + 'untouched_frac'] = (depth == 0).float().mean()
    for l, (layer, a) in enumerate(zip(model.transformer.h, layers)):
        if layer.kind == 'moe':
            # busiest expert; 1 = uniform
            stats[f'{prefix}moe_load_max_{l}'] = a.load.max() * len(a.load)
            drops.append(a.drop_frac)
    if drops and routing == 'topk':                             # causal routing drops nothing
        stats['moe_drop_frac'] = torch.stack(drops).mean()
    return stats


def gate_slope(router, r, thr=None, gain=None):
    """d gate / d r at each score r (B, T), whatever the gate's rule (Router.gate): gain * s(1 - s)
    for a sigmoid gate s, 1 for the plain gate, 0 for random routing's; in the order autograd
    computes it (sigmoid's backward: grad * (1 - s) * s), so bit for bit autograd's. thr and gain:
    as Router.gate takes them (routing_stats: every router's stacked, r (R, B, T))."""
    if router.random:
        return torch.zeros_like(r)
    if not router.variance:
        return torch.ones_like(r)
    s = torch.sigmoid(r - (router.threshold() if thr is None else thr) if router.calibrated else r)
    return (router.gain if gain is None else gain) * (1 - s) * s


# --------------------------------------------------------------------------------------------------
# 10. Accounting from the config alone, and FLOP matching

def flops_per_token(config, T=None, batch_size=1):
    """Forward FLOPs per token that the fast path executes in training (top-k) mode at context T (a
    matmul of m x n by n x p is 2mnp). Attention is counted without causal halving, as torch's
    FlopCounterMode does. batch_size only matters for the MoE, whose per-expert capacity is rounded
    up per batch."""
    c = config
    T = T or c.block_size
    d, V = c.n_embd, c.vocab_size
    total = 2 * d * V                                         # LM head
    for kind in layer_kinds(c):
        if kind == 'dense':
            total += 24 * d * d + 4 * T * d      # qkv 6d^2 + proj 2d^2 + mlp 16d^2; QK^T and AV 4Td
        elif kind == 'routed':
            k = routed_k(c.capacity, T)
            # k tokens, k x k attention, the router
            total += (k / T) * 24 * d * d + 4 * k * k * d / T + 2 * d
        else:
            N = batch_size * T
            slots = c.n_expert * expert_slots(c, N) / N   # expert slots per token, padding included
            total += 8 * d * d + 4 * T * d + 2 * d * c.n_expert + slots * 4 * d * c.expert_hidden
    return total


def match_flops(dense, model, stride=None, n_layer=None, capacity=None, tol=0.02, max_layers=None):
    """Return a mod/xmod config whose forward FLOPs per token at dense.block_size are within tol of
    the dense config's. With n_layer given, solve the capacity (an integer k of block_size tokens;
    a capacity given too is a ValueError); without it, try every total depth and keep the one whose
    solved capacity is closest (in ratio) to `capacity` (default dense.capacity, i.e. 0.125).
    stride: None, the family's default (mod 2, xmod 4). X-MoD with stride 1 has no routed layer: it
    is the dense model itself. Raises ValueError when nothing lands within tol. (The MoE is matched
    on active parameters instead, by its expert_hidden default.)"""
    if dense.model != 'dense':
        raise ValueError(f"match_flops needs a dense config, got model={dense.model!r}")
    if model not in ('mod', 'xmod'):
        raise ValueError(f"match_flops: model={model!r} is invalid: allowed mod | xmod")
    if n_layer is not None and capacity is not None:     # it would be ignored: say so
        raise ValueError(f"match_flops: n_layer={n_layer} fixes the depth, so the capacity is solved, and "
                         f"capacity={capacity} would be ignored: give one of them (train.py: --n_layer=0 "
                         f"searches the depth nearest that capacity; --match_flops=False takes both)")
    T = dense.block_size
    target = flops_per_token(dense)
    capacity = capacity if capacity is not None else dense.capacity
    base = replace(dense, model=model, stride=stride, gate=None, depth_balance=None)
    depths = [n_layer] if n_layer is not None else range(1, (max_layers or 8 * dense.n_layer) + 1)
    cands = []
    for L in depths:
        cfg = replace(base, n_layer=L)
        if 'routed' not in layer_kinds(cfg):
            if base.anchor_stride() == 1:
                cands.append(cfg)    # stride 1: all anchors, the dense model (its capacity is moot)
            continue
        k = min(range(1, T + 1), key=lambda k: abs(flops_per_token(replace(cfg, capacity=k / T)) - target))
        cands.append(replace(cfg, capacity=k / T))
    cands = [cfg for cfg in cands if abs(flops_per_token(cfg) / target - 1) <= tol]
    # closest in ratio
    cands.sort(key=lambda cfg: (abs(math.log(cfg.capacity / capacity)), cfg.n_layer))
    if not cands:
        what = f"n_layer={n_layer}" if n_layer is not None else "any depth"
        raise ValueError(f"match_flops: no {model} config with {what} (stride={base.stride}) lands within "
                         f"{tol:.0%} of the dense model's {target:.4g} FLOPs/token at T={T}; change depth or width")
    return cands[0]


# --------------------------------------------------------------------------------------------------
# 11. Generation with a KV cache: the prompt in one pass, then one token at a time (use_cache)

class KVCache:
    """What generation keeps of B sequences between forwards (GPT.forward's cache): `offset`, the
    tokens they hold so far, hence the next token's position, and each layer's keys and values in
    `layers`, one LayerCache per layer."""

    def __init__(self, model, B):
        c, weight = model.config, model.lm_head.weight
        self.offset = 0
        self.layers = [LayerCache(B, c.n_head, c.n_embd // c.n_head, c.block_size, weight.device, weight.dtype)
                       for _ in model.transformer.h]


@contextlib.contextmanager
def frozen_routers(model):
    """Within it, each router's unit weight and threshold are computed once (Router.frozen), not at
    every forward: a generation runs a forward per token and layer, and they change only in
    training."""
    routers = [layer.router for layer in model.routed_layers()]
    for router in routers:
        router.frozen = (router.unit_weight(), router.threshold())
    try:
        yield
    finally:
        for router in routers:
            router.frozen = None


class LayerCache:
    """One attention layer's keys and values (B, nh, L, hs), after RoPE, of the tokens it has taken
    so far, and their positions: a dense layer every token, a routed layer those that passed its
    causal threshold, so each sequence has its own `length`."""

    def __init__(self, B, n_head, head_size, L, device, dtype):
        self.k = torch.zeros(B, n_head, L, head_size, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.full((B, L), -1, dtype=torch.long, device=device)
        self.length = torch.zeros(B, dtype=torch.long, device=device)
        # the longest row, a Python int: rows all that long read plain views (no mask, no sync)
        self.filled = 0
        # holds the prompt: from then on each forward brings one token per sequence
        self.prefilled = False

    def append(self, seqs, pos, k, v):
        """seqs (n,) the sequences taking a token at position pos (1,), or None for all of them,
        when all have the same length (a dense layer; a routed layer at batch 1); k, v (n, nh, 1,
        hs), in any dtype (autocast gives bf16 values): they are written in the cache's own. Returns
        the seqs' lengths (n,) after it (None: all)."""
        if seqs is None:
            at = self.filled        # assigning is a copy_: it casts k, v to the cache's dtype
            self.k[:, :, at], self.v[:, :, at], self.pos[:, at] = k[:, :, 0], v[:, :, 0], pos
            self.length += 1
            self.filled += 1
            return None
        at = self.length[seqs]                                 # (n,) the next free slot of each row
        self.k[seqs, :, at], self.v[seqs, :, at] = k[:, :, 0].to(self.k.dtype), v[:, :, 0].to(self.v.dtype)
        self.pos[seqs, at] = pos
        self.length[seqs] = at + 1
        self.filled = max(self.filled, int(at.max()) + 1)              # lengths only grow
        return at + 1

    def fill(self, pos, k, v):
        """The prompt's keys and values in one go (prefill): k, v (B, nh, L, hs) at positions pos
        (L,) or (B, L). All L slots count as real; a routed layer's padded gather then `keep`s its
        real counts."""
        L = k.size(2)
        self.k[:, :, :L], self.v[:, :, :L], self.pos[:, :L] = k, v, pos
        self.length = torch.full_like(self.length, L)
        self.filled = L
        self.prefilled = True

    def keep(self, counts):
        """After a padded fill: only the first counts (B,) slots of each row are real tokens (a
        routed prefill)."""
        self.length, self.filled = counts.clone(), int(counts.max())

    def read(self, seqs, length=None):
        """k, v (n, nh, L, hs) of the sequences `seqs` (None: all, of equal length) and a mask of
        their real slots (n, 1, 1, L), None when every slot is real; length (n,): the seqs' lengths
        (append returns them). L is the longest row of the whole batch (filled, known without a
        sync); the mask hides the rest."""
        L = self.filled
        if seqs is None:
            return self.k[:, :, :L], self.v[:, :, :L], None
        length = self.length[seqs] if length is None else length
        valid = torch.arange(L, device=self.k.device) < length.unsqueeze(1)       # (n, L)
        return self.k[seqs, :, :L], self.v[seqs, :, :L], valid[:, None, None, :]


# --------------------------------------------------------------------------------------------------
# 12. The model zoo: `python xmod.py`

def zoo(dense=None):
    """The default small config of each family, the sparse ones FLOP-matched to the dense one: the
    models that `python train.py --model=...` trains by default (GPTConfig's defaults are
    train.py's)."""
    dense = dense or GPTConfig()
    configs = [dense, match_flops(dense, 'mod'), match_flops(dense, 'xmod', stride=4),
               match_flops(dense, 'xmod', stride=2), replace(dense, model='moe')]
    rows = []
    for cfg in configs:
        with torch.device('meta'):
            m = GPT(cfg)
        total, active = m.num_params(), m.num_active_params()
        rows.append(dict(model=cfg.model, stride=cfg.stride if cfg.model == 'xmod' else '-', n_layer=cfg.n_layer,
                         capacity=f"{cfg.capacity:.4f}" if cfg.model in ('mod', 'xmod') else '-',
                         layout=layout_string(cfg), params=total, active=int(round(active)),
                         rho=total / active, flops=flops_per_token(cfg)))
    return rows


if __name__ == '__main__':
    base = GPTConfig()
    lines = [f"Model zoo: n_embd={base.n_embd}, n_head={base.n_head}, block_size={base.block_size}, "
             f"vocab_size={base.vocab_size} (train.py's defaults). mod and xmod are FLOP-matched (within 2%) to the "
             f"dense model; moe matches its active parameters (its expert capacity factor "
             f"{base.expert_capacity_factor} pads FLOPs). Layout: D dense, r routed, E MoE. Params are non-embedding.\n",
             "| model | stride | n_layer | capacity | layout | params | active | rho | FLOPs/token |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in zoo(base):
        lines.append(f"| {r['model']} | {r['stride']} | {r['n_layer']} | {r['capacity']} | {r['layout']} | "
                     f"{r['params']:,} | {r['active']:,} | {r['rho']:.2f} | {r['flops'] / 1e6:.2f}M |")
    try:
        print('\n'.join(lines), flush=True)
    except BrokenPipeError:        # `python xmod.py | head -3` stopped reading: no error, no traceback
        # Python flushes stdout once more at exit, which would raise again: point it at /dev/null
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
