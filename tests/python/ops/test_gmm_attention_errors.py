"""Bad calls of ``mma_nmt::gmm_attention`` and ``mma_nmt::gmm_attention_backward`` (direct calls included, which autograd
never makes) and of the functional API raise errors that name the argument and what was expected."""

from __future__ import annotations

import pytest
import torch

from gmm_cases import Shape
from gmm_cases import make_inputs as make_gmm_inputs
from mma_nmt.ops import gmm_attention
from mma_nmt.reference import gmm_attention_reference

FORWARD = torch.ops.mma_nmt.gmm_attention.default
BACKWARD = torch.ops.mma_nmt.gmm_attention_backward.default


def _good(local=True):
    i = make_gmm_inputs(Shape(), local=local, dtype=torch.float32)
    t = {n: (x.detach() if isinstance(x, torch.Tensor) else x) for n, x in i.items()}
    return dict(q=t["q"], k=t["k"], v=t["v"], key_lengths=t["key_lengths"], omega=t["omega"], mu=t["mu"],
                sigma=t["sigma"], gate=t["gate"], local_center=t.get("local_center"),
                local_width=t.get("local_width"), scale=0.35, normalization=1, sigma_floor=1e-2, return_weights=False)


def _good_backward():
    args = _good()
    out, lse, log_mass, alpha_context, beta_context, _, _ = FORWARD(*args.values())
    return dict(grad_out=torch.randn_like(out), q=args["q"], k=args["k"], v=args["v"],
                key_lengths=args["key_lengths"], omega=args["omega"], mu=args["mu"], sigma=args["sigma"],
                gate=args["gate"], local_center=args["local_center"], local_width=args["local_width"], lse=lse,
                log_mass=log_mass, alpha_context=alpha_context, beta_context=beta_context, scale=0.35,
                normalization=1, sigma_floor=1e-2)


META = dict(device="meta")
F64 = dict(dtype=torch.float64)

# Shapes of _good(): B=2, H=2, T=5, S=7, D=8, Dv=6, K=2, key_lengths (7, 3).
FORWARD_BAD = [
    (dict(q=torch.zeros(())), "q must have shape"),
    (dict(q=torch.zeros(2, 2, 5, 8, 1)), "q must have shape"),
    (dict(v=torch.zeros(2, 2, 7)), "v must have shape"),
    (dict(omega=torch.zeros(2, 2, 5, 2, 1)), "omega must have shape"),
    (dict(gate=torch.zeros(2, 2, 5, 1)), "gate must have shape"),
    (dict(local_width=torch.zeros(2, 2)), "local_width must have shape"),
    (dict(k=torch.zeros(3, 2, 7, 8)), "k must have shape"),
    (dict(v=torch.zeros(2, 3, 7, 6)), "v must have shape"),
    (dict(v=torch.zeros(2, 2, 6, 6)), "v must have shape"),
    (dict(omega=torch.zeros(2, 2, 5, 0), mu=torch.zeros(2, 2, 5, 0), sigma=torch.zeros(2, 2, 5, 0)), "omega"),
    (dict(omega=torch.zeros(2, 2, 4, 2)), "omega must have shape"),
    (dict(omega=torch.zeros(2, 1, 5, 2)), "omega must have shape"),
    (dict(mu=torch.zeros(2, 2, 5, 1)), "mu must have shape"),
    (dict(gate=torch.zeros(1, 2, 5)), "gate must have shape"),
    (dict(local_center=torch.zeros(2, 2, 4)), "local_center must have shape"),
    (dict(local_width=None), "local_center and local_width"),
    (dict(local_center=None), "local_center and local_width"),
    (dict(v=torch.zeros(2, 2, 7, 6, **F64)), "v must have dtype"),
    (dict(omega=torch.zeros(2, 2, 5, 2, **F64)), "omega must have dtype"),
    (dict(mu=torch.zeros(2, 2, 5, 2, dtype=torch.int64)), "mu must have dtype"),
    (dict(gate=torch.zeros(2, 2, 5, **F64)), "gate must have dtype"),
    (dict(local_width=torch.zeros(2, 2, 5, **F64)), "local_width must have dtype"),
    (dict(q=torch.zeros(2, 2, 5, 8, dtype=torch.int64)), "floating-point"),
    (dict(q=torch.zeros(2, 2, 5, 8, dtype=torch.bfloat16)), "k must have dtype"),
    # the mixture may be float32 beside half-precision q, k and v (CUDA autocast), no other dtype than q's
    (dict(q=torch.zeros(2, 2, 5, 8, **F64), k=torch.zeros(2, 2, 7, 8, **F64), v=torch.zeros(2, 2, 7, 6, **F64)),
     "omega must have dtype Double like q, got Float"),
    (dict(q=torch.zeros(2, 2, 5, 8, dtype=torch.bfloat16), k=torch.zeros(2, 2, 7, 8, dtype=torch.bfloat16),
          v=torch.zeros(2, 2, 7, 6, dtype=torch.bfloat16), omega=torch.zeros(2, 2, 5, 2, **F64)),
     "omega must have dtype BFloat16 like q or Float"),
    (dict(q=torch.zeros(2, 2, 5, 8, dtype=torch.bfloat16), k=torch.zeros(2, 2, 7, 8, dtype=torch.bfloat16),
          v=torch.zeros(2, 2, 7, 6, dtype=torch.bfloat16), gate=torch.zeros(2, 2, 5, dtype=torch.bfloat16)),
     "gate must have dtype Float like omega"),
    (dict(k=torch.zeros(2, 2, 7, 8, **META)), "k is on meta"),
    (dict(mu=torch.zeros(2, 2, 5, 2, **META)), "mu is on meta"),
    (dict(gate=torch.zeros(2, 2, 5, **META)), "gate is on meta"),
    (dict(local_center=torch.zeros(2, 2, 5, **META)), "local_center is on meta"),
    (dict(key_lengths=torch.tensor([7, 3], **META)), "key_lengths is on meta"),
    (dict(key_lengths=torch.tensor([-1, 3])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([2**63 - 1, 3])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([7, 3], dtype=torch.int32)), "key_lengths must be int64"),
    (dict(key_lengths=torch.tensor([7])), "key_lengths must have shape"),
    (dict(key_lengths=torch.tensor(7)), "key_lengths must have shape"),
    (dict(scale=0.0), "scale must be positive"),
    (dict(scale=float("nan")), "scale must be positive"),
    (dict(normalization=3), "normalization must be"),
    (dict(normalization=-1), "normalization must be"),
    (dict(sigma_floor=-1e-2), "sigma_floor must be positive"),
    (dict(sigma_floor=float("inf")), "sigma_floor must be positive"),
]


