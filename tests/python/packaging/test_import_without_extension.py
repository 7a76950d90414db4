"""Without the compiled extension ``mma_nmt._C`` the package still imports, the reference path, data, evaluation and
analysis work, and a fused operator raises one error that says how to build (mma_nmt/_extension.py).

The extension is hidden in a subprocess by a ``sys.meta_path`` finder that refuses ``mma_nmt._C``, installed before
``mma_nmt`` is imported, so the test runs in the same environment as the rest of the suite, built or not."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from nmt_fixtures import MULTI30K

REPO = Path(__file__).resolve().parents[3]

HIDE_EXTENSION = textwrap.dedent("""
    import sys

    class RefuseExtension:  # as if mma_nmt._C had never been built
        def find_spec(self, name, path=None, target=None):
            if name == "mma_nmt._C":
                raise ModuleNotFoundError("No module named 'mma_nmt._C'", name=name)
            return None

    sys.meta_path.insert(0, RefuseExtension())
""")


def run_without_extension(body: str, *args: str) -> subprocess.CompletedProcess:
    """Runs ``body`` in a fresh Python whose ``import mma_nmt._C`` fails; ``args`` become its ``sys.argv[1:]``."""
    code = HIDE_EXTENSION + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code, *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def test_import_reference_data_evaluation_and_analysis_work_without_the_extension(tmp_path):
    result = run_without_extension("""
        import json, sys
        import torch
        import mma_nmt
        from mma_nmt.analysis.distance_entropy import head_distance_entropy
        from mma_nmt.data import PrepareConfig, prepare
        from mma_nmt.evaluation.scoring import corpus_bleu
        from mma_nmt.models import build_model, preset
        from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention

        assert "mma_nmt._C" not in sys.modules
        report = {"available": mma_nmt.extension_available(), "build_info": mma_nmt.build_info()}

        attention = MixedMultiheadAttention(MixedAttentionConfig(8, 4, head_spec="GLFB", implementation="reference"))
        out, weights = attention(torch.randn(2, 5, 8), need_weights=True)
        out.sum().backward()
        report["attention"] = [list(out.shape), attention.q_proj.weight.grad is not None]

        model = build_model(preset("transformer_tiny", src_vocab_size=20, tgt_vocab_size=20, d_model=16, ffn_dim=32,
                                   heads=4, implementation="reference"))
        src = torch.randint(4, 20, (2, 6))
        logits = model(src, torch.tensor([6, 4]), torch.randint(4, 20, (2, 5)))
        report["model_logits"] = list(logits.shape)

        data = prepare(PrepareConfig(corpus="multi30k_de_en", data_dir=sys.argv[1], out_dir=sys.argv[2],
                                     vocab_size=120, max_train_lines=20, splits=("train",), progress=False))
        report["prepared"] = sorted(p.name for p in data.iterdir())
        report["bleu"] = corpus_bleu(["a cat sits on the mat"], ["a cat sits on the mat"])[0]
        report["entropy_heads"] = list(head_distance_entropy([weights.detach()]).entropy.shape)
        print(json.dumps(report))
    """, str(MULTI30K.parent), str(tmp_path / "prepared"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["available"] is False
    assert report["build_info"]["extension"] is False
    assert "not built" in report["build_info"]["error"]
    assert report["attention"] == [[2, 5, 8], True]
    assert report["model_logits"][:2] == [2, 5]
    assert any(name.startswith("train") for name in report["prepared"])
    assert abs(report["bleu"] - 100.0) < 1e-6
    assert report["entropy_heads"][-1] == 4


def test_a_fused_call_without_the_extension_says_how_to_build():
    result = run_without_extension("""
        import torch
        import mma_nmt
        from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention

        q = torch.randn(1, 2, 3, 4)
        for call in (lambda: mma_nmt.ops.fused_attention(q, q, q),
                     lambda: MixedMultiheadAttention(MixedAttentionConfig(8, 2, head_spec="GL"))(torch.randn(1, 3, 8))):
            try:
                call()
            except mma_nmt.ExtensionUnavailableError as error:
                print(error)
            else:
                raise SystemExit("a fused call succeeded without the extension")
    """)
    assert result.returncode == 0, result.stderr
    messages = result.stdout.strip().splitlines()
    assert len(messages) == 2
    for message in messages:
        assert message.startswith("mma_nmt.attention: the compiled extension mma_nmt._C is not built")
        assert "pip install --no-build-isolation -e ." in message and "make setup" in message
        assert 'implementation="reference"' in message


def test_version_says_the_extension_is_missing():
    result = run_without_extension("""
        import sys
        from mma_nmt.cli.main import main
        sys.exit(main(["--version"]))
    """)
    assert result.returncode == 0, result.stderr
    assert "mma_nmt._C is not built" in result.stdout and "no fused operators" in result.stdout
