"""The README's small main job (issue 2 version): real Multi30k sentences, fused == reference, a picture written."""

from __future__ import annotations

from mma_nmt.demos import mixed_attention_maps


def test_demo_checks_fused_against_reference_and_writes_picture(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(shared_data))
    report = mixed_attention_maps.main(["--out", str(tmp_path), "--sentences", "5"])
    assert report["sentences"] == 5 and report["max_len"] > 5
    assert report["max_abs_diff_output"] < 1e-9 and report["max_abs_diff_input_grad"] < 1e-9
    picture = tmp_path / "mma_heads.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
