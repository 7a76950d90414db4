"""Fingerprints of every operator's forward and backward results on fixed inputs, for refactors that must leave the
outputs bit-identical: run it before and after, then compare.

    python scripts/operator_fingerprints.py > before.txt   # ... change the code, rebuild ...
    python scripts/operator_fingerprints.py > after.txt && diff before.txt after.txt

Each line is ``<case> <output index> <shape> <sha256 of the raw bytes>``. The operators are called directly
(``torch.ops.mma_nmt.*``, forward and backward ops), on the CPU, in float32 and float64, with padding, a length-1
sentence, T != S and odd head sizes, so that both the kernels and the argument handling of the Python layer are
covered (the last cases go through the ``mma_nmt.ops`` functions and autograd).
"""

from __future__ import annotations

import hashlib

import torch

import mma_nmt  # noqa: F401  (registers the operators)
from mma_nmt import ops

OPS = torch.ops.mma_nmt


def fingerprint(name: str, outputs) -> None:
    flat = []
    for item in outputs if isinstance(outputs, (tuple, list)) else [outputs]:
        flat.extend(item if isinstance(item, (tuple, list)) else [item])
    for index, tensor in enumerate(flat):
        if tensor is None:
            print(f"{name} {index} None")
            continue
        data = tensor.detach().contiguous().cpu()
        digest = hashlib.sha256(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"").hexdigest()
        print(f"{name} {index} {tuple(data.shape)} {str(data.dtype).removeprefix('torch.')} {digest[:16]}")


def randn(*shape, dtype):
    return torch.randn(*shape, dtype=dtype)


def attention_cases(dtype) -> None:
    batch, heads, query_len, key_len, dim = 3, 4, 7, 9, 13
    q, k, v = (randn(batch, heads, n, dim, dtype=dtype) for n in (query_len, key_len, key_len))
    lengths = torch.tensor([9, 1, 5])
    for kinds in ([0, 1, 2, 3], [4, 4, 4, 4], [0, 0, 0, 0]):
        args = (lengths, kinds, 2, 0.3, 0, 0.0, 0)
        out, lse, probs = OPS.attention(q, k, v, *args, True)
        fingerprint(f"attention{kinds}-{dtype}", (out, lse, probs))
        grad = randn(*out.shape, dtype=dtype)
        fingerprint(f"attention_backward{kinds}-{dtype}", OPS.attention_backward(grad, q, k, v, out, lse, *args))
    out, lse, _ = OPS.attention(q, k, v, lengths, [0, 1, 2, 3], 1, 0.3, 0, 0.25, 1234, False)
    fingerprint(f"attention_dropout-{dtype}", (out, lse))


def gmm_cases(dtype) -> None:
    batch, heads, query_len, key_len, dim, comps = 2, 3, 5, 8, 11, 3
    q, k, v = (randn(batch, heads, n, dim, dtype=dtype) for n in (query_len, key_len, key_len))
    lengths = torch.tensor([8, 1])
    omega = torch.softmax(randn(batch, heads, query_len, comps, dtype=dtype), -1)
    mu = torch.rand(batch, heads, query_len, comps, dtype=dtype) * 8
    sigma = torch.rand(batch, heads, query_len, comps, dtype=dtype) * 2 + 0.1
    gate = torch.rand(batch, heads, query_len, dtype=dtype)
    center = torch.rand(batch, heads, query_len, dtype=dtype) * 8
    width = torch.rand(batch, heads, query_len, dtype=dtype) + 0.5
    for normalization in (0, 1, 2):
        for local in (False, True):
            c, w = (center, width) if local else (None, None)
            outs = OPS.gmm_attention(q, k, v, lengths, omega, mu, sigma, gate, c, w, 0.3, normalization, 1e-2, True)
            name = f"gmm[{normalization},{local}]-{dtype}"
            fingerprint(name, outs)
            out, lse, log_mass, alpha_context, beta_context = outs[:5]
            grad = randn(*out.shape, dtype=dtype)
            fingerprint(f"{name}_backward", OPS.gmm_attention_backward(
                grad, q, k, v, lengths, omega, mu, sigma, gate, c, w, lse, log_mass, alpha_context, beta_context,
                0.3, normalization, 1e-2))


