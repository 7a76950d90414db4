"""Section "operators": each fused operator against its plain-PyTorch reference, forward and forward+backward,
float32, on the papers' shapes (rows from the per-operator scripts ``bench_*.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks import bench_gmm_attention, bench_luong_attention, bench_multihop, bench_multilayer_attention
from benchmarks.bench_attention import compare
from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.timing import pass_name

COLUMNS = ["operator / shape", "what", "pass", "reference ms", "fused ms", "reference / fused"]


@dataclass(frozen=True)
class Sizes:
    batch: int  # attention and MLMHA sentences
    attention: tuple  # (heads, length) pairs of mixed-head attention
    gmm_batch: int
    gmm_lengths: tuple
    mlmha: tuple  # (name, E, H)
    mlmha_lengths: tuple
    multihop: tuple  # (name, batch, length, E, H) shapes
    luong: tuple  # (name, batch, d_sm) shapes


_MULTIHOP = tuple((name, *dims) for name, dims in bench_multihop.SHAPES.items())
_LUONG = tuple((name, *dims) for name, dims in bench_luong_attention.SHAPES.items())
_WMT = ("WMT base (E=512, H=8)", *bench_multilayer_attention.SHAPES["WMT base (E=512, H=8)"])
SIZES = {
    "full": Sizes(batch=32, attention=((4, 16), (4, 64), (4, 256), (8, 16), (8, 64), (8, 128)), gmm_batch=32,
                  gmm_lengths=(16, 32, 64), mlmha=_WMT, mlmha_lengths=(32, 96), multihop=_MULTIHOP, luong=_LUONG),
    "quick": Sizes(batch=32, attention=((4, 64), (8, 128)), gmm_batch=32, gmm_lengths=(32,), mlmha=_WMT,
                   mlmha_lengths=(32,), multihop=_MULTIHOP[1:], luong=_LUONG[:1]),
    "tiny": Sizes(batch=2, attention=((4, 8),), gmm_batch=2, gmm_lengths=(8,), mlmha=("tiny (E=32, H=4)", 32, 4),
                  mlmha_lengths=(8,), multihop=(("tiny (E=32, H=4), 2x8 tokens", 2, 8, 32, 4),),
                  luong=(("tiny (B=2, d_sm=512)", 2, 512),)),
}
DESCRIPTION = (
    "Reference = the plain-PyTorch formula of SPEC (what `implementation=\"reference\"` runs); forward rows run under "
    "`torch.no_grad`. Shapes: mixed-head attention at batch {batch}, head size 64, 4 heads at lengths {a4} and 8 heads "
    "at {a8} (a subset of 16..512 that fits the time budget; `scaling` goes to 1024); GMM at batch {gb}, 8 heads, "
    "K = 4, lengths {gl}; MLMHA joint weights (M-00, M-01) with n = 4, {mn}, batch {batch}, lengths {ml}; "
    "the multi-hop and Luong shapes of their papers (see the `bench_multihop` and `bench_luong_attention` docstrings).")


def _attention_rows(sizes: Sizes, timing) -> list[list]:
    rows = []
    for heads, length in sizes.attention:
        for spec in ("global", "GLFB"):
            for backward in (False, True):
                t = compare(batch=sizes.batch, heads=heads, length=length, spec=spec, backward=backward,
                            contenders=("fused", "reference"), **timing)
                rows.append([f"attention B={sizes.batch} H={heads} T=S={length}", f"{spec} heads",
                             pass_name(backward), t["reference"] * 1e3, t["fused"] * 1e3, t["reference"] / t["fused"]])
    return rows


def _mlmha_rows(sizes: Sizes, timing) -> list[list]:
    name, embed, heads = sizes.mlmha
    rows = []
    for length in sizes.mlmha_lengths:
        for variant in ("M-00", "M-01"):
            rows += bench_multilayer_attention.rows_for(name, embed, heads, variant, 4, length, batch=sizes.batch,
                                                        arrangement=False, **timing)
    return rows


def _multihop_rows(sizes: Sizes, timing) -> list[list]:
    rows = []
    for name, *dims in sizes.multihop:
        whats = ("head gate op", "second hop (projections + gate)", "second hop + output projection")
        rows += bench_multihop.rows_for(name, *dims, whats=whats, **timing)
    return rows


def _luong_rows(sizes: Sizes, timing) -> list[list]:
    rows = []
    for name, *dims in sizes.luong:
        rows += bench_luong_attention.rows_for(name, *dims, whats=("step operator (T=1)", "attention layer, one step"),
                                               **timing)
    return rows


# target id -> rows of this section that measure it (by operator label and "what")
TARGET_ROWS = {
    "gmm": lambda row: row[1] == "gmm_attention op",
    "mlmha_joint": lambda row: row[1] == "attention core",
    "second_hop": lambda row: row[1] == "second hop (projections + gate)",
    "luong_step": lambda row: row[1] == "step operator (T=1)",
}


def run(profile: str) -> Section:
    sizes, timing = SIZES[profile], TIMING[profile].kwargs()
    section = Section("operators", "a. Each operator vs its plain-PyTorch reference", DESCRIPTION.format(
        batch=sizes.batch, a4=[t for h, t in sizes.attention if h == 4], a8=[t for h, t in sizes.attention if h == 8],
        gb=sizes.gmm_batch, gl=list(sizes.gmm_lengths), mn=sizes.mlmha[0], ml=list(sizes.mlmha_lengths)))
    parts = [
        ("Mixed-head attention (`attention`)", lambda: _attention_rows(sizes, timing)),
        ("GMM cross-attention (`gmm_attention`)", lambda: [
            row for length in sizes.gmm_lengths
            for row in bench_gmm_attention.speedup_rows_at(sizes.gmm_batch, length, **timing)]),
        ("MLMHA, joint weights (`multilayer_attention`)", lambda: _mlmha_rows(sizes, timing)),
        ("Multi-hop second hop (`multihop_second_hop`, `multihop_gate`)", lambda: _multihop_rows(sizes, timing)),
        ("Multi-head Luong attention, one decoder step (`shared_value_attention`)", lambda: _luong_rows(sizes, timing)),
    ]
    for title, make_rows in parts:
        rows = make_rows()
        section.tables.append(Table(title, COLUMNS, rows))
        for target, selects in TARGET_ROWS.items():
            for row in filter(selects, rows):
                section.figure(target, row[5], f"{row[0]}, {row[1]}, {row[2]}")
    return section
