"""The interactive attention view: its data (weights, tokens, head kinds in the labels) and its shape checks."""

from __future__ import annotations

import json
import re

import pytest
import torch

from mma_nmt.analysis import SentenceAttention
from mma_nmt.analysis.attention_explorer import (ExplorerBlock, attention_explorer_html, explorer_sentence,
                                                 write_attention_explorer)


def _maps() -> SentenceAttention:
    torch.manual_seed(0)
    src, tgt = ["ein", "hund", "läuft"], ["a", "dog", "runs", "</s>"]
    return SentenceAttention(source_tokens=src, target_tokens=tgt,
                             encoder_self=torch.rand(2, 4, 3, 3).softmax(-1), decoder_self=torch.rand(2, 4, 4, 4),
                             cross=torch.rand(2, 4, 4, 3), encoder_head_kinds="GLFB")


def _data(html: str) -> list:
    return json.loads(re.search(r"const data = (\[.*?\]);\n", html, re.S).group(1))


def test_the_page_holds_every_block_with_tokens_weights_and_head_kinds():
    maps = _maps()
    gate = ExplorerBlock(torch.rand(1, 1, 4, 3), ["head 0", "head 1", "head 2", "head 3"], maps.source_tokens,
                         head_names=["gate"])
    sentence = explorer_sentence(maps, extra={"head gate": gate})
    data = _data(attention_explorer_html([sentence], title="t"))
    blocks = data[0]["blocks"]
    assert list(blocks) == ["encoder self-attention", "decoder self-attention", "cross-attention", "head gate"]
    assert data[0]["title"] == "ein hund läuft"
    encoder = blocks["encoder self-attention"]
    assert encoder["heads"] == ["0 G", "1 L", "2 F", "3 B"] and encoder["layers"] == ["layer 1", "layer 2"]
    assert encoder["rows"] == encoder["cols"] == maps.source_tokens
    assert torch.allclose(torch.tensor(encoder["w"], dtype=torch.float64), maps.encoder_self.double(), atol=5e-4)
    cross = blocks["cross-attention"]
    assert cross["rows"] == maps.target_tokens and cross["cols"] == maps.source_tokens
    assert torch.allclose(torch.tensor(cross["w"], dtype=torch.float64), maps.cross.double(), atol=5e-4)
    assert blocks["head gate"]["heads"] == ["gate"]


def test_two_views_on_one_page_get_their_own_element_ids(tmp_path):
    sentences = [explorer_sentence(_maps())]
    ids = {re.search(r'<div id="(mmax[0-9a-f]+)"', attention_explorer_html(sentences)).group(1) for _ in range(2)}
    assert len(ids) == 2
    page = write_attention_explorer(sentences, tmp_path / "x" / "view.html", title="A <view>").read_text()
    assert page.startswith("<!doctype html>") and "A &lt;view&gt;" in page and "<script>" in page
    assert "http" not in page.split("<script>")[1].replace("http://www.w3.org/2000/svg", "")  # nothing fetched


def test_bad_shapes_are_refused_with_the_sizes():
    with pytest.raises(ValueError, match="3 x 3 for 2 query and 3 key tokens"):
        attention_explorer_html([explorer_sentence(_maps(), extra={
            "x": ExplorerBlock(torch.rand(1, 1, 3, 3), ["a", "b"], ["a", "b", "c"])})])
    with pytest.raises(ValueError, match="layers, heads, queries, keys"):
        ExplorerBlock(torch.rand(3, 3), ["a"], ["b"]).to_json()
    with pytest.raises(ValueError, match="no sentences"):
        attention_explorer_html([])
