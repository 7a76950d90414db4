"""The label-smoothed loss's hand-written gradient against autograd through the plain formula."""

import pytest
import torch

from mma_nmt.training.loss import label_smoothed_cross_entropy


def formula(logits, target, epsilon, ignore_index):
    logp = torch.log_softmax(logits.double(), -1)
    keep = target != ignore_index
    nll = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].sum()
    return (1 - epsilon) * nll + epsilon * (-logp.mean(-1))[keep].sum(), nll


@pytest.mark.parametrize("ignore_index", [0, -100])
@pytest.mark.parametrize("weights", [(1.0, 0.0), (0.3, 2.0)])
def test_gradient_matches_autograd_of_the_formula(ignore_index, weights):
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 4, 7)).requires_grad_()
    target = torch.randint(1, 7, (3, 4))
    target[0, 2:] = ignore_index
    target[2, 3] = ignore_index
    loss, nll = label_smoothed_cross_entropy(logits, target, epsilon=0.1, ignore_index=ignore_index)
    (weights[0] * loss + weights[1] * nll).backward()
    got = logits.grad
    logits.grad = None
    ref_loss, ref_nll = formula(logits, target, 0.1, ignore_index)
    (weights[0] * ref_loss + weights[1] * ref_nll).backward()
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll.double(), ref_nll, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, logits.grad, rtol=1e-5, atol=1e-6)
    assert got[0, 2:].abs().max() == 0  # ignored positions get no gradient


def test_packed_positions_and_shape_check():
    torch.manual_seed(1)
    logits, target = torch.randn(2, 3, 5), torch.tensor([[1, 2, 0], [4, 0, 0]])
    keep = target != 0
    full = label_smoothed_cross_entropy(logits, target, epsilon=0.1, ignore_index=0)
    packed = label_smoothed_cross_entropy(logits[keep], target[keep], epsilon=0.1, ignore_index=0)
    torch.testing.assert_close(full, packed)
    with pytest.raises(ValueError, match="must agree"):
        label_smoothed_cross_entropy(logits, target[:, :2], epsilon=0.1, ignore_index=0)


@pytest.mark.parametrize("kind", ["transformer", "lstm"])
def test_output_mask_gives_the_logits_of_the_masked_positions(kind):
    from nmt_fixtures import random_batch, tiny_transformer

    from mma_nmt.models import build_model, preset

    torch.manual_seed(0)
    config = tiny_transformer() if kind == "transformer" else preset(
        "lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0)
    model = build_model(config).eval()
    src, lengths, prev, tgt = random_batch()
    tgt[1, 4:], tgt[2, 2:] = 0, 0  # target padding
    mask = tgt != 0
    full = model(src, lengths, prev)  # (B, T, V)
    torch.testing.assert_close(model(src, lengths, prev, output_mask=mask), full[mask])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_the_loss_is_float32_for_half_and_float32_logits_and_float64_for_float64_logits(dtype):
    """A float64 model (the exactness tests train some) keeps its loss and the logits' gradient in float64."""
    torch.manual_seed(2)
    logits = (3 * torch.randn(4, 6, dtype=torch.float64)).to(dtype).requires_grad_()
    target = torch.tensor([1, 5, 0, 3])
    loss, nll = label_smoothed_cross_entropy(logits, target, epsilon=0.1, ignore_index=0)
    loss.backward()
    wanted = torch.float64 if dtype == torch.float64 else torch.float32
    assert loss.dtype == nll.dtype == wanted and logits.grad.dtype == dtype
    if dtype == torch.float64:
        logits_again = logits.detach().clone().requires_grad_()
        ref_loss, ref_nll = formula(logits_again, target, 0.1, 0)
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss, rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(nll, ref_nll, rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(logits.grad, logits_again.grad, rtol=1e-12, atol=1e-14)
