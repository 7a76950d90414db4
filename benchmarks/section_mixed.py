"""Section "mixed": fused mixed-head attention (GLFB, all local, all global heads) against what a user would write
instead: ``scaled_dot_product_attention`` with the equivalent boolean mask, FlexAttention through ``torch.compile``
(forward only: no CPU backward), and the plain-PyTorch reference."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks import flex
from benchmarks.bench_attention import SPECS, compare
from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.timing import pass_name

COLUMNS = ["heads", "T=S", "head kinds", "pass", "fused ms", "SDPA+mask / fused", "Flex / fused", "reference / fused"]


@dataclass(frozen=True)
class Sizes:
    batch: int
    shapes: tuple  # (heads, length)
    flex_shape: tuple | None  # the one (heads, length) FlexAttention is compiled for (one compile per shape)
    flex_timeout: float  # seconds allowed for its first compile


SIZES = {
    "full": Sizes(batch=32, shapes=((4, 64), (4, 128), (4, 256), (8, 128)), flex_shape=(4, 128), flex_timeout=240.0),
    "quick": Sizes(batch=32, shapes=((4, 128),), flex_shape=(4, 128), flex_timeout=60.0),
    "tiny": Sizes(batch=2, shapes=((4, 16),), flex_shape=None, flex_timeout=0.0),
}


def _flex_status(sizes: Sizes) -> tuple[bool, str]:
    if sizes.flex_shape is None:
        return False, "FlexAttention: not run in this profile."
    heads, length = sizes.flex_shape
    usable, what = flex.warm_up(sizes.batch, heads, length, 64, timeout=sizes.flex_timeout)
    return usable, f"FlexAttention (B={sizes.batch}, H={heads}, T={length}, forward): {what}."


def run(profile: str) -> Section:
    sizes, timing = SIZES[profile], TIMING[profile].kwargs()
    section = Section("mixed", "b. Mixed-head attention vs SDPA with a mask, FlexAttention and the reference", (
        f"Batch {sizes.batch}, head size 64, window 1, key lengths drawn in [T/2, T]. GLFB = a quarter each of "
        "global, local, forward and backward heads. SDPA gets the (B, H, T, S) boolean mask of the same visibility "
        "(built once, outside the timing). FlexAttention gets the same rule as a `mask_mod` and a block mask (built "
        "once); it runs forward only because torch has no FlexAttention backward on CPU, and only at one shape "
        "because every shape is a separate inductor compile."))
    flex_ok, flex_note = _flex_status(sizes)
    rows = []
    for heads, length in sizes.shapes:
        for spec in SPECS:
            for backward in (False, True):
                with_flex = flex_ok and not backward and (heads, length) == sizes.flex_shape
                contenders = ("fused", "sdpa", "flex", "reference") if with_flex else ("fused", "sdpa", "reference")
                t = compare(batch=sizes.batch, heads=heads, length=length, spec=spec, backward=backward,
                            contenders=contenders, **timing)
                rows.append([heads, length, spec, pass_name(backward), t["fused"] * 1e3, t["sdpa"] / t["fused"],
                             t["flex"] / t["fused"] if "flex" in t else "-", t["reference"] / t["fused"]])
                if spec == "GLFB" and backward and length == 128:
                    section.figure("mixed_vs_sdpa", t["sdpa"] / t["fused"], f"B={sizes.batch} H={heads} T=S=128")
    section.tables.append(Table("Ratios > 1: the fused operator is faster", COLUMNS, rows, flex_note))
    return section
