"""Generation and fine-tuning of a Hugging Face model with mixed encoder heads."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from hf_models import ENCODER_LAYERS, count_fused_calls, make_model, padded_batch  # noqa: E402

import mma_nmt.hf  # noqa: E402


@pytest.mark.parametrize("model_type", ["marian", "bart"])
def test_generate_with_beams(model_type, monkeypatch):
    model = make_model(model_type, "mma_nmt")
    mma_nmt.hf.set_head_spec(model, "GLFB")
    calls = count_fused_calls(monkeypatch)
    batch = padded_batch()
    out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=3,
                         num_return_sequences=2, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert out.shape == (4, 7)  # 2 sentences x 2 returned beams, the start token and 6 new tokens
    assert len(calls) == ENCODER_LAYERS  # the source is encoded once, with the mixed heads


def test_seq2seq_trainer_fine_tunes(tmp_path, monkeypatch):
    pytest.importorskip("accelerate")
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = make_model("marian", "mma_nmt", dropout=0.1)  # as in training: the operator's attention dropout runs too
    assert model.get_encoder().layers[0].self_attn.dropout == 0.1
    mma_nmt.hf.set_head_spec(model, "GLFB")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = padded_batch()
    examples = [{key: value[i % 2] for key, value in batch.items() if key != "decoder_input_ids"} for i in range(8)]
    calls = count_fused_calls(monkeypatch)
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=2,
                                    learning_rate=1e-2, logging_steps=1, save_strategy="no", report_to=[],
                                    use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=examples)
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert len(calls) == 4 * ENCODER_LAYERS
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert any(".encoder.layers.0.self_attn.q_proj" in name for name in changed)
    assert model.config.mma_nmt_head_spec["head_spec"] == "GLFB"
