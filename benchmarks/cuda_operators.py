"""CUDA section "operators": every fused operator against its plain-PyTorch reference on the GPU, forward and
forward+backward, in float16, bfloat16 and float32, at the shapes of the CPU suite's section a."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.timing import pass_name, time_interleaved, timed_call
from mma_nmt.ops import (fused_attention, gmm_attention, multihop_gate, multihop_second_hop, multilayer_attention,
                         parse_head_spec, shared_value_attention)
from mma_nmt.reference import (attention_reference, gmm_attention_reference, head_gate_reference,
                               multilayer_attention_op_reference, second_hop_reference,
                               shared_value_attention_reference)

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
COLUMNS = ["operator", "shape", "dtype", "pass", "reference ms", "fused ms", "reference / fused"]


@dataclass(frozen=True)
class OperatorCase:
    """``make(device, dtype)`` returns (fused call, reference call, differentiable leaves); each call returns the
    differentiable output."""

    operator: str
    shape: str
    make: Callable[[str, torch.dtype], tuple[Callable, Callable, list[torch.Tensor]]]


def _leaf(*shape: int, device: str, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=device, dtype=dtype) * scale).requires_grad_()


def _lengths(batch: int, length: int, device: str) -> torch.Tensor:
    lengths = torch.randint(length // 2, length + 1, (batch,), device=device)
    lengths[0] = length
    return lengths


def attention_case(spec: str, batch: int, heads: int, length: int, head_dim: int = 64) -> OperatorCase:
    def make(device, dtype):
        q, k, v = (_leaf(batch, heads, length, head_dim, device=device, dtype=dtype) for _ in range(3))
        options = dict(head_kinds=parse_head_spec(spec, heads), key_lengths=_lengths(batch, length, device), window=1)
        return (lambda: fused_attention(q, k, v, **options, self_attention=True).out,  # encoder self-attention
                lambda: attention_reference(q, k, v, **options)[0], [q, k, v])
    return OperatorCase("attention", f"{spec} B={batch} H={heads} T=S={length}", make)


def gmm_case(batch: int, heads: int, length: int, components: int = 4, head_dim: int = 64, *,
             queries: int | None = None, head_views: bool = False) -> OperatorCase:
    """GMM cross-attention over ``length`` keys, from ``queries`` rows (``length`` unless given: 1 is a decoder
    step). ``head_views``: q, k and v as the GMM module hands them, head views of a (B, T, H D) query projection and
    of one (B, S, 2 H D) key/value projection, taken anew in each call (as a module takes them; a view made once would
    put its autograd node outside a CUDA-graph capture), else contiguous (B, H, L, D) leaves."""
    queries = length if queries is None else queries

    def make(device, dtype):
        rows = (batch, heads, queries)
        if head_views:
            query = _leaf(batch, queries, heads * head_dim, device=device, dtype=dtype)
            memory = _leaf(batch, length, 2 * heads * head_dim, device=device, dtype=dtype)

            def inputs():
                q = query.view(batch, queries, heads, head_dim).transpose(1, 2)  # (B, H, T, D) views
                k, v = (x.view(batch, length, heads, head_dim).transpose(1, 2) for x in memory.chunk(2, dim=-1))
                return q, k, v
            leaves = [query, memory]
        else:
            qkv = (_leaf(*rows, head_dim, device=device, dtype=dtype),
                   *(_leaf(batch, heads, length, head_dim, device=device, dtype=dtype) for _ in range(2)))
            inputs, leaves = (lambda: qkv), list(qkv)
        mixture = dict(omega=(torch.rand(*rows, components, device=device, dtype=dtype) + 0.1).requires_grad_(),
                       mu=(torch.rand(*rows, components, device=device, dtype=dtype) * length).requires_grad_(),
                       sigma=(torch.rand(*rows, components, device=device, dtype=dtype) * 3 + 0.5).requires_grad_(),
                       gate=torch.rand(*rows, device=device, dtype=dtype).requires_grad_())
        options = dict(key_lengths=_lengths(batch, length, device), **mixture)
        return (lambda: gmm_attention(*inputs(), **options).out,
                lambda: gmm_attention_reference(*inputs(), **options)[0], [*leaves, *mixture.values()])
    sizes = f"T=S={length}" if queries == length else f"T={queries} S={length}"
    return OperatorCase("gmm_attention", f"B={batch} H={heads} {sizes} K={components}"
                        + (" head views" if head_views else ""), make)


def shared_value_case(batch: int, hidden: int = 1024, heads: int = 4, source: int = 30) -> OperatorCase:
    def make(device, dtype):
        q = _leaf(batch, heads, 1, hidden, device=device, dtype=dtype, scale=hidden ** -0.5)
        k = _leaf(batch, heads, source, hidden, device=device, dtype=dtype)
        v = _leaf(batch, source, hidden, device=device, dtype=dtype)
        options = dict(key_lengths=_lengths(batch, source, device))
        return (lambda: shared_value_attention(q, k, v, **options).out,
                lambda: shared_value_attention_reference(q, k, v, **options)[0], [q, k, v])
    return OperatorCase("shared_value_attention", f"step B={batch} H={heads} S={source} d={hidden}", make)


def second_hop_case(batch: int, length: int, embed: int, heads: int) -> OperatorCase:
    def make(device, dtype):
        dim = embed // heads
        q, a = (_leaf(batch, heads, length, dim, device=device, dtype=dtype) for _ in range(2))
        w_b = _leaf(dim, dim, device=device, dtype=dtype, scale=dim ** -0.5)
        u_b, u_c = (_leaf(heads, dim, dim, device=device, dtype=dtype, scale=dim ** -0.5) for _ in range(2))
        v_b = _leaf(dim, device=device, dtype=dtype)
        return (lambda: multihop_second_hop(q, a, w_b, u_b, u_c, v_b).out,
                lambda: second_hop_reference(q, a, w_b, v_b, u_b, u_c)[0], [q, a, w_b, u_b, u_c, v_b])
    return OperatorCase("multihop_second_hop", f"B={batch} T={length} E={embed} H={heads}", make)


def head_gate_case(batch: int, length: int, embed: int, heads: int) -> OperatorCase:
    def make(device, dtype):
        dim = embed // heads
        query, head = (_leaf(batch, heads, length, dim, device=device, dtype=dtype) for _ in range(2))
        value = _leaf(batch, heads, length, dim, device=device, dtype=dtype)
        v_b = _leaf(dim, device=device, dtype=dtype)
        return (lambda: multihop_gate(query, head, value, v_b).out,
                lambda: head_gate_reference(query, head, value, v_b)[0], [query, head, value, v_b])
    return OperatorCase("multihop_gate", f"B={batch} T={length} E={embed} H={heads}", make)


def multilayer_case(batch: int, length: int, embed: int, heads: int, layers: int = 4) -> OperatorCase:
    def make(device, dtype):
        q = [_leaf(batch, length, embed, device=device, dtype=dtype) for _ in range(layers)]
        k = [_leaf(batch, length, embed, device=device, dtype=dtype) for _ in range(layers)]
        v = [_leaf(batch, length, embed, device=device, dtype=dtype)]
        options = dict(num_heads=heads, key_lengths=_lengths(batch, length, device),
                       scale=1 / math.sqrt(embed // heads))
        return (lambda: multilayer_attention(q, k, v, **options).out,
                lambda: multilayer_attention_op_reference(q, k, v, **options)[0], [*q, *k, *v])
    return OperatorCase("multilayer_attention", f"M-00 n={layers} B={batch} T=S={length} E={embed} H={heads}", make)


CASES = {
    "full": (attention_case("G", 32, 8, 128), attention_case("GLFB", 32, 8, 128), attention_case("GLFB", 32, 8, 512),
             gmm_case(32, 8, 64), shared_value_case(128), head_gate_case(128, 32, 512, 8),
             second_hop_case(128, 32, 512, 8), multilayer_case(32, 96, 512, 8)),
    "quick": (attention_case("GLFB", 32, 8, 128), gmm_case(32, 8, 64), shared_value_case(128),
              head_gate_case(128, 32, 512, 8), second_hop_case(128, 32, 512, 8), multilayer_case(32, 32, 512, 8)),
    "tiny": (attention_case("GLFB", 2, 4, 16), gmm_case(2, 2, 8), shared_value_case(2, hidden=64),
             head_gate_case(2, 8, 32, 4), second_hop_case(2, 8, 32, 4), multilayer_case(2, 8, 32, 4, layers=2)),
}


def case_rows(case: OperatorCase, dtype: torch.dtype, timing: dict, section: Section) -> list[list]:
    fused, reference, leaves = case.make("cuda", dtype)
    rows = []
    for backward in (False, True):
        t_fused, t_reference = time_interleaved([timed_call(fused, backward, leaves),
                                                 timed_call(reference, backward, leaves)],
                                                synchronize=torch.cuda.synchronize, **timing)
        ratio = t_reference / t_fused
        rows.append([case.operator, case.shape, str(dtype).removeprefix("torch."), pass_name(backward),
                     t_reference * 1e3, t_fused * 1e3, ratio])
        section.figure("cuda_vs_reference", ratio, f"{case.operator} {case.shape} {rows[-1][2]} {rows[-1][3]}")
    return rows


def run(profile: str) -> Section:
    timing = TIMING[profile].kwargs()
    section = Section("operators", "a. Each operator vs its plain-PyTorch reference on the GPU", (
        "Reference = the plain-PyTorch formula of SPEC on the same GPU tensors; forward rows run under "
        "`torch.no_grad`. Key lengths drawn in [T/2, T]. Every timing waits for the GPU (`torch.cuda.synchronize`)."))
    rows = [row for case in CASES[profile] for dtype in DTYPES for row in case_rows(case, dtype, timing, section)]
    section.tables.append(Table("Ratios > 1: the fused operator is faster", COLUMNS, rows))
    return section
