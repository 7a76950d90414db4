"""Runs mixed multi-head self-attention (head spec GLFB) on a real batch of Multi30k sentences, checks the fused operator
against the plain-PyTorch reference on it, and draws each head's mask and weights.

    python -m mma_nmt.demos.mixed_attention_maps --out runs/mma_demo

The projections are freshly initialised (no training): the picture shows what each head kind may see and how the
weights spread inside that mask. Trained maps come from the training pipeline.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import math
import os
import re
from pathlib import Path

import torch

from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention
from mma_nmt.ops import format_head_spec, padding_mask_from_lengths
from mma_nmt.reference import visibility_mask


def find_multi30k() -> Path:
    candidates = [Path(os.environ["MMA_NMT_DATA_DIR"])] if "MMA_NMT_DATA_DIR" in os.environ else []
    candidates += [Path.cwd().parent / "shared" / "data", Path(__file__).resolve().parents[3] / "shared" / "data"]
    for base in candidates:
        if (base / "multi30k" / "val.de.gz").is_file():
            return base / "multi30k"
    raise FileNotFoundError(f"Multi30k not found under any of {[str(c) for c in candidates]}; set MMA_NMT_DATA_DIR")


def read_sentences(path: Path, count: int) -> list[list[str]]:
    """First `count` lines, split into words and punctuation."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [re.findall(r"\w+|[^\w\s]", next(lines)) for _ in range(count)]


def embed(sentences: list[list[str]], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random word embeddings plus sinusoidal positions: (B, S, dim) and lengths (B,)."""
    vocab = {w: i for i, w in enumerate(sorted({w for s in sentences for w in s}))}
    table = torch.randn(len(vocab), dim)
    lengths = torch.tensor([len(s) for s in sentences])
    x = torch.zeros(len(sentences), int(lengths.max()), dim)
    position = torch.arange(x.shape[1]).unsqueeze(1)  # (S, 1)
    freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
    pe = torch.zeros(x.shape[1], dim)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * freq), torch.cos(position * freq)
    for b, words in enumerate(sentences):
        x[b, : len(words)] = table[[vocab[w] for w in words]] + pe[: len(words)]
    return x, lengths


def draw(words: list[str], kinds: list[int], window: int, weights: torch.Tensor, path: Path) -> None:
    """Row 1: each head's mask; row 2: its weights on sentence `words`. `weights` is (H, T, T)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(words)
    masks = visibility_mask(kinds, n, n, window=window)[0]  # (H, T, S)
    heads = len(kinds)
    fig, axes = plt.subplots(2, heads, figsize=(3.2 * heads, 6.6), squeeze=False)
    for h in range(heads):
        for row, (image, title) in enumerate(((masks[h].float(), "mask"), (weights[h], "weights"))):
            ax = axes[row][h]
            ax.imshow(image.numpy(), cmap="viridis", vmin=0)
            ax.set_title(f"head {h} ({format_head_spec([kinds[h]])}): {title}", fontsize=9)
            ax.set_xticks(range(n), words, rotation=90, fontsize=6)
            ax.set_yticks(range(n), words, fontsize=6)
    fig.suptitle("Mixed multi-head self-attention on a Multi30k sentence (untrained projections)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/mma_demo"))
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--head-spec", default="GLFB")
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    sentences = read_sentences(find_multi30k() / "val.de.gz", args.sentences)
    x, lengths = embed(sentences, args.dim)
    x = x.double().requires_grad_()
    config = MixedAttentionConfig(embed_dim=args.dim, num_heads=len(args.head_spec), head_spec=args.head_spec,
                                  window=args.window)
    fused = MixedMultiheadAttention(config).double()
    reference = copy.deepcopy(fused)
    reference.config = MixedAttentionConfig(**{**config.__dict__, "implementation": "reference"})
    pad = padding_mask_from_lengths(lengths, x.shape[1])
    out_f, w_f = fused(x, key_padding_mask=pad, need_weights=True)
    out_r, w_r = reference(x, key_padding_mask=pad, need_weights=True)
    (grad_f,) = torch.autograd.grad(out_f.square().sum(), x)
    (grad_r,) = torch.autograd.grad(out_r.square().sum(), x)
    report = {"sentences": len(sentences), "max_len": int(lengths.max()),
              "max_abs_diff_output": (out_f - out_r).abs().max().item(),
              "max_abs_diff_weights": (w_f - w_r).abs().max().item(),
              "max_abs_diff_input_grad": (grad_f - grad_r).abs().max().item()}
    for key, value in report.items():
        print(f"{key}: {value}")
    if max(report[k] for k in report if k.startswith("max_abs")) > 1e-9:
        raise SystemExit("fused and reference attention disagree")
    args.out.mkdir(parents=True, exist_ok=True)
    longest = int(lengths.argmax())
    n = int(lengths[longest])
    path = args.out / "mma_heads.png"
    draw(sentences[longest], fused.head_kinds, args.window, w_f[longest, :, :n, :n].detach().float(), path)
    print(f"fused matches reference; wrote {path}")
    return report


if __name__ == "__main__":
    main()
