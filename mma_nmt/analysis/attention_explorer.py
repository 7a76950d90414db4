"""An interactive view of attention maps: one self-contained HTML page (no JavaScript library, no network), shown in
Jupyter with ``IPython.display.HTML`` or opened in a browser, and kept working in notebooks exported to HTML (the
static PNG figures stay for CI and for the committed results).

Pick a sentence, a block (encoder self-attention, decoder self-attention, cross-attention, or any extra block such as
the MLMHA weights over each encoder layer) and a layer; every head of that layer is drawn small, labelled with its kind
(``2 L``: head 2 is local); click one to draw it large with its tokens, and hover a cell to read its weight.
"""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from mma_nmt.analysis.attention_maps import SentenceAttention, head_labels


@dataclass
class ExplorerBlock:
    """One block of maps of one sentence: ``weights`` (L, H, Q, K), rows labelled by ``query_tokens``, columns by
    ``key_tokens``; ``layer_names`` / ``head_names`` default to ``layer 1..L`` / ``0..H-1``."""

    weights: torch.Tensor
    query_tokens: list[str]
    key_tokens: list[str]
    layer_names: list[str] | None = None
    head_names: list[str] | None = None

    def to_json(self) -> dict:
        if self.weights.dim() != 4:
            raise ValueError(f"weights must be (layers, heads, queries, keys), got {tuple(self.weights.shape)}")
        layers, heads, queries, keys = self.weights.shape
        if (queries, keys) != (len(self.query_tokens), len(self.key_tokens)):
            raise ValueError(f"weights of {queries} x {keys} for {len(self.query_tokens)} query and "
                             f"{len(self.key_tokens)} key tokens")
        return {"layers": self.layer_names or [f"layer {i + 1}" for i in range(layers)],
                "heads": self.head_names or [str(h) for h in range(heads)],
                "rows": list(self.query_tokens), "cols": list(self.key_tokens),
                "w": torch.round(self.weights.detach().double().cpu() * 1000).div(1000).tolist()}


@dataclass
class ExplorerSentence:
    """A sentence's title (e.g. its source text) and its blocks by name, in display order."""

    title: str
    blocks: dict[str, ExplorerBlock] = field(default_factory=dict)


def explorer_sentence(maps: SentenceAttention, title: str | None = None,
                      extra: dict[str, ExplorerBlock] | None = None) -> ExplorerSentence:
    """The encoder self-, decoder self- and cross-attention of ``maps`` (encoder heads labelled with their kinds),
    then the ``extra`` blocks."""
    src, tgt = maps.source_tokens, maps.target_tokens
    blocks = {}
    if maps.encoder_self is not None:
        labels = head_labels(maps.encoder_head_kinds, maps.encoder_self.shape[1])
        blocks["encoder self-attention"] = ExplorerBlock(maps.encoder_self, src, src, head_names=labels)
    if maps.decoder_self is not None:
        blocks["decoder self-attention"] = ExplorerBlock(maps.decoder_self, tgt, tgt)
    if maps.cross is not None:
        blocks["cross-attention"] = ExplorerBlock(maps.cross, tgt, src)
    blocks.update(extra or {})
    return ExplorerSentence(title=title if title is not None else " ".join(src), blocks=blocks)


def attention_explorer_html(sentences: Sequence[ExplorerSentence], *, title: str = "Attention explorer") -> str:
    """The view as an HTML fragment (a ``<div>`` with its script); element ids are unique per call, so several
    explorers can live in one notebook."""
    if not sentences:
        raise ValueError("no sentences to show")
    data = [{"title": s.title, "blocks": {name: b.to_json() for name, b in s.blocks.items()}} for s in sentences]
    root = "mmax" + uuid.uuid4().hex[:10]
    script = _SCRIPT.replace("__ROOT__", root).replace("__DATA__", json.dumps(data, separators=(",", ":")))
    return (f'<div id="{root}" class="mma-explorer" style="font-family:sans-serif;font-size:12px">'
            f"<b>{html.escape(title)}</b><div class=\"controls\" style=\"margin:6px 0\"></div>"
            f'<div class="heads" style="display:flex;flex-wrap:wrap;gap:8px"></div>'
            f'<div class="detail" style="margin-top:8px"></div></div><script>{script}</script>')


