"""Label-smoothed cross-entropy."""

from __future__ import annotations

import torch
from torch.nn import functional as F


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row ``(loss, nll)`` of label-smoothed cross-entropy with the gradient written in one pass.

    With ``p = softmax(logits)`` and the smoothed target ``q = (1 - eps) onehot(t) + eps / V``, the row loss
    ``-sum_c q_c log p_c`` has gradient ``p - q`` and the row nll ``-log p_t`` has ``p - onehot(t)``. Autograd through
    ``log_softmax``, ``gather`` and ``mean`` builds three dense (N, V) gradients and adds them; this builds one. Only
    the log-probabilities are saved, as for ``log_softmax``."""

    @staticmethod
    def forward(ctx, logits, target, keep, epsilon: float):
        log_probs = F.log_softmax(logits, dim=-1)  # (N, V)
        nll = -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        uniform = -log_probs.mean(dim=-1)  # (N,)
        zero = log_probs.new_zeros(())
        nll = torch.where(keep, nll, zero)
        uniform = torch.where(keep, uniform, zero)
        ctx.save_for_backward(log_probs, target, keep)
        ctx.epsilon = epsilon
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        log_probs, target, keep = ctx.saved_tensors
        eps = ctx.epsilon
        grad_loss = log_probs.new_zeros(keep.shape) if grad_loss is None else grad_loss
        grad_nll = log_probs.new_zeros(keep.shape) if grad_nll is None else grad_nll
        row = torch.where(keep, grad_loss + grad_nll, 0.0)  # (N,) weight of p in the gradient
        grad = torch.exp(log_probs).mul_(row.unsqueeze(1))  # (N, V)
        grad.sub_((eps / log_probs.shape[1]) * torch.where(keep, grad_loss, 0.0).unsqueeze(1))
        on_target = torch.where(keep, (1.0 - eps) * grad_loss + grad_nll, 0.0)  # (N,)
        grad.scatter_add_(1, target.unsqueeze(1), -on_target.unsqueeze(1))
        return grad, None, None, None


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, epsilon: float,
                                 ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed losses over the non-ignored target tokens.

    logits (..., V), target (...) (e.g. (B, T, V) and (B, T), or only the real positions (N, V) and (N,)). The
    smoothed target puts ``1 - epsilon`` on the reference token and spreads ``epsilon`` uniformly over the whole
    vocabulary. Returns ``(loss, nll)``, both summed (divide by the token count), computed in float32, or in
    float64 for float64 logits.
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits (..., V) and target (...) must agree, got {tuple(logits.shape)} and "
                         f"{tuple(target.shape)}")
    flat = target.reshape(-1)
    keep = flat != ignore_index
    rows = (logits if logits.dtype == torch.float64 else logits.float()).reshape(-1, logits.shape[-1])  # (N, V)
    loss, nll = _SmoothedCrossEntropy.apply(rows, flat.clamp(min=0), keep, float(epsilon))
    return loss.sum(), nll.sum()