@pytest.mark.parametrize("changes, match", FORWARD_BAD)
def test_forward_rejects_bad_input(changes, match):
    args = {**_good(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        FORWARD(*args.values())


def test_functional_api_rejects_bad_padding_and_meta_lengths():
    args = _good()
    tensors = {n: args[n] for n in ("q", "k", "v", "omega", "mu", "sigma", "gate")}
    with pytest.raises(ValueError, match="either"):
        gmm_attention(**tensors, key_lengths=args["key_lengths"], key_padding_mask=torch.zeros(2, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        gmm_attention(**tensors, key_padding_mask=torch.tensor([[False, True] * 3 + [False]] * 2))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(batch, key_len\) = \(2, 7\)"):
        gmm_attention(**tensors, key_padding_mask=torch.zeros(2, 6, dtype=torch.bool))  # regression: was accepted
    with pytest.raises(ValueError, match="key_padding_mask is on meta"):
        gmm_attention(**tensors, key_padding_mask=torch.zeros(2, 7, dtype=torch.bool, device="meta"))
    with pytest.raises(TypeError, match="key_lengths"):
        gmm_attention(**tensors, key_lengths=torch.tensor([7.0, 3.0]))


def test_backward_accepts_good_arguments_and_matches_reference_gradients():
    args = _good_backward()
    grads = BACKWARD(*args.values())
    names = ("q", "k", "v", "omega", "mu", "sigma", "gate", "local_center", "local_width")
    leaves = {n: args[n].double().requires_grad_() for n in names}
    out, _, _, _ = gmm_attention_reference(**leaves, key_lengths=args["key_lengths"], normalization="strict",
                                           sigma_floor=1e-2, scale=0.35)
    want = torch.autograd.grad(out, list(leaves.values()), args["grad_out"].double())
    for name, got, expected in zip(names, grads, want):
        torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


BACKWARD_BAD = [
    (dict(grad_out=torch.zeros(2, 2, 5)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 2, 5, 8)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 2, 5, 6, **F64)), "grad_out must have dtype"),
    (dict(grad_out=torch.zeros(2, 2, 5, 6, **META)), "grad_out is on meta"),
    (dict(lse=torch.zeros(2, 2)), "lse must have shape"),
    (dict(lse=torch.zeros(2, 2, 5, **F64)), "lse must have dtype"),
    (dict(lse=torch.zeros(2, 2, 5, **META)), "lse is on meta"),
    (dict(log_mass=torch.zeros(2, 2, 4)), "log_mass must have shape"),
    (dict(log_mass=torch.zeros(2, 2, 5, **META)), "log_mass is on meta"),
    (dict(alpha_context=torch.zeros(2, 2, 5, 5)), "alpha_context must have shape"),
    (dict(alpha_context=torch.zeros(2, 2, 5, 6, **META)), "alpha_context is on meta"),
    (dict(beta_context=torch.zeros(2, 2, 5, 6, dtype=torch.int64)), "beta_context must have dtype"),
    (dict(beta_context=torch.zeros(2, 2, 5)), "beta_context must have shape"),
    (dict(q=torch.zeros(2, 2, 5)), "q must have shape"),
    (dict(k=torch.zeros(2, 2, 7, 7)), "k must have shape"),
    (dict(omega=torch.zeros(2, 2, 5, 3)), "must have shape"),
    (dict(sigma=torch.zeros(2, 2, 5, 2, **META)), "sigma is on meta"),
    (dict(gate=torch.zeros(2, 2, 6)), "gate must have shape"),
    (dict(local_center=None), "local_center and local_width"),
    (dict(key_lengths=torch.tensor([8, 3])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([-5, 3])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([7, 3], **META)), "key_lengths is on meta"),
    (dict(scale=-1.0), "scale must be positive"),
    (dict(normalization=7), "normalization must be"),
    (dict(sigma_floor=0.0), "sigma_floor must be positive"),
]


@pytest.mark.parametrize("changes, match", BACKWARD_BAD)
def test_backward_rejects_bad_input(changes, match):
    args = {**_good_backward(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        BACKWARD(*args.values())
