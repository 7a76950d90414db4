"""Learning curves of a table: validation loss against updates, one panel per dataset, one colour per system, one
line per seed, a marker at the checkpoint each run was translated with. The loss axis is cut where the first fifth of
the longest run ends: the steep start would otherwise squeeze the part where the systems differ into a line."""

from __future__ import annotations

import textwrap
from pathlib import Path


# The first SKIPPED_SHARE of the longest run's updates may run off the top of the loss axis.
SKIPPED_SHARE = 0.2


def loss_axis_range(curves: list[tuple[list[int], list[float]]], skipped_share: float = SKIPPED_SHARE
                    ) -> tuple[float, float]:
    """(bottom, top) of the loss axis for the (steps, losses) of each run: from the lowest loss up to the highest loss
    any run has at its first validation past ``skipped_share`` of the longest run's updates (its last validation if it
    stopped before), with a 5 % margin."""
    points = [(steps, losses) for steps, losses in curves if steps]
    if not points:
        raise ValueError("loss_axis_range needs at least one non-empty curve")
    cut = skipped_share * max(steps[-1] for steps, _ in points)
    top = max(next((loss for step, loss in zip(steps, losses) if step >= cut), losses[-1]) for steps, losses in points)
    bottom = min(min(losses) for _, losses in points)
    margin = 0.05 * (top - bottom) or 0.01
    return bottom - margin, top + margin


def _curve(run: dict) -> tuple[list[int], list[float]]:
    return [point["step"] for point in run["curve"]], [point["valid_nll"] for point in run["curve"]]


LEGEND_WIDTH = 60  # characters per line of a legend entry; longer labels wrap


def draw_learning_curves(data: dict):
    """The figure of the curves of ``data["runs"]`` (built by :func:`~mma_nmt.experiments.report.build_table`), or None
    when no run has a validation curve. The legend, one entry per system, sits below the panels and is given its own
    height: however long the system labels, the panels keep their width."""
    runs = [run for run in data["runs"] if run.get("curve")]
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [c for c in data["columns"] if any(run["column"] == c for run in runs)]
    systems = list(dict.fromkeys(run["row"] for run in runs))
    labels = {row["system"]: textwrap.fill(row["label"], width=LEGEND_WIDTH) for row in data["rows"]}
    colours = {system: plt.get_cmap("tab10")(i % 10) for i, system in enumerate(systems)}
    width = max(5.5 * len(columns), 6.5)
    per_row = max(1, int(width // 4.5))  # legend entries side by side
    legend_lines = sum(max(labels[s].count("\n") + 1 for s in systems[i:i + per_row])
                       for i in range(0, len(systems), per_row))
    figure, axes = plt.subplots(1, len(columns), figsize=(width, 3.8 + 0.17 * legend_lines), squeeze=False,
                                layout="constrained")
    handles = {}
    for ax, column in zip(axes[0], columns):
        in_column = [r for r in runs if r["column"] == column]
        for run in in_column:
            steps, losses = _curve(run)
            line, = ax.plot(steps, losses, color=colours[run["row"]], linewidth=1.2, alpha=0.85)
            handles.setdefault(run["row"], line)
            best = run.get("stopping", {}).get("best_update")
            if best in steps:
                ax.plot([best], [losses[steps.index(best)]], marker="o", color=colours[run["row"]], markersize=4)
        ax.set_ylim(*loss_axis_range([_curve(run) for run in in_column]))
        ax.set_title(data["columns"][column], fontsize=9)
        ax.set_xlabel("updates")
        ax.set_ylabel("validation NLL per token")
        ax.grid(alpha=0.3)
    figure.legend([handles[s] for s in systems], [labels[s] for s in systems], loc="outside lower center",
                  ncol=min(per_row, len(systems)), fontsize=7, frameon=False)
    title = (f"{data['title']}: learning curves (one line per run and seed; dots = the checkpoint translated; the "
             f"first {SKIPPED_SHARE:.0%} of the updates run off the top)")
    figure.suptitle(textwrap.fill(title, width=int(11 * width)), fontsize=9)
    return figure


def plot_learning_curves(data: dict, path: Path) -> Path | None:
    """Draws the curves of ``data["runs"]`` (:func:`draw_learning_curves`) into ``path``; returns None when no run
    has a validation curve."""
    figure = draw_learning_curves(data)
    if figure is None:
        return None
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
