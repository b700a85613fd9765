"""The ops a step launches, counted below autograd (bench.OpCounter: views and allocations left out; on a GPU nearly
each op is a kernel launch, and at small widths launches, not FLOPs, bound a step). X-MoD s4 against its FLOP-matched
dense model at train.py's default shape: at most 4.0x the ops per training step (forward and backward; 4.53 before
the fast path's fusions), at most 4.3x per causal-evaluation forward (5.30 before), evaluation's routing statistics
at most a tenth of its forward's ops (top-k: 382 against 624 before), no sync in a training step and one per routed
layer in a causal forward (its padded and packed sizes). The counts are exact and machine-independent, so these
can fail: an op that creeps back into a routed layer fails them, where a timing would not."""
import pytest
import torch

import xmod
from bench import OpCounter, model_configs, phase_ops


class Shape:
    n_embd, n_head, dense_layers, stride, capacity = 128, 4, 4, 4, 0.125      # bench.py's and train.py's defaults


@pytest.fixture(scope='module')
def counts():
    dense, sparse = model_configs(xmod, Shape, 128)
    assert sparse.n_layer == 12 and xmod.layout_string(sparse) == 'DrrrDrrrDrrr'
    return phase_ops(xmod, dense), phase_ops(xmod, sparse)


def test_xmod_over_dense_ops_per_training_step_and_causal_forward(counts):
    dense, sparse = counts
    train = (sparse['forward'] + sparse['backward']) / (dense['forward'] + dense['backward'])
    assert train <= 4.0, (train, dense, sparse)
    causal = sparse['eval_causal'] / dense['eval_causal']
    assert causal <= 4.3, (causal, dense, sparse)


def test_routing_statistics_cost_a_tenth_of_their_forward(counts):
    _, sparse = counts
    for routing in ('topk', 'causal'):
        assert sparse[f'stats_{routing}'] * 10 <= sparse[f'eval_{routing}'], (routing, sparse)


def test_syncs_none_in_training_and_one_per_routed_layer_in_causal_routing(counts):
    dense, sparse = counts
    assert dense['syncs_train'] == dense['syncs_causal'] == sparse['syncs_train'] == sparse['syncs_topk'] == 0
    assert sparse['syncs_causal'] == 9, sparse                                    # 9 routed layers, one each


def test_the_counter_leaves_out_views_and_allocations_and_counts_syncs():
    x = torch.arange(6.0, requires_grad=True)
    with OpCounter() as c:
        y = x.view(2, 3).t().unsqueeze(0).expand(4, 3, 2)                   # views: none counted
        torch.empty(5)                                                      # an allocation: not counted
        z = (y * 2).sum()                                                   # mul, sum
        z.backward()                                                        # sum's and mul's backward
        z.item(), torch.tensor([1, 2]).tolist()                             # two syncs
    assert c.syncs == 2, c.by_op
    assert c.by_op['mul'] >= 2 and c.by_op['sum'] >= 1 and 'view' not in c.by_op and 'empty' not in c.by_op
    assert c.ops == sum(c.by_op.values())
