"""The operator cases of the CUDA test suite (test_cuda_operators.py) and of ``python -m benchmarks --device cuda``:
each operator's functional call and its plain-PyTorch reference on the same keyword arguments, with random inputs
built on the CPU in float64 (so that every device and dtype starts from the same values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from mma_nmt.ops import (fused_attention, gmm_attention, multihop_gate, multihop_second_hop, multilayer_attention,
                         parse_head_spec, shared_value_attention)
from mma_nmt.reference import (attention_reference, gmm_attention_reference, head_gate_reference,
                               multilayer_attention_op_reference, second_hop_reference,
                               shared_value_attention_reference)


@dataclass(frozen=True)
class OperatorCase:
    """One operator call: ``fused(**inputs)`` and ``reference(**inputs)`` return the differentiable output first.
    ``make_inputs(generator)`` returns float64 CPU tensors (and plain options); tensors in ``differentiable`` get
    gradients."""

    name: str
    make_inputs: Callable[[torch.Generator], dict]
    fused: Callable[..., torch.Tensor]
    reference: Callable[..., torch.Tensor]
    differentiable: tuple[str, ...]


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _attention_inputs(spec: str, batch: int, heads: int, query_len: int, key_len: int, head_dim: int,
                      value_dim: int, *, padded: bool = True) -> Callable[[torch.Generator], dict]:
    def make(gen):
        # a full sentence and length-1 ones; or no key lengths at all, as a decoder's self-attention step has
        lengths = torch.tensor([key_len] + [1] * (batch - 1)) if padded else None
        return dict(q=_randn(gen, batch, heads, query_len, head_dim), k=_randn(gen, batch, heads, key_len, head_dim),
                    v=_randn(gen, batch, heads, key_len, value_dim), key_lengths=lengths,
                    head_kinds=parse_head_spec(spec, heads), window=2)
    return make


def _gmm_inputs(gen: torch.Generator) -> dict:
    batch, heads, query_len, key_len, components = 2, 2, 5, 9, 3
    rows = (batch, heads, query_len)
    return dict(q=_randn(gen, *rows, 16), k=_randn(gen, batch, heads, key_len, 16), v=_randn(gen, batch, heads, key_len, 24),
                omega=torch.rand(*rows, components, generator=gen, dtype=torch.float64) + 0.1,
                mu=torch.rand(*rows, components, generator=gen, dtype=torch.float64) * key_len,
                sigma=torch.rand(*rows, components, generator=gen, dtype=torch.float64) * 3 + 0.5,
                gate=torch.rand(*rows, generator=gen, dtype=torch.float64), key_lengths=torch.tensor([9, 1]),
                normalization="strict")


def _shared_value_inputs(gen: torch.Generator) -> dict:
    return dict(q=_randn(gen, 3, 4, 1, 32), k=_randn(gen, 3, 4, 11, 32), v=_randn(gen, 3, 11, 48),
                key_lengths=torch.tensor([11, 4, 1]), scale=0.2)


def _head_gate_inputs(gen: torch.Generator) -> dict:
    return dict(query_proj=_randn(gen, 2, 4, 7, 16), head_proj=_randn(gen, 2, 4, 7, 16),
                value_proj=_randn(gen, 2, 4, 7, 8), v_b=_randn(gen, 16))


def _second_hop_inputs(gen: torch.Generator) -> dict:
    return dict(q=_randn(gen, 2, 4, 7, 8), a=_randn(gen, 2, 4, 7, 8), w_b=_randn(gen, 12, 8),
                u_b=_randn(gen, 4, 12, 8), u_c=_randn(gen, 4, 6, 8), v_b=_randn(gen, 12))


def _multilayer_inputs(gen: torch.Generator) -> dict:
    layers, batch, query_len, key_len, embed = 3, 2, 5, 7, 32
    return dict(q=[_randn(gen, batch, query_len, embed) for _ in range(layers)],
                k=[_randn(gen, batch, key_len, embed) for _ in range(layers)], v=[_randn(gen, batch, key_len, embed)],
                key_lengths=torch.tensor([7, 1]), num_heads=4)


CASES = [
    OperatorCase("attention GLFB", _attention_inputs("GLFB", 3, 4, 9, 9, 24, 16),
                 lambda **kw: fused_attention(**kw).out, lambda **kw: attention_reference(**kw)[0], ("q", "k", "v")),
    OperatorCase("attention causal T=1", _attention_inputs("C", 2, 2, 1, 13, 64, 64),
                 lambda **kw: fused_attention(**kw, query_offset=12).out,
                 lambda **kw: attention_reference(**kw, query_offset=12)[0], ("q", "k", "v")),
    # A beam-search step of decoder self-attention: no key lengths, one query after the cached keys. In low precision
    # the CUDA operator runs it through the memory-efficient SDPA kernel with a (B, H, 1, S) mask as bias (the
    # first GPU run failed here at decoding: the bias had batch size 1).
    OperatorCase("attention causal step, no padding", _attention_inputs("C", 3, 2, 1, 13, 64, 64, padded=False),
                 lambda **kw: fused_attention(**kw, query_offset=12).out,
                 lambda **kw: attention_reference(**kw, query_offset=12)[0], ("q", "k", "v")),
    OperatorCase("attention mixed step, no padding", _attention_inputs("CCLG", 2, 4, 2, 9, 24, 16, padded=False),
                 lambda **kw: fused_attention(**kw, query_offset=7).out,
                 lambda **kw: attention_reference(**kw, query_offset=7)[0], ("q", "k", "v")),
    OperatorCase("gmm_attention", _gmm_inputs, lambda **kw: gmm_attention(**kw).out,
                 lambda **kw: gmm_attention_reference(**kw)[0], ("q", "k", "v", "omega", "mu", "sigma", "gate")),
    OperatorCase("shared_value_attention", _shared_value_inputs, lambda **kw: shared_value_attention(**kw).out,
                 lambda **kw: shared_value_attention_reference(**kw)[0], ("q", "k", "v")),
    OperatorCase("multihop_gate", _head_gate_inputs, lambda **kw: multihop_gate(**kw).out,
                 lambda **kw: head_gate_reference(**kw)[0], ("query_proj", "head_proj", "value_proj", "v_b")),
    OperatorCase("multihop_second_hop", _second_hop_inputs, lambda **kw: multihop_second_hop(**kw).out,
                 lambda **kw: second_hop_reference(**kw)[0], ("q", "a", "w_b", "u_b", "u_c", "v_b")),
    OperatorCase("multilayer_attention", _multilayer_inputs, lambda **kw: multilayer_attention(**kw).out,
                 lambda **kw: multilayer_attention_op_reference(**kw)[0], ("q", "k", "v")),
]


def inputs_on(inputs: dict, differentiable: tuple[str, ...], device, dtype) -> dict:
    """``inputs`` with floating-point tensors (and lists of them) moved to ``device`` in ``dtype``; those named in
    ``differentiable`` require gradients, integer tensors (key lengths) only move."""
    def move(name, t):
        if not torch.is_floating_point(t):
            return t.to(device)
        return t.to(device, dtype).detach().requires_grad_(name in differentiable)

    def convert(name, value):
        if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            return [move(name, t) for t in value]
        return move(name, value) if isinstance(value, torch.Tensor) else value

    return {name: convert(name, value) for name, value in inputs.items()}


def leaves(inputs: dict, differentiable: tuple[str, ...]) -> list[torch.Tensor]:
    """The differentiable tensors of ``inputs``, in order (lists flattened)."""
    out = []
    for name in differentiable:
        value = inputs[name]
        out += value if isinstance(value, list) else [value]
    return out


def output_and_grads(fn: Callable[..., torch.Tensor], inputs: dict, differentiable: tuple[str, ...],
                     grad_out: torch.Tensor) -> list[torch.Tensor]:
    """``fn``'s output and the gradients of ``(out * grad_out).sum()`` for every differentiable input."""
    out = fn(**inputs)
    grads = torch.autograd.grad(out, leaves(inputs, differentiable), grad_out.to(out.device, out.dtype))
    return [out, *grads]
