"""A training step never waits for the device (issue 48, point 2), checked without a GPU: the step runs on the meta
device, where every read of a tensor's values on the host fails (``.item()``, ``float(t)``, ``torch.equal``, a boolean
index's ``nonzero``, ``.cpu()``), as a sync on a GPU would. The fused operators' meta kernels stand in for their CUDA
kernels, which read key lengths on the device only (``csrc/common/checks.cpp``); the CPU kernels read them on the host,
so the CPU cannot show this. The same step on a GPU under ``torch.cuda.set_sync_debug_mode("error")`` is the CUDA test
at the end.

What waits for the host, and stays (docs/models_training.md): the token counts, read from the batch before it is moved
to the device; the trainer's one read per update of (loss, nll, tokens, gradient norm) for its bad-step rules, after
forward, backward and clipping are queued. The LSTM encoder packs its sentences by lengths on the host (cuDNN), so the
trainer leaves a batch's ``src_lengths`` there for it (``host_fields``): on the meta device, lengths moved off the host
fail it (``test_the_lstm_given_lengths_off_the_host_reads_them_back``).
"""

from __future__ import annotations

import pytest
import torch

from mma_nmt.data.batch import Batch
from mma_nmt.models import build_model, preset
from mma_nmt.ops.padding import lengths_from_padding_mask
from mma_nmt.training.distributed import DistInfo
from mma_nmt.training.trainer import forward_backward, host_fields
from nmt_fixtures import random_batch, tiny_mma_mlmha_transformer, tiny_transformer


def _mma_glfb():
    config = tiny_transformer(dropout=0.1)
    config.encoder.attention = "mma"  # mixed G/L/F/B heads
    return config


def _multihop_gmm():
    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.attention = "multihop"
    config.encoder.multihop_layers = [1]
    config.decoder.cross_attention = "gmm"
    return config


def _lstm(implementation: str = "fused"):
    return preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, layers=2, heads=2, dropout=0.1,
                  implementation=implementation)


MODELS = {"mma": _mma_glfb, "multihop+gmm": _multihop_gmm, "mma+mlmha": tiny_mma_mlmha_transformer,
          "lstm": _lstm, "lstm reference": lambda: _lstm("reference")}


def _host_batch() -> Batch:
    src, lengths, prev, tgt = random_batch(batch=3, src_len=7, tgt_len=6, seed=2)
    tgt[1:, 4:] = 0  # padded targets: the positions a boolean index would drop
    prev[1:, 5:] = 0
    return Batch(src=src, src_lengths=lengths, tgt_in=prev, tgt_out=tgt, tgt_lengths=(tgt != 0).sum(1),
                 indices=torch.arange(3))


@pytest.mark.parametrize("name", MODELS)
def test_forward_backward_clip_and_adam_never_read_the_device(name):
    model = build_model(MODELS[name]()).train().to("meta")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    totals = forward_backward(model, [_host_batch(), _host_batch()], epsilon=0.1, pad_id=0, info=DistInfo(),
                              device=torch.device("meta"))
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    assert totals.device.type == "meta" and totals.shape == (3,) and norm.device.type == "meta"
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_the_meta_device_catches_a_host_read():
    """The test above can fail: the step as it was before issue 48 (logits of the real positions only, picked by a
    boolean index) reads the device."""
    model = build_model(_mma_glfb()).train().to("meta")
    batch = _host_batch().to("meta")
    real = batch.tgt_out != 0
    with pytest.raises(NotImplementedError, match="nonzero"):
        model(batch.src, batch.src_lengths, batch.tgt_in, output_mask=real)
    with pytest.raises(Exception, match="meta"):
        float(real.sum())


def test_the_lstm_given_lengths_off_the_host_reads_them_back():
    """The LSTM test above can fail: lengths moved to the device with the rest of the batch are read back to pack."""
    model = build_model(_lstm()).train().to("meta")
    batch = _host_batch().to("meta")
    with pytest.raises(NotImplementedError, match="meta"):
        model(batch.src, batch.src_lengths, batch.tgt_in)


def test_the_trainer_finds_the_lstm_behind_its_wrappers():
    class Wrapped(torch.nn.Module):  # as DistributedDataParallel holds the model
        def __init__(self, module):
            super().__init__()
            self.module = module

    lstm, transformer = build_model(_lstm()), build_model(_mma_glfb())
    for wrap in (lambda m: m, torch.compile, Wrapped, lambda m: torch.compile(Wrapped(m))):
        assert host_fields(wrap(lstm)) == ("src_lengths",) and host_fields(wrap(transformer)) == ()


def test_a_padding_mask_off_the_cpu_is_checked_on_the_device():
    mask = torch.tensor([[False, False, True], [False, True, True]])
    assert lengths_from_padding_mask(mask.to("meta")).device.type == "meta"  # no host read
    with pytest.raises(ValueError, match="right padding"):  # on the CPU, eager: the clear error, as before
        lengths_from_padding_mask(torch.tensor([[False, True, False]]))


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["mma", "lstm"])
def test_a_training_step_on_the_gpu_never_syncs(name):
    """forward, loss, backward, clipping and Adam (as the trainer builds it: its step counters stay on the host, no
    sync) under ``set_sync_debug_mode("error")``: any synchronising call raises. Not yet run: no GPU was lent when it
    was written (nor when the LSTM, packing by host lengths, joined it)."""
    device = torch.device("cuda")
    model = build_model(MODELS[name]()).train().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = _host_batch()
    forward_backward(model, [batch], epsilon=0.1, pad_id=0, info=DistInfo(), device=device)  # warm-up: lazy init
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        totals = forward_backward(model, [batch], epsilon=0.1, pad_id=0, info=DistInfo(), device=device)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert torch.isfinite(totals).all()
