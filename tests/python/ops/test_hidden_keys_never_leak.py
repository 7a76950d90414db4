"""A key that a query row cannot see never touches that row (issue 50, case 12): a NaN planted in q, k or v where some
rows cannot see it leaves those rows' outputs, log-sum-exps and gradients exactly as without the NaN, in every CPU
kernel build. Before the fix the CPU attention kernels multiplied a row's zero weights by the values of the whole
4-row register block (0 * NaN = NaN): a causal head's row 4 got NaN from v[5].

Which outputs may change is computed from the visibility mask, never from the kernel: a planted key touches the rows
that see it; a planted query row only itself. A gradient of keys and values may change at the keys that a touched row
sees (their sums include that row's NaN); every other key's gradient, and every other row's grad_q, must not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from conftest import cpu_kernel_builds
from gmm_cases import Shape, make_inputs
from mma_nmt.ops import fused_attention, gmm_attention, multilayer_attention, shared_value_attention
from mma_nmt.ops.head_spec import parse_head_spec
from mma_nmt.reference.attention import visibility_mask

BATCH, QUERIES, KEYS = 2, 37, 37
LENGTHS = torch.tensor([KEYS, 29])  # sentence 1's keys 29.. are padding
WINDOW = 2


@dataclass
class Planted:
    """Where the NaN goes and what it may touch: ``rows`` (B, H, T) the query rows whose outputs may change, ``keys``
    (B, H, S) the keys whose gradients may change."""
    tensor: str
    index: tuple
    rows: torch.Tensor
    keys: torch.Tensor


def _plant(inputs: dict, planted: Planted) -> dict:
    poisoned = dict(inputs)
    poisoned[planted.tensor] = inputs[planted.tensor].detach().clone()
    poisoned[planted.tensor][planted.index] = float("nan")
    return poisoned


def _run(op: Callable, inputs: dict, grad_names: tuple[str, ...]):
    leaves = {name: t.detach().clone().requires_grad_() if name in grad_names else t for name, t in inputs.items()}
    out, lse = op(**leaves)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    grads = torch.autograd.grad(out, [leaves[n] for n in grad_names], grad_out)
    return out.detach(), lse.detach(), dict(zip(grad_names, grads))


def _assert_untouched(got: torch.Tensor, want: torch.Tensor, may_change: torch.Tensor, what: str):
    """Elements outside ``may_change`` (broadcast over trailing feature dims) are not NaN and bit-equal to ``want``
    (an lse is -inf in a row that sees no key)."""
    keep = ~may_change
    while keep.dim() < got.dim():
        keep = keep.unsqueeze(-1)
    keep = keep.expand_as(got)
    assert not torch.isnan(got[keep]).any(), f"{what}: a NaN reached {int((torch.isnan(got) & keep).sum())} " \
                                             f"element(s) that cannot see it"
    torch.testing.assert_close(got[keep], want[keep], rtol=0, atol=0, msg=lambda m: f"{what}: {m}")


def _check_planted(op, inputs, planted: Planted, grads: dict[str, str]):
    """``grads`` maps each differentiable input to what its gradient is indexed by: "rows" or "keys"."""
    clean = _run(op, inputs, tuple(grads))
    poisoned = _run(op, _plant(inputs, planted), tuple(grads))
    where = f"NaN at {planted.tensor}{list(planted.index)}"
    _assert_untouched(poisoned[0], clean[0], planted.rows, f"{where}: out")
    _assert_untouched(poisoned[1], clean[1], planted.rows, f"{where}: lse")
    for name, by in grads.items():
        may_change = planted.rows if by == "rows" else planted.keys
        _assert_untouched(poisoned[2][name], clean[2][name], may_change, f"{where}: grad_{name}")


def _touched_by_key(visible: torch.Tensor, b: int, j: int) -> Planted:
    """What a NaN at key j of sentence b (every head) may touch, for visibility (B, H, T, S)."""
    rows = torch.zeros(visible.shape[:3], dtype=torch.bool)
    rows[b] = visible[b, :, :, j]
    return rows, (visible & rows.unsqueeze(-1)).any(dim=2)


def _touched_by_query(visible: torch.Tensor, b: int, i: int) -> Planted:
    rows = torch.zeros(visible.shape[:3], dtype=torch.bool)
    rows[b, :, i] = True
    return rows, (visible & rows.unsqueeze(-1)).any(dim=2)


def _plantings(visible: torch.Tensor, keys: tuple[str, ...], key_dims: dict[str, int]) -> list[Planted]:
    """NaN at a few keys of sentence 1 (before, inside and past a 16-row block; one in the padding) in each of
    ``keys``, and in one query row. ``key_dims`` gives, per tensor, the number of leading dims before the position."""
    plantings = []
    for name in keys:
        for j in (5, 16, 22, 31):
            rows, touched = _touched_by_key(visible, 1, j)
            index = (1, slice(None), j) if key_dims[name] == 2 else (1, j)
            plantings.append(Planted(name, index, rows, touched))
    rows, touched = _touched_by_query(visible, 1, 20)
    plantings.append(Planted("q", (1, slice(None), 20), rows, touched))
    return plantings


def _randn(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("isa", cpu_kernel_builds())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", ["G", "L", "F", "B", "C", "GLFBC"])
def test_attention_rows_never_see_a_hidden_nan(spec, dtype, isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    heads = len(spec)
    kinds = parse_head_spec(spec, heads)
    visible = visibility_mask(kinds, QUERIES, KEYS, window=WINDOW, key_lengths=LENGTHS, batch=BATCH)
    inputs = {"q": _randn(BATCH, heads, QUERIES, 8, dtype=dtype, seed=0),
              "k": _randn(BATCH, heads, KEYS, 8, dtype=dtype, seed=1),
              "v": _randn(BATCH, heads, KEYS, 6, dtype=dtype, seed=2)}

    def op(q, k, v):
        result = fused_attention(q, k, v, head_kinds=spec, key_lengths=LENGTHS, window=WINDOW)
        return result.out, result.lse

    for planted in _plantings(visible, ("k", "v"), {"k": 2, "v": 2}):
        _check_planted(op, inputs, planted, {"q": "rows", "k": "keys", "v": "keys"})


def _padding_visibility(heads: int) -> torch.Tensor:
    return visibility_mask([0] * heads, QUERIES, KEYS, window=0, key_lengths=LENGTHS, batch=BATCH)


@pytest.mark.parametrize("isa", cpu_kernel_builds())
@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_value_rows_never_see_a_padding_nan(dtype, isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    inputs = {"q": _randn(BATCH, 2, QUERIES, 8, dtype=dtype, seed=0), "k": _randn(BATCH, 2, KEYS, 8, dtype=dtype, seed=1),
              "v": _randn(BATCH, KEYS, 6, dtype=dtype, seed=2)}

    def op(q, k, v):
        result = shared_value_attention(q, k, v, key_lengths=LENGTHS)
        return result.out, result.lse

    visible = _padding_visibility(2)
    for planted in _plantings(visible, ("k", "v"), {"k": 2, "v": 1}):
        _check_planted(op, inputs, planted, {"q": "rows", "k": "keys"})
        # grad_v (B, S, Dv) sums the heads: it may change at a key that a touched row of any head sees
        clean = _run(op, inputs, ("v",))[2]["v"]
        poisoned = _run(op, _plant(inputs, planted), ("v",))[2]["v"]
        _assert_untouched(poisoned, clean, planted.keys.any(dim=1), f"NaN at {planted.tensor}{list(planted.index)}: grad_v")


@pytest.mark.parametrize("isa", cpu_kernel_builds())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("local", [False, True])
def test_gmm_rows_never_see_a_padding_nan(local, dtype, isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    shape = Shape(batch=BATCH, heads=2, query_len=QUERIES, key_len=KEYS, head_dim=8, value_dim=6,
                  lengths=tuple(LENGTHS.tolist()))
    options = make_inputs(shape, local=local, dtype=dtype)
    inputs = {"q": options.pop("q"), "k": options.pop("k"), "v": options.pop("v")}
    options = {name: t.detach() if isinstance(t, torch.Tensor) else t for name, t in options.items()}

    def op(q, k, v):
        result = gmm_attention(q, k, v, **options)
        return result.out, result.lse if hasattr(result, "lse") else result.out

    for planted in _plantings(_padding_visibility(2), ("k", "v"), {"k": 2, "v": 2}):
        _check_planted(op, inputs, planted, {"q": "rows", "k": "keys", "v": "keys"})


@pytest.mark.parametrize("isa", cpu_kernel_builds())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer_specific", [False, True])
def test_multilayer_rows_never_see_a_padding_nan(layer_specific, dtype, isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    heads, width = 2, 16  # E = heads x 8
    inputs = {"q": _randn(BATCH, QUERIES, width, dtype=dtype, seed=0), "k": _randn(BATCH, KEYS, width, dtype=dtype, seed=1),
              "v": _randn(BATCH, KEYS, width, dtype=dtype, seed=2), "q2": _randn(BATCH, QUERIES, width, dtype=dtype, seed=3),
              "k2": _randn(BATCH, KEYS, width, dtype=dtype, seed=4), "v2": _randn(BATCH, KEYS, width, dtype=dtype, seed=5)}

    def op(q, k, v, q2, k2, v2):
        result = multilayer_attention([q, q2], [k, k2], [v, v2] if layer_specific else [v + v2], num_heads=heads,
                                      key_lengths=LENGTHS, layer_specific=layer_specific)
        return result.out, result.lse

    # Outputs are (B, T, ...) and lse (B, heads', T): a padding NaN touches no row, a query NaN only its own row.
    visible = _padding_visibility(1)
    for planted in _plantings(visible, ("k", "v", "k2"), {"k": 1, "v": 1, "k2": 1}):
        rows = planted.rows[:, 0]  # (B, T)
        keys = planted.keys[:, 0]  # (B, S)
        index = (1, planted.index[-1]) if planted.tensor != "q" else (1, 20)
        clean = _run(op, inputs, ("q", "k", "v", "k2"))
        poisoned = _run(op, _plant(inputs, Planted(planted.tensor, index, rows, keys)), ("q", "k", "v", "k2"))
        where = f"NaN at {planted.tensor}{list(index)}"
        _assert_untouched(poisoned[0], clean[0], rows, f"{where}: out")
        lse_rows = rows.unsqueeze(1).expand(-1, poisoned[1].shape[1], -1)
        _assert_untouched(poisoned[1], clean[1], lse_rows, f"{where}: lse")
        _assert_untouched(poisoned[2]["q"], clean[2]["q"], rows, f"{where}: grad_q")
        for name in ("k", "v", "k2"):
            _assert_untouched(poisoned[2][name], clean[2][name], keys, f"{where}: grad_{name}")
