"""Attention maps as PNG files (matplotlib, Agg backend): decoder cross-attention and encoder self-attention heads."""

from __future__ import annotations

from pathlib import Path

import torch

from mma_nmt.ops.head_spec import format_head_spec


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cross_attention(weights: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str], path: str | Path,
                         title: str = "") -> Path:
    """weights (T, S): target rows over source columns."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1 + 0.35 * len(src_pieces), 1 + 0.35 * len(tgt_pieces)))
    ax.imshow(weights.float().cpu().numpy(), cmap="Blues", vmin=0.0, aspect="auto")
    ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90, fontsize=7)
    ax.set_yticks(range(len(tgt_pieces)), tgt_pieces, fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def plot_self_attention_heads(weights: torch.Tensor, pieces: list[str], head_names: str, path: str | Path,
                              title: str = "") -> Path:
    """weights (H, S, S): one panel per head, labelled with its kind letter (G, L, F, B)."""
    plt = _pyplot()
    heads = weights.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(2.6 * heads, 2.8), squeeze=False)
    for h, ax in enumerate(axes[0]):
        ax.imshow(weights[h].float().cpu().numpy(), cmap="Blues", vmin=0.0)
        ax.set_title(f"head {h} ({head_names[h]})", fontsize=8)
        ax.set_xticks(range(len(pieces)), pieces, rotation=90, fontsize=5)
        ax.set_yticks(range(len(pieces)), pieces, fontsize=5)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


@torch.no_grad()
def write_attention_maps(model, src_ids: torch.Tensor, hyp_ids: list[int], *, src_tokenizer, tgt_tokenizer,
                         out_dir: str | Path, name: str) -> list[Path]:
    """Teacher-forces ``hyp_ids`` on ``src_ids`` (1-d, no specials) and draws the last decoder layer's cross-attention
    (mean over heads) and, for a Transformer, the last encoder layer's self-attention heads."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    src = src_ids.view(1, -1).to(device)
    lengths = torch.tensor([src.shape[1]], device=device)
    prev = torch.tensor([[tgt_tokenizer.bos_id] + list(hyp_ids)], device=device)
    encoder_out = model.encode(src, lengths, need_weights=True)
    _, cross = model.decode(prev, encoder_out, need_weights=True)
    src_pieces = [src_tokenizer.id_to_piece(i) for i in src_ids.tolist()]
    tgt_pieces = [tgt_tokenizer.id_to_piece(i) for i in hyp_ids] + ["</s>"]
    last = cross[-1][0]
    last = last.mean(dim=0) if last.dim() == 3 else last  # (H, T, S) -> (T, S)
    paths = [plot_cross_attention(last, src_pieces, tgt_pieces[: last.shape[0]], out_dir / f"{name}_cross.png",
                                  title=f"{name}: cross-attention, last decoder layer")]
    self_keys = sorted((k for k in encoder_out.extra if k.startswith("self_attn.")), key=lambda k: int(k[10:]))
    if self_keys:
        weights = encoder_out.extra[self_keys[-1]][0]  # (H, S, S)
        kinds = getattr(model.encoder_layers[-1].self_attn, "head_kinds", None)
        names = format_head_spec(kinds) if kinds else "?" * weights.shape[0]
        paths.append(plot_self_attention_heads(weights, src_pieces, names, out_dir / f"{name}_encoder.png",
                                               title=f"{name}: encoder self-attention, last layer"))
    return paths
