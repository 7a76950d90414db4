"""CUDA section "attention": fused attention against what a GPU user would use instead.

- Global heads, no padding: ``scaled_dot_product_attention`` restricted to the flash kernel (float16/bfloat16 only;
  flash takes no mask).
- Global and mixed GLFB heads with key padding: SDPA given the equivalent (B, H, T, S) boolean mask (torch picks the
  kernel, memory-efficient where it can), FlexAttention through ``torch.compile`` with the same rule as a block mask
  (forward and backward on CUDA).
- The whole layer (projections included): ``MixedMultiheadAttention`` (fused) against ``nn.MultiheadAttention``
  (global heads: ``key_padding_mask``; GLFB: a per-head float mask).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.flex import mask_mod_for
from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.timing import pass_name, time_interleaved, timed_call
from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention
from mma_nmt.ops import fused_attention, parse_head_spec
from mma_nmt.reference import visibility_mask

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
COLUMNS = ["heads", "shape", "dtype", "pass", "fused ms", "contender", "contender ms", "contender / fused"]


@dataclass(frozen=True)
class Sizes:
    batch: int
    shapes: tuple  # (heads, length)
    head_dim: int = 64


SIZES = {"full": Sizes(32, ((8, 128), (8, 512), (16, 1024))), "quick": Sizes(32, ((8, 128),)),
         "tiny": Sizes(2, ((4, 16),))}
_flex = None


def compiled_flex():
    global _flex
    if _flex is None:
        from torch.nn.attention.flex_attention import flex_attention
        _flex = torch.compile(flex_attention, dynamic=False)
    return _flex


def contenders(spec: str, q, k, v, lengths, dtype) -> dict:
    """name -> call returning the (B, H, T, Dv) output, for the core attention of one shape."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, heads, length, _ = q.shape
    kinds = parse_head_spec(spec, heads)
    mask = visibility_mask(kinds, length, length, window=1, key_lengths=lengths, batch=batch, device=q.device)
    block_mask = create_block_mask(mask_mod_for(kinds, 1, lengths), batch, heads, length, length,
                                   device=str(q.device))
    calls = {"fused": lambda: fused_attention(q, k, v, head_kinds=kinds, key_lengths=lengths, window=1,
                                              self_attention=True).out,  # T = S: the encoder's self-attention
             "SDPA+mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
             "Flex": lambda: compiled_flex()(q, k, v, block_mask=block_mask)}
    if spec == "G" and dtype != torch.float32 and bool((lengths == length).all()):
        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)
        calls["SDPA-flash"] = flash
    return calls


def layer_contenders(spec: str, batch: int, heads: int, length: int, head_dim: int, dtype, device: str = "cuda"
                     ) -> tuple[dict, list]:
    """The whole attention layer: fused module vs nn.MultiheadAttention with the same visibility."""
    embed = heads * head_dim
    x = torch.randn(batch, length, embed, device=device, dtype=dtype, requires_grad=True)
    lengths = torch.randint(length // 2, length + 1, (batch,), device=device)
    lengths[0] = length
    padding = torch.arange(length, device=device) >= lengths[:, None]  # (B, S)
    fused = MixedMultiheadAttention(MixedAttentionConfig(embed, heads, head_spec=spec)).to(device, dtype)
    torch_mha = torch.nn.MultiheadAttention(embed, heads, batch_first=True).to(device, dtype)
    kinds = parse_head_spec(spec, heads)
    visible = visibility_mask(kinds, length, length, window=1, key_lengths=lengths, batch=batch, device=device)
    float_mask = torch.zeros(visible.shape, device=device, dtype=dtype).masked_fill(~visible, float("-inf"))
    float_mask = float_mask.reshape(batch * heads, length, length)  # (B*H, T, S), nn.MultiheadAttention's layout
    calls = {"fused": lambda: fused(x, key_lengths=lengths)[0],
             "nn.MultiheadAttention": (lambda: torch_mha(x, x, x, key_padding_mask=padding, need_weights=False)[0])
             if spec == "G" else (lambda: torch_mha(x, x, x, attn_mask=float_mask, need_weights=False)[0])}
    return calls, [x, *fused.parameters(), *torch_mha.parameters()]


def timed_rows(label, shape, dtype, calls, leaves, timing, section, spec) -> list[list]:
    rows = []
    names = [n for n in calls if n != "fused"]
    for backward in (False, True):
        seconds = time_interleaved([timed_call(calls[n], backward, leaves) for n in ["fused", *names]],
                                   synchronize=torch.cuda.synchronize, **timing)
        fused_s = seconds[0]
        for name, other in zip(names, seconds[1:]):
            ratio = other / fused_s
            where = f"{label} {shape} {str(dtype).removeprefix('torch.')} {pass_name(backward)}"
            rows.append([label, shape, str(dtype).removeprefix("torch."), pass_name(backward), fused_s * 1e3, name,
                         other * 1e3, ratio])
            if name == "SDPA-flash":
                section.figure("cuda_global_vs_flash", ratio, where)
            if name == "Flex" and spec == "GLFB" and backward:
                section.figure("cuda_mixed_vs_flex", ratio, where)
    return rows


def run(profile: str) -> Section:
    sizes, timing = SIZES[profile], TIMING[profile].kwargs()
    section = Section("attention", "b. Attention vs SDPA (flash, with a mask), FlexAttention, nn.MultiheadAttention",
                      __doc__.split("\n\n", 1)[1].strip())
    core, layer = [], []
    for heads, length in sizes.shapes:
        for spec in ("G", "GLFB"):
            for dtype in DTYPES:
                shape = f"B={sizes.batch} H={heads} T=S={length}"
                q, k, v = (torch.randn(sizes.batch, heads, length, sizes.head_dim, device="cuda", dtype=dtype,
                                       requires_grad=True) for _ in range(3))
                full = torch.full((sizes.batch,), length, device="cuda")
                padded = torch.randint(length // 2, length + 1, (sizes.batch,), device="cuda")
                for lengths in ((full, padded) if spec == "G" else (padded,)):
                    calls = contenders(spec, q, k, v, lengths, dtype)
                    label = f"{spec}" + (" no padding" if lengths is full else "")
                    core += timed_rows(label, shape, dtype, calls, [q, k, v], timing, section, spec)
                calls, leaves = layer_contenders(spec, sizes.batch, heads, length, sizes.head_dim, dtype)
                layer += timed_rows(spec, shape, dtype, calls, leaves, timing, section, spec)
    section.tables.append(Table("Core attention; contender / fused > 1: the fused operator is faster", COLUMNS, core))
    section.tables.append(Table("Whole layer with projections", COLUMNS, layer))
    return section
