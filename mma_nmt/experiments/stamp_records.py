"""``python -m mma_nmt.experiments.stamp_records RECORD.json ...``: adds the checksum of its translations to a run
record written before records carried one (``translations_sha256``, see :mod:`mma_nmt.experiments.records`).

A record is stamped only when its translations are the ones its scores were computed from: sacreBLEU BLEU, chrF and
TER of ``test.hyp.txt`` against the test references (its corpus is prepared first where it is not) must equal the
record's. A record that already has a checksum is left alone; anything else is refused, naming the record. Used once
to stamp the records committed before then (issue 50); kept for records written elsewhere before checksums."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json
from mma_nmt.experiments.records import CHECKSUM_KEY, HYPOTHESES_FILE, RecordError, file_sha256

_SCORES = ("bleu", "chrf", "ter")


def rescored(record: dict, hypotheses: Path) -> dict[str, float]:
    """BLEU, chrF and TER of ``hypotheses`` against the test references of the run ``record`` describes, scored as
    the run scored them (:func:`mma_nmt.pipeline.evaluate`)."""
    from mma_nmt import pipeline
    from mma_nmt.config_io import set_dotted
    from mma_nmt.training.config import run_config_from_dict

    config = json.loads(json.dumps(record["config"]))
    set_dotted(config, "train.save_dir", "unused")
    run = run_config_from_dict(config)
    pipeline.ensure_prepared(run, say=lambda text: print(f"[stamp] {text} (for its test references)", flush=True))
    scores = pipeline.evaluate(run, hypotheses=str(hypotheses))
    return {key: scores[key] for key in _SCORES}


def stamp(path: Path, *, tolerance: float = 1e-6) -> bool:
    """Adds the checksum of its translations to the record in ``path`` after checking that they give the record's
    scores; returns False for a record that already has one."""
    path = Path(path)
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get(CHECKSUM_KEY):
        return False
    hypotheses = path.parent / HYPOTHESES_FILE
    recorded = {key: record.get("metrics", {}).get(key) for key in _SCORES}
    now = rescored(record, hypotheses)
    differ = [f"{key} {now[key]:.4f} (recorded {recorded[key]})" for key in _SCORES
              if recorded[key] is None or abs(now[key] - recorded[key]) > tolerance]
    if differ:
        raise RecordError(f"{path}: not stamped: its translations {hypotheses} do not give the record's scores: "
                          f"{', '.join(differ)}")
    atomic_write_json(path, {**record, CHECKSUM_KEY: file_sha256(hypotheses)})
    return True


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m mma_nmt.experiments.stamp_records RECORD.json ...", file=sys.stderr)
        return 2
    for path in paths:
        try:
            print(f"[stamp] {'stamped' if stamp(Path(path)) else 'already stamped'} {path}", flush=True)
        except RecordError as error:
            print(f"[stamp] error: {error}", file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
