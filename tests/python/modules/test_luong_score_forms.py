"""The two forms of the "general" Luong score in ``LuongMultiheadAttention`` (issue 49, point 3): per-head keys
``W_sc_i hs`` precomputed once per sentence (``score_form="projected_keys"``, the default) and OpenNMT-py's projected
query ``W_sc_i^T h_t`` scored against the encoder states (``"projected_query"``). Same parameters, same function: equal
outputs, weights and gradients in float64 with padding; the query form never builds a (B, h, S, dh) key tensor."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mma_nmt.modules.luong_attention as luong_module
from mma_nmt.models import build_model, preset
from mma_nmt.modules import LuongAttentionConfig, LuongMultiheadAttention
from nmt_fixtures import random_batch

LENGTHS = torch.tensor([7, 4, 1])  # a full sentence, a padded one, a one-token one


def _pair(heads: int, implementation: str):
    """(projected-keys module, projected-query module) with the same float64 parameters."""
    modules = []
    for form in ("projected_keys", "projected_query"):
        torch.manual_seed(0)
        config = LuongAttentionConfig(hidden_dim=10, num_heads=heads, softmax_dim=12, feed_dim=8,
                                      implementation=implementation, score_form=form)
        modules.append(LuongMultiheadAttention(config).double())
    assert all(torch.equal(a, b) for a, b in zip(modules[0].parameters(), modules[1].parameters()))
    return modules


@pytest.mark.parametrize("implementation", ["fused", "reference"])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("steps", [None, 5], ids=["one-step", "all-steps"])
def test_projected_query_equals_projected_keys_with_gradients(implementation, heads, steps):
    keys_form, query_form = _pair(heads, implementation)
    torch.manual_seed(1)
    hs = torch.randn(3, 7, 10, dtype=torch.float64, requires_grad=True)
    h_t = torch.randn(*((3, 10) if steps is None else (3, steps, 10)), dtype=torch.float64, requires_grad=True)
    results = []
    for module in (keys_form, query_form):
        a_tilde, a_bar, alpha = module(h_t, module.precompute(hs, key_lengths=LENGTHS), need_weights=True)
        # a loss that weighs every output differently, so that no gradient can cancel out
        loss = (a_tilde * torch.linspace(-1, 1, a_tilde.shape[-1], dtype=torch.float64)).sum() + a_bar.square().sum()
        grads = torch.autograd.grad(loss, [hs, h_t, *module.parameters()])
        results.append((a_tilde, a_bar, alpha, *grads))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    alpha = results[1][2]
    assert alpha.shape[:2] == (3, heads)
    assert float(alpha[2, ..., 1:].detach().abs().sum()) == 0.0  # the one-token sentence's padding gets no weight
    assert all(float(g.abs().sum()) > 0 for g in results[1][3:])  # every gradient is exercised


@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_projected_query_never_builds_per_head_keys(implementation, monkeypatch):
    """The memory holds no keys, and the attention reads the encoder states themselves as keys: a (B, 1, S, dh) view
    of them, with the h heads as query rows."""
    _, module = _pair(4, implementation)
    hs, h_t = torch.randn(3, 7, 10, dtype=torch.float64), torch.randn(3, 10, dtype=torch.float64)
    memory = module.precompute(hs, key_lengths=LENGTHS)
    assert memory.keys is None and memory.values is hs
    seen = []
    name = "shared_value_attention_reference" if implementation == "reference" else "shared_value_attention"
    real = getattr(luong_module, name)

    def spy(q, k, v, **options):
        seen.append((tuple(q.shape), tuple(k.shape), k.data_ptr() == v.data_ptr()))
        return real(q, k, v, **options)

    monkeypatch.setattr(luong_module, name, spy)
    module(h_t, memory)
    assert seen == [((3, 1, 4, 10), (3, 1, 7, 10), True)]


class _LargestBuffer(TorchDispatchMode):
    """The largest tensor any op returns while active (views included: they hold no new memory but never exceed it)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_projected_query_never_copies_the_score_matrices_per_sentence(implementation):
    """q_i = W_sc_i^T h_t is one batched GEMM over the heads: no (B, h, dh, dh) buffer forward (the weights broadcast
    over the batch, which matmul copies) or backward (one outer product per sentence). At WMT sizes (B 128, h 4,
    dh 1024) such a buffer holds 512M elements a step."""
    batch, heads, dh = 16, 4, 24
    config = LuongAttentionConfig(hidden_dim=dh, num_heads=heads, softmax_dim=16, feed_dim=16,
                                  implementation=implementation, score_form="projected_query")
    module = LuongMultiheadAttention(config)
    hs, h_t = torch.randn(batch, 7, dh, requires_grad=True), torch.randn(batch, dh, requires_grad=True)
    memory = module.precompute(hs, key_lengths=torch.randint(1, 8, (batch,)))
    with _LargestBuffer() as forward:
        a_tilde, a_bar, _ = module(h_t, memory)
    with _LargestBuffer() as backward:
        (a_tilde.sum() + a_bar.square().sum()).backward()
    per_sentence_weights = batch * heads * dh * dh  # 36864
    assert forward.largest < per_sentence_weights // 4 and backward.largest < per_sentence_weights // 4, (
        forward.largest, backward.largest)
    assert module.w_sc.grad is not None and float(module.w_sc.grad.abs().sum()) > 0


