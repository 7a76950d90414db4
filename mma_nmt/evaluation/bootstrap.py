"""Paired bootstrap resampling (Koehn 2004) of a system against a baseline, with sacreBLEU's implementation."""

from __future__ import annotations

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest


def paired_bootstrap(baseline: list[str], system: list[str], references: list[str], *, samples: int = 1000,
                     tokenize: str = "13a") -> dict:
    """BLEU of both systems (sacreBLEU tokenizer ``tokenize``), the bootstrap means and 95% intervals, and the p-value
    of the difference.

    sacreBLEU seeds its resampling from the environment variable SACREBLEU_SEED (12345 when unset)."""
    if not len(baseline) == len(system) == len(references):
        raise ValueError("baseline, system and references must have the same number of lines")
    if samples < 1:
        raise ValueError(f"bootstrap samples must be at least 1, got {samples}")
    if list(system) == list(baseline):
        # sacreBLEU's p-value counts resamples with a difference *above* the observed one, so identical outputs (every
        # difference 0) would get p = 1 / (samples + 1): "significant". Nothing can be significant here.
        bleu = BLEU(tokenize=tokenize).corpus_score(list(system), [list(references)]).score
        return {"baseline_bleu": bleu, "system_bleu": bleu, "system_mean": bleu, "system_ci": 0.0,
                "baseline_mean": bleu, "baseline_ci": 0.0, "p_value": 1.0, "samples": samples}
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": BLEU(tokenize=tokenize)}, [references],
                      test_type="bs", n_samples=samples)
    _, scores = test()
    base, sys_ = scores["BLEU"]
    # Equal scores, outputs that differ: sacreBLEU's resampled differences are then often all 0 as well (both systems
    # at BLEU 0.0 in every resample), none exceeds the observed 0 and p = 1 / (samples + 1). A zero difference is
    # never significant.
    p_value = 1.0 if sys_.score == base.score else sys_.p_value
    return {"baseline_bleu": base.score, "system_bleu": sys_.score, "system_mean": sys_.mean, "system_ci": sys_.ci,
            "baseline_mean": base.mean, "baseline_ci": base.ci, "p_value": p_value, "samples": samples}