def write_attention_explorer(sentences: Sequence[ExplorerSentence], path: str | Path, *,
                             title: str = "Attention explorer") -> Path:
    """The view as a standalone HTML page at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = attention_explorer_html(sentences, title=title)
    path.write_text(f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>"
                    f"<body>{body}</body></html>\n", encoding="utf-8")
    return path


# The page's script: plain DOM and SVG, no library. Colour: white to dark blue, darkness = weight / max of the map.
_SCRIPT = r"""
(function () {
  const data = __DATA__;
  const root = document.getElementById("__ROOT__");
  const controls = root.querySelector(".controls"), headsBox = root.querySelector(".heads"),
        detail = root.querySelector(".detail");
  const state = {sentence: 0, block: Object.keys(data[0].blocks)[0], layer: 0, head: 0};
  const NS = "http://www.w3.org/2000/svg";
  function el(tag, attrs, parent) {
    const node = tag === "svg" || tag === "rect" || tag === "text" || tag === "title"
      ? document.createElementNS(NS, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    if (parent) parent.appendChild(node);
    return node;
  }
  function select(label, options, value, onChange) {
    const wrap = el("label", {style: "margin-right:12px"}, controls);
    wrap.appendChild(document.createTextNode(label + " "));
    const box = el("select", {}, wrap);
    options.forEach((text, i) => el("option", {value: i, text: text}, box));
    box.value = value;
    box.onchange = () => onChange(Number(box.value));
  }
  function colour(w, max) {
    const t = max > 0 ? w / max : 0;
    const c = (a, b) => Math.round(a + (b - a) * t);
    return `rgb(${c(255, 8)},${c(255, 48)},${c(255, 107)})`;
  }
  function heatmap(block, layer, head, cell, withLabels, parent) {
    const w = block.w[layer][head], rows = block.rows, cols = block.cols;
    const max = Math.max(...w.map(r => Math.max(...r)));
    const left = withLabels ? 8 + 7 * Math.max(...rows.map(t => t.length)) : 0;
    const top = withLabels ? 8 + 7 * Math.max(...cols.map(t => t.length)) : 0;
    const svg = el("svg", {width: left + cell * cols.length, height: top + cell * rows.length}, parent);
    w.forEach((row, i) => row.forEach((v, j) => {
      const r = el("rect", {x: left + j * cell, y: top + i * cell, width: cell, height: cell, fill: colour(v, max)}, svg);
      el("title", {text: `${rows[i]} \u2192 ${cols[j]}: ${v.toFixed(3)}`}, r);
    }));
    if (withLabels) {
      rows.forEach((t, i) => el("text", {x: left - 4, y: top + i * cell + cell * 0.7, "text-anchor": "end",
                                          "font-size": 11, text: t}, svg));
      cols.forEach((t, j) => el("text", {x: 0, y: 0, "font-size": 11, text: t,
        transform: `translate(${left + j * cell + cell * 0.7},${top - 4}) rotate(-90)`}, svg));
    }
    return max;
  }
  function draw() {
    controls.innerHTML = ""; headsBox.innerHTML = ""; detail.innerHTML = "";
    const sentence = data[state.sentence];
    const names = Object.keys(sentence.blocks);
    if (!names.includes(state.block)) state.block = names[0];
    const block = sentence.blocks[state.block];
    state.layer = Math.min(state.layer, block.layers.length - 1);
    state.head = Math.min(state.head, block.heads.length - 1);
    select("sentence", data.map((s, i) => `${i}: ${s.title.slice(0, 60)}`), state.sentence,
           v => { state.sentence = v; draw(); });
    select("block", names, names.indexOf(state.block), v => { state.block = names[v]; draw(); });
    select("layer", block.layers, state.layer, v => { state.layer = v; draw(); });
    const cell = Math.max(3, Math.min(10, Math.floor(160 / Math.max(block.rows.length, block.cols.length))));
    block.heads.forEach((name, h) => {
      const box = el("div", {style: "cursor:pointer;padding:2px;border:2px solid " +
                                    (h === state.head ? "#08306b" : "transparent")}, headsBox);
      el("div", {text: "head " + name}, box);
      heatmap(block, state.layer, h, cell, false, box);
      box.onclick = () => { state.head = h; draw(); };
    });
    el("div", {text: `${state.block}, ${block.layers[state.layer]}, head ${block.heads[state.head]} ` +
                     "(rows: queries, columns: keys; hover a cell for its weight)",
               style: "margin-bottom:4px"}, detail);
    const max = heatmap(block, state.layer, state.head, 16, true, detail);
    el("div", {text: `darkest = ${max.toFixed(3)}`}, detail);
  }
  draw();
})();
"""
