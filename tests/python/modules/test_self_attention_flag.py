"""Which calls tell ``mma_nmt::attention`` that they are self-attention (its ``self_attention`` argument).

With the flag, CUDA's FlashAttention path returns 0 at the padding query rows of padded heads of every kind (SPEC's
shared rules allow it there); without it every query row is computed. So the flag must be set exactly where the
queries are the keys' own positions: the encoders' self-attention (``MixedMultiheadAttention`` called on one tensor,
the Transformer's encoder layers, the Hugging Face encoder calls) and never a cross-attention, also where the target
and source lengths are equal by chance. On the CPU the flag changes no number, so these tests read the argument each
call hands the operator."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mma_nmt.models import build_model
from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention
from nmt_fixtures import random_batch, tiny_transformer
from schema_binding import bound_arguments


class _AttentionCalls(TorchDispatchMode):
    """Records (query_len, key_len, head_kinds, padded, self_attention) of every ``mma_nmt::attention`` call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name() == "mma_nmt::attention":
            bound = bound_arguments(func, args, kwargs)
            self.calls.append((bound["q"].shape[2], bound["k"].shape[2], tuple(bound["head_kinds"]),
                               bound["key_lengths"] is not None, bound["self_attention"]))
        return func(*args, **(kwargs or {}))


def _module(head_spec: str = "GLFB") -> MixedMultiheadAttention:
    torch.manual_seed(0)
    return MixedMultiheadAttention(MixedAttentionConfig(embed_dim=16, num_heads=4, head_spec=head_spec))


def _flags(run) -> list[bool]:
    with torch.no_grad(), _AttentionCalls() as recorder:
        run()
    assert recorder.calls, "no mma_nmt::attention call was made"
    return [call[-1] for call in recorder.calls]


def test_a_module_called_on_one_tensor_says_self_attention():
    a = _module()
    x = torch.randn(3, 6, 16)
    lengths = torch.tensor([6, 2, 1])
    assert _flags(lambda: a(x, key_lengths=lengths)) == [True]
    assert _flags(lambda: a(x, x, x, key_lengths=lengths)) == [True]


def test_a_cross_attention_of_equal_lengths_by_chance_does_not():
    # T = S = 6 and padded keys: the query rows past a sentence's key length are real target positions
    a = _module()
    target, memory = torch.randn(3, 6, 16), torch.randn(3, 6, 16)
    lengths = torch.tensor([6, 2, 1])
    assert _flags(lambda: a(target, memory, memory, key_lengths=lengths)) == [False]
    # the same values in another tensor are another tensor: the module cannot know, and computes every row
    assert _flags(lambda: a(target, target.clone(), target.clone(), key_lengths=lengths)) == [False]


def test_queries_at_an_offset_are_not_the_keys_own_positions():
    a = _module("C")
    x = torch.randn(2, 5, 16)
    assert _flags(lambda: a(x, query_offset=2)) == [False]


def test_the_transformer_flags_its_encoder_self_attention_and_nothing_else():
    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.attention = "mma"  # mixed G/L/F/B encoder heads through mma_nmt::attention
    torch.manual_seed(0)
    model = build_model(config).eval()
    src, lengths, prev, _ = random_batch(batch=3, src_len=6, tgt_len=6)  # T = S: cross-attention equal by chance
    with torch.no_grad(), _AttentionCalls() as encoder:
        model.encode(src, lengths)
    with torch.no_grad(), _AttentionCalls() as whole:
        model(src, lengths, prev)
    assert len(encoder.calls) == config.encoder.layers
    assert all(call[-1] for call in encoder.calls)  # padded, T = S, mixed kinds, flagged
    assert whole.calls[:len(encoder.calls)] == encoder.calls  # the forward encodes first, then decodes
    decoder = whole.calls[len(encoder.calls):]
    assert any(query_len == key_len and padded for query_len, key_len, _, padded, _ in decoder)  # the cross-attention
    assert decoder and not any(call[-1] for call in decoder)