def multihop_cases(dtype) -> None:
    batch, heads, length, hop, value, dim = 2, 4, 5, 6, 7, 9
    query_proj, head_proj = (randn(batch, heads, length, hop, dtype=dtype) for _ in range(2))
    value_proj = randn(batch, heads, length, value, dtype=dtype)
    v_b = randn(hop, dtype=dtype)
    out, gate = OPS.multihop_gate(query_proj, head_proj, value_proj, v_b)
    fingerprint(f"multihop_gate-{dtype}", (out, gate))
    grads = (randn(*out.shape, dtype=dtype), randn(*gate.shape, dtype=dtype))
    fingerprint(f"multihop_gate_backward-{dtype}",
                OPS.multihop_gate_backward(*grads, query_proj, head_proj, value_proj, v_b, gate))
    q, a = (randn(batch, heads, length, dim, dtype=dtype) for _ in range(2))
    w_b, u_b, v_b = randn(hop, dim, dtype=dtype), randn(heads, hop, dim, dtype=dtype), randn(hop, dtype=dtype)
    for u_c in (randn(heads, value, dim, dtype=dtype), None):
        out, gate, hidden = OPS.multihop_second_hop(q, a, w_b, u_b, u_c, v_b)
        name = f"second_hop[{u_c is not None}]-{dtype}"
        fingerprint(name, (out, gate, hidden))
        grads = (randn(*out.shape, dtype=dtype), randn(*gate.shape, dtype=dtype))
        fingerprint(f"{name}_backward",
                    OPS.multihop_second_hop_backward(*grads, q, a, w_b, u_b, u_c, v_b, gate, hidden))


def shared_value_cases(dtype) -> None:
    batch, heads, query_len, key_len, dim, value = 3, 5, 1, 7, 10, 6
    q, k = randn(batch, heads, query_len, dim, dtype=dtype), randn(batch, heads, key_len, dim, dtype=dtype)
    v = randn(batch, key_len, value, dtype=dtype)
    lengths = torch.tensor([7, 1, 4])
    out, lse, probs = OPS.shared_value_attention(q, k, v, lengths, 0.5, True)
    fingerprint(f"shared_value-{dtype}", (out, lse, probs))
    grad = randn(*out.shape, dtype=dtype)
    fingerprint(f"shared_value_backward-{dtype}",
                OPS.shared_value_attention_backward(grad, q, k, v, out, lse, lengths, 0.5))


def multilayer_cases(dtype) -> None:
    batch, query_len, key_len, heads, dim, layers = 2, 4, 6, 3, 5, 3
    q = [randn(batch, query_len, heads * dim, dtype=dtype) for _ in range(layers)]
    k = [randn(batch, key_len, heads * dim, dtype=dtype) for _ in range(layers)]
    lengths = torch.tensor([6, 1])
    for layer_specific, sets in ((False, 1), (False, layers), (True, layers)):
        v = [randn(batch, key_len, heads * dim, dtype=dtype) for _ in range(sets)]
        out, lse, probs = OPS.multilayer_attention(q, k, v, lengths, heads, 0.4, layer_specific, True)
        name = f"multilayer[{layer_specific},{sets}]-{dtype}"
        fingerprint(name, (out, lse, probs))
        grad = randn(*out.shape, dtype=dtype)
        fingerprint(f"{name}_backward", OPS.multilayer_attention_backward(
            grad, q, k, v, out, lse, probs, lengths, heads, 0.4, layer_specific))


def functional_cases() -> None:
    """Through the Python functions and autograd (argument handling, padding masks, saved tensors)."""
    dtype = torch.float64
    q, k, v = (randn(2, 4, n, 8, dtype=dtype).requires_grad_() for n in (5, 6, 6))
    mask = torch.tensor([[False] * 6, [False] + [True] * 5])
    result = ops.fused_attention(q, k, v, head_kinds="GLFB", key_padding_mask=mask, window=1)
    result.out.sum().backward()
    fingerprint("fused_attention_autograd", (result.out, q.grad, k.grad, v.grad))
    q.grad = k.grad = v.grad = None
    comps = 2
    omega = torch.softmax(randn(2, 4, 5, comps, dtype=dtype), -1).requires_grad_()
    mu = (torch.rand(2, 4, 5, comps, dtype=dtype) * 6).requires_grad_()
    sigma = (torch.rand(2, 4, 5, comps, dtype=dtype) + 0.2).requires_grad_()
    gate = torch.rand(2, 4, 5, dtype=dtype).requires_grad_()
    result = ops.gmm_attention(q, k, v, omega=omega, mu=mu, sigma=sigma, gate=gate, key_padding_mask=mask)
    result.out.sum().backward()
    fingerprint("gmm_attention_autograd", (result.out, q.grad, k.grad, v.grad, omega.grad, mu.grad, sigma.grad,
                                           gate.grad))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for dtype in (torch.float32, torch.float64):
        attention_cases(dtype)
        gmm_cases(dtype)
        multihop_cases(dtype)
        shared_value_cases(dtype)
        multilayer_cases(dtype)
    functional_cases()


if __name__ == "__main__":
    main()
