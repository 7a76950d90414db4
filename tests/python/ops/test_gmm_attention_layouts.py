"""``mma_nmt::gmm_attention`` on the layouts the GMM module hands it: q a head view of its (B, T, E) projection, k and v
head views of one fused (B, S, 2E) projection. The kernels read them in place and write out position-major (merging the
heads is then a view) and the gradients of q, k and v laid out like them (the projections' backward reads them without
a copy), as `attention` does (csrc/common/head_layout.h). The results equal those of contiguous inputs exactly."""

from __future__ import annotations

import pytest
import torch

from gmm_cases import Shape, grads_of, make_inputs
from mma_nmt.modules.heads import merge_heads
from mma_nmt.ops import gmm_attention

SHAPE = Shape(batch=3, heads=2, query_len=5, key_len=9, head_dim=4, value_dim=4, components=3, lengths=(9, 1, 6))
COPIES = {"aten::copy_", "aten::clone", "aten::contiguous"}


def head_view_of_projection(x: torch.Tensor, sets: int, which: int) -> torch.Tensor:
    """(B, H, L, D) ``x`` as set ``which`` of a (B, L, sets * H * D) projection's head views; NaN in the other sets, so
    that a kernel reading past its rows fails the comparison."""
    batch, heads, length, dim = x.shape
    projection = torch.full((batch, length, sets * heads * dim), float("nan"), dtype=x.dtype)
    view = projection[..., which * heads * dim:(which + 1) * heads * dim].view(batch, length, heads, dim).transpose(1, 2)
    view.copy_(x.detach())
    return view


def module_layouts(inputs: dict) -> dict:
    """The same values as the module lays them out (leaves of their own, so that their gradients can be read)."""
    q = head_view_of_projection(inputs["q"], 1, 0).detach().requires_grad_()
    k = head_view_of_projection(inputs["k"], 2, 0).detach().requires_grad_()
    v = head_view_of_projection(inputs["v"], 2, 1).detach().requires_grad_()
    return {**inputs, "q": q, "k": k, "v": v}


def is_position_major(x: torch.Tensor) -> bool:
    return x.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("normalization", ["approximate", "strict"])
def test_head_views_give_the_results_of_contiguous_inputs_in_the_kernels_layouts(normalization, local):
    dense = make_inputs(SHAPE, normalization=normalization, local=local, seed=5)
    views = module_layouts(dense)
    assert not views["k"].is_contiguous() and not views["q"].is_contiguous()
    out_dense = gmm_attention(**dense).out
    out_views = gmm_attention(**views).out
    assert torch.equal(out_views, out_dense)
    assert is_position_major(out_views) and is_position_major(out_dense)
    assert merge_heads(out_views).data_ptr() == out_views.data_ptr()  # merging the heads is a view
    grad_out = torch.randn(out_dense.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads_dense = grads_of(out_dense, dense, grad_out)
    grads_views = grads_of(out_views, views, grad_out)
    for name, grad in grads_dense.items():
        assert torch.equal(grads_views[name], grad), name
    # laid out like the input: q's head view is dense (its own strides), k's and v's are not (position-major)
    assert grads_views["q"].stride() == views["q"].stride()
    assert is_position_major(grads_views["k"]) and is_position_major(grads_views["v"])
    for name in ("q", "k", "v"):
        assert grads_dense[name].is_contiguous(), name


def copies_inside(fn, operator: str) -> list[str]:
    """The copies that ``operator``'s kernel makes while ``fn`` runs (profiled ATen ops nested in its call)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()

    def inside(event) -> bool:
        parent = event.cpu_parent
        while parent is not None and parent.name != operator:
            parent = parent.cpu_parent
        return parent is not None

    events = profile.events()
    assert any(event.name == operator for event in events), f"{operator} did not run"
    return [event.name for event in events if event.name in COPIES and inside(event)]


def test_the_operator_copies_nothing_on_the_modules_layouts():
    views = module_layouts(make_inputs(SHAPE, seed=3))
    holder = {}

    def forward():
        holder["out"] = gmm_attention(**views).out

    assert copies_inside(forward, "mma_nmt::gmm_attention") == []
    grad_out = merge_heads(torch.randn_like(holder["out"]))  # (B, T, E): the gradient out_proj's backward hands on
    grad_heads = grad_out.view(SHAPE.batch, SHAPE.query_len, SHAPE.heads, -1).transpose(1, 2)
    assert copies_inside(lambda: holder["out"].backward(grad_heads), "mma_nmt::gmm_attention_backward") == []


def test_rows_that_are_not_contiguous_are_copied_once_and_counted():
    """The profiler sees the kernels' own copies: a q whose rows are strided (every other element) must be copied."""
    inputs = make_inputs(SHAPE, seed=4)
    wide = torch.zeros(*inputs["q"].shape[:-1], 2 * SHAPE.head_dim, dtype=torch.float64)
    strided_q = wide[..., ::2]
    strided_q.copy_(inputs["q"].detach())
    with torch.no_grad():
        copies = copies_inside(lambda: gmm_attention(**{**inputs, "q": strided_q}), "mma_nmt::gmm_attention")
    assert copies, "the profiler did not see the copy of q's strided rows"
