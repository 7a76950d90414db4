"""What a rebuilt table would lose of what it publishes today.

A table publishes, per cell (row, column), one run per seed: its BLEU and, for a row compared with a baseline, its
difference to the baseline of that seed with significance daggers. A rebuild may add runs and change numbers (a run
retrained, a config changed), but it never silently publishes fewer: a seed, or a run, that had a number and would
have none, a difference to the baseline that would disappear, or a dagger that would drop (†† to † or n.s.) stops the
rebuild of that table unless the user allows it (``mma-nmt experiment --allow-fewer``)."""

from __future__ import annotations

TABLE_POLICY = """\
A table is never rewritten with fewer seeds, runs or significance daggers than it publishes:
when a seed's run has no record any more (a run failed or is not finished, its record was
removed, or its config changed), or a seed's difference to the baseline would disappear or
lose a dagger (†† to †, or to n.s.), the table is kept as it is, the command names each cell,
seed and number it would lose, and exits non-zero. Finish or restore those runs, or pass
--allow-fewer to publish the table with less. Adding runs and seeds is always allowed."""


def _published(data: dict) -> dict[tuple[str, str, int | None], dict]:
    """(row, column, seed) -> the BLEU and, where the row is compared with a baseline, the difference and its
    significance mark, of every run ``data`` publishes."""
    from mma_nmt.experiments.report import significance_mark

    found = {}
    for row in data.get("rows", []):
        for column, cell in row.get("cells", {}).items():
            seeds, bleus = cell.get("seeds"), cell.get("bleus")
            if seeds is None and cell.get("bleu") is not None:  # a table written before runs were listed per seed
                seeds, bleus = [None], [cell["bleu"]]
            per_seed = {compared.get("seed"): compared for compared in cell.get("per_seed") or []}
            for seed, bleu in zip(seeds or [], bleus or []):
                compared = per_seed.get(seed, {})
                found[row["system"], column, seed] = {
                    "bleu": bleu, "delta": compared.get("delta"),
                    "mark": significance_mark(compared["p_value"]) if "p_value" in compared else ""}
    return found


def _daggers(mark: str) -> int:
    return mark.count("†")


def _delta(number: dict) -> str:
    return f"Δ {number['delta']:+.2f}{number['mark']}"


def lost_numbers(old: dict, new: dict) -> list[str]:
    """What table ``new`` would no longer publish of table ``old`` (both as :func:`build_table` returns them), one
    phrase per run: "mma on de_en seed 1 (37.77, Δ +1.18††): no run"."""
    before, after = _published(old), _published(new)
    lost = []
    for (row, column, seed), number in before.items():
        where = f"{row} on {column}" + (f" seed {seed}" if seed is not None else "")
        now = after.get((row, column, seed))
        if now is None:
            shown = f"{number['bleu']:.2f}" + (f", {_delta(number)}" if number["delta"] is not None else "")
            lost.append(f"{where} ({shown}): no run")
        elif number["delta"] is not None and now["delta"] is None:
            lost.append(f"{where} ({_delta(number)}): no difference to the baseline (its run of that seed is gone)")
        elif number["delta"] is not None and _daggers(now["mark"]) < _daggers(number["mark"]):
            lost.append(f"{where} ({_delta(number)}): would become {_delta(now)}")
    return lost


__all__ = ["TABLE_POLICY", "lost_numbers"]