def test_projected_query_memory_reorders_for_beams():
    keys_form, query_form = _pair(2, "fused")
    hs, h_t = torch.randn(3, 5, 10, dtype=torch.float64), torch.randn(2, 10, dtype=torch.float64)
    lengths, order = torch.tensor([5, 3, 2]), torch.tensor([2, 0])
    memory = LuongMultiheadAttention.reorder_memory(query_form.precompute(hs, key_lengths=lengths), order)
    assert memory.keys is None
    want = keys_form(h_t, keys_form.precompute(hs[order], key_lengths=lengths[order]))
    for got, expected in zip(query_form(h_t, memory)[:2], want[:2]):
        torch.testing.assert_close(got, expected)


def test_a_memory_without_keys_is_refused_by_the_keys_form():
    keys_form, query_form = _pair(2, "fused")
    memory = query_form.precompute(torch.randn(2, 3, 10, dtype=torch.float64))
    with pytest.raises(ValueError, match="holds no keys.*score_form='projected_query'"):
        keys_form(torch.randn(2, 10, dtype=torch.float64), memory)


def test_unknown_score_form_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="score_form"):
        LuongAttentionConfig(hidden_dim=4, score_form="projected")
    with pytest.raises(ValueError, match="model.score_form"):
        preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, score_form="keys")


@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_lstm_with_projected_queries_equals_the_default_and_shares_its_checkpoints(implementation):
    """The same state dict loads into either form; logits and every gradient agree, and beam search finds the same
    hypotheses (the incremental state holds no keys)."""
    from mma_nmt.decoding.beam import beam_search
    from mma_nmt.decoding.search import SearchConfig

    config = dict(src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, heads=2, implementation=implementation)
    torch.manual_seed(0)
    default = build_model(preset("lstm_tiny", **config)).double()
    projected = build_model(preset("lstm_tiny", score_form="projected_query", **config)).double()
    projected.load_state_dict(default.state_dict())  # strict: the same keys
    src, lengths, prev, tgt = random_batch(batch=3)
    grads = []
    for model in (default, projected):
        logits = model(src, lengths, prev)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
        grads.append((logits, *(p.grad for p in model.parameters())))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)
    search = SearchConfig(beam_size=3, max_len_a=1.0, max_len_b=3)
    found = [[[h.tokens for h in hyps] for hyps in beam_search(m.eval(), src, lengths, search)]
             for m in (default, projected)]
    assert found[0] == found[1]


@pytest.mark.parametrize("score_form", ["projected_keys", "projected_query"])
def test_record_mode_still_gets_the_weights_of_a_training_forward(score_form):
    """A plain forward asks no step for weights; record mode forces them on, and they are those that
    ``decode(need_weights=True)`` returns, in both score forms."""
    from mma_nmt.models.recording import collect_attention, record_attention

    torch.manual_seed(0)
    model = build_model(preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, heads=2,
                               implementation="fused", score_form=score_form)).eval()
    src, lengths, prev, _ = random_batch(batch=3)
    with torch.no_grad():
        with record_attention(model) as recorder:
            model(src, lengths, prev)
        recorded = collect_attention(model, recorder, src_lengths=lengths, tgt_lengths=(prev != 0).sum(1)).cross[0]
        _, asked = model.decode(prev, model.encode(src, lengths), need_weights=True)
    assert recorded.shape == (3, 2, prev.shape[1], src.shape[1])
    torch.testing.assert_close(recorded, asked[0], rtol=1e-5, atol=1e-6)
