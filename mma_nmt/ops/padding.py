"""Key padding given either as per-sentence lengths or as a boolean mask (SPEC, shared rules)."""

from __future__ import annotations

import torch

from mma_nmt.ops.argument_checks import check_optional_tensor


def lengths_from_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Converts a ``(batch, key_len)`` boolean mask (True = padding) into int64 lengths.

    The fused kernels take lengths, so padding must be a suffix of each row; a mask with holes raises ``ValueError``.
    That check reads the mask's values. Under ``torch.compile`` it must not stop the graph (``fullgraph=True`` refused
    the data-dependent ``torch.equal``), and on a GPU it must not make the host wait for the device (issue 48, point
    2: a training step never waits for the host). So there, and for any mask not on the CPU, it runs as
    ``torch._assert_async``: a ``RuntimeError`` with the same message when compiled code runs on the CPU, a
    device-side assertion on a GPU (the CUDA error names the assertion; the process cannot go on using the GPU).
    An eager mask on the CPU gets the ``ValueError``.
    """
    lengths, right_padded = _lengths_and_their_mask(key_padding_mask)
    if torch.compiler.is_compiling() or key_padding_mask.device.type != "cpu":
        torch._assert_async(torch.eq(right_padded, key_padding_mask).all(), _NOT_RIGHT_PADDED)
    elif not torch.equal(right_padded, key_padding_mask):
        raise ValueError(_NOT_RIGHT_PADDED)
    return lengths


def right_padding_lengths(key_padding_mask: torch.Tensor) -> torch.Tensor | None:
    """The int64 lengths a ``(batch, key_len)`` boolean mask (True = padding) stands for when it marks padding only at
    the end of each row; None for a mask with holes. It reads the mask's values, so on a GPU the host waits for them
    (eager callers that must tell the two apart, like ``nn.MultiheadAttention``'s ``key_padding_mask``)."""
    lengths, right_padded = _lengths_and_their_mask(key_padding_mask)
    return lengths if torch.equal(right_padded, key_padding_mask) else None


def _lengths_and_their_mask(key_padding_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lengths (B,) int64: the real keys of each row, the (B, S) right-padding mask those lengths stand for)."""
    if key_padding_mask.dim() != 2 or key_padding_mask.dtype != torch.bool:
        raise ValueError(
            "key_padding_mask must be a (batch, key_len) bool tensor with True at padding, got "
            f"dtype {key_padding_mask.dtype} and shape {tuple(key_padding_mask.shape)}"
        )
    lengths = (~key_padding_mask).sum(dim=-1)  # (B,) int64
    positions = torch.arange(key_padding_mask.shape[-1], device=key_padding_mask.device)  # (S,)
    return lengths, positions.unsqueeze(0) >= lengths.unsqueeze(1)  # (B, S)


_NOT_RIGHT_PADDED = "key_padding_mask must mark padding only at the end of each row (right padding)"


def check_padding_mask_shape(op: str, key_padding_mask: torch.Tensor | None, batch: int, key_len: int) -> None:
    """A mask of another shape than (batch, key_len) would give lengths that fit the keys by chance, or that the
    operator then reports as ``key_lengths``: name the mask instead."""
    check_optional_tensor(op, "key_padding_mask", key_padding_mask, "a (batch, key_len) bool tensor")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, key_len):
        raise ValueError(f"{op}: key_padding_mask must have shape (batch, key_len) = {(batch, key_len)}, "
                         f"got {tuple(key_padding_mask.shape)}")


def resolve_key_lengths(
    key_lengths: torch.Tensor | None, key_padding_mask: torch.Tensor | None, device: torch.device, *,
    keys: tuple[int, int] | None = None, op: str = "",
) -> torch.Tensor | None:
    """One int64 length tensor on ``device`` from whichever form of padding was given (or None for no padding).

    ``keys`` = (batch, key_len) of the keys the padding belongs to: a mask of another shape raises ``ValueError``
    naming ``op`` and ``key_padding_mask`` (the modules pass it; a mask narrower than the keys would otherwise read as
    lengths that leave the last keys out or count them as padding)."""
    if (key_padding_mask is None and isinstance(key_lengths, torch.Tensor) and key_lengths.dtype == torch.int64
            and key_lengths.device == device):
        # The common call (a module's own lengths, at every call of an operator): what every check below passes and
        # returns, without their host time, which each layer of a model paid again at every decoding step.
        return key_lengths
    where = op or "key padding"
    check_optional_tensor(where, "key_lengths", key_lengths, "a (batch,) int64 tensor")
    check_optional_tensor(where, "key_padding_mask", key_padding_mask, "a (batch, key_len) bool tensor")
    if keys is not None:
        check_padding_mask_shape(op, key_padding_mask, *keys)
    if key_lengths is not None and key_padding_mask is not None:
        raise ValueError("give key padding either as key_lengths or as key_padding_mask, not both")
    for name, tensor in (("key_lengths", key_lengths), ("key_padding_mask", key_padding_mask)):
        if tensor is not None and tensor.is_meta != (torch.device(device).type == "meta"):
            # Lengths are copied to q's device, but a meta tensor has no values to copy (and q's values none to use).
            raise ValueError(f"{name} is on {tensor.device} but q is on {device}")
    if key_padding_mask is not None:
        key_lengths = lengths_from_padding_mask(key_padding_mask)
    if key_lengths is None:
        return None
    if key_lengths.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"key_lengths must be an integer tensor, got {key_lengths.dtype}")
    return key_lengths.to(device=device, dtype=torch.int64)


def operator_key_lengths(op: str, q: torch.Tensor, k: torch.Tensor, key_lengths: torch.Tensor | None,
                         key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The ``key_lengths`` argument of operator ``op`` (``"mma_nmt.attention"``) with queries ``q`` (B, H, T, D) and
    per-head keys ``k`` (B, H, S, D): :func:`resolve_key_lengths` on ``q``'s device, a mask checked against (B, S)
    first. With ``q`` or ``k`` of another rank the operator itself then names that tensor."""
    if q.dim() == 4 and k.dim() == 4:
        check_padding_mask_shape(op, key_padding_mask, q.shape[0], k.shape[2])
    return resolve_key_lengths(key_lengths, key_padding_mask, q.device, op=op)


def padding_mask_from_lengths(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``(batch, max_len)`` bool mask, True at padding."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(1)
