"""Paired significance tests of a system against a baseline, with sacreBLEU's implementation: paired bootstrap
resampling (Koehn 2004; sacreBLEU ``--paired-bs``) and approximate randomization (Riezler & Maxwell 2005; sacreBLEU
``--paired-ar``), for BLEU, chrF (or chrF++) and TER, against one or several references per sentence.

sacreBLEU seeds its resampling from the environment variable SACREBLEU_SEED (12345 when unset). Both tests draw their
resamples once for all metrics, so a metric's p-value does not depend on which other metrics are tested with it."""

from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

METRICS = ("bleu", "chrf", "ter")
TESTS = {"bootstrap": "bs", "randomization": "ar"}  # our name -> sacreBLEU's test_type


def metric_for(name: str, *, tokenize: str = "13a", chrf_word_order: int = 0):
    """The sacreBLEU metric ``name`` ("bleu" with tokenizer ``tokenize``, "chrf" with ``chrf_word_order`` word n-grams:
    2 is chrF++, "ter")."""
    if name == "bleu":
        return BLEU(tokenize=tokenize, force=tokenize == "none")  # "none": tokenised text is expected, no warning
    if name == "chrf":
        return CHRF(word_order=chrf_word_order)
    if name == "ter":
        return TER()
    raise ValueError(f"no metric {name!r} to test; metrics: {', '.join(METRICS)}")


def _streams(references: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    """One reference per sentence (a list of lines) or several (a list of reference streams), as streams."""
    if references and not isinstance(references[0], str):
        return [list(stream) for stream in references]
    return [list(references)]


def paired_tests(baseline: Sequence[str], system: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
                 *, test: str = "bootstrap", metrics: Sequence[str] = ("bleu",), samples: int = 1000,
                 tokenize: str = "13a", chrf_word_order: int = 0) -> dict[str, dict]:
    """``test`` ("bootstrap" or "randomization") of ``system`` against ``baseline`` for each of ``metrics``.

    ``references``: one line per sentence, or a list of reference streams (several references per sentence, every one
    used, as sacreBLEU's multi-reference scores). ``samples``: bootstrap resamples or randomization trials. Returns
    ``{metric: {"baseline": score, "system": score, "p_value": p, "samples": n, "test": test}}``; the bootstrap adds
    the resampled means and 95% half-intervals (``system_mean``, ``system_ci``, ``baseline_mean``, ``baseline_ci``).
    A zero difference is never significant (p = 1), whatever sacreBLEU's count of resamples gives."""
    if test not in TESTS:
        raise ValueError(f"no significance test {test!r}; tests: {', '.join(TESTS)}")
    streams = _streams(references)
    if not all(len(stream) == len(baseline) == len(system) for stream in streams):
        raise ValueError(f"baseline ({len(baseline)}), system ({len(system)}) and references "
                         f"({', '.join(str(len(s)) for s in streams)}) must have the same number of lines")
    if samples < 1:
        raise ValueError(f"{'bootstrap samples' if test == 'bootstrap' else 'randomization trials'} must be at least "
                         f"1, got {samples}")
    scorers = {name: metric_for(name, tokenize=tokenize, chrf_word_order=chrf_word_order) for name in metrics}
    if list(system) == list(baseline):
        # sacreBLEU's p-value counts resamples with a difference *above* the observed one, so identical outputs (every
        # difference 0) would get p = 1 / (samples + 1): "significant". Nothing can be significant here.
        out = {}
        for name, scorer in scorers.items():
            score = scorer.corpus_score(list(system), streams).score
            out[name] = {"baseline": score, "system": score, "p_value": 1.0, "samples": samples, "test": test}
            if test == "bootstrap":
                out[name].update(system_mean=score, system_ci=0.0, baseline_mean=score, baseline_ci=0.0)
        return out
    paired = PairedTest([("baseline", list(baseline)), ("system", list(system))], scorers, streams,
                        test_type=TESTS[test], n_samples=samples)
    _, scores = paired()
    out = {}
    for name, (base, sys_) in zip(scorers, (scores[key] for key in scores if key != "System")):
        # Equal scores, outputs that differ: the resampled differences are then often all 0 as well (both systems at
        # BLEU 0.0 in every resample), none exceeds the observed 0 and p = 1 / (samples + 1). A zero difference is
        # never significant.
        out[name] = {"baseline": float(base.score), "system": float(sys_.score),
                     "p_value": 1.0 if sys_.score == base.score else float(sys_.p_value), "samples": samples,
                     "test": test}
        if test == "bootstrap":  # numpy scalars (float32 for chrF and TER) as Python floats, for JSON
            out[name].update(system_mean=float(sys_.mean), system_ci=float(sys_.ci), baseline_mean=float(base.mean),
                             baseline_ci=float(base.ci))
    return out


def paired_bootstrap(baseline: list[str], system: list[str], references: Sequence[str] | Sequence[Sequence[str]], *,
                     samples: int = 1000, tokenize: str = "13a") -> dict:
    """BLEU of both systems (sacreBLEU tokenizer ``tokenize``), the bootstrap means and 95% intervals, and the p-value
    of the difference (:func:`paired_tests` of BLEU alone; ``references`` one line per sentence or several streams)."""
    bleu = paired_tests(baseline, system, references, test="bootstrap", metrics=("bleu",), samples=samples,
                        tokenize=tokenize)["bleu"]
    return {"baseline_bleu": bleu["baseline"], "system_bleu": bleu["system"], "system_mean": bleu["system_mean"],
            "system_ci": bleu["system_ci"], "baseline_mean": bleu["baseline_mean"], "baseline_ci": bleu["baseline_ci"],
            "p_value": bleu["p_value"], "samples": samples}
