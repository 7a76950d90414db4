"""Learning curves of a table: validation loss against updates, one panel per dataset, one colour per system, one
line per seed, a marker at the checkpoint each run was translated with."""

from __future__ import annotations

import textwrap
from pathlib import Path


def plot_learning_curves(data: dict, path: Path) -> Path | None:
    """Draws the curves of ``data["runs"]`` (built by :func:`~mma_nmt.experiments.report.build_table`) into ``path``;
    returns None when no run has a validation curve."""
    runs = [run for run in data["runs"] if run.get("curve")]
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [c for c in data["columns"] if any(run["column"] == c for run in runs)]
    systems = list(dict.fromkeys(run["row"] for run in runs))
    labels = {row["system"]: row["label"] for row in data["rows"]}
    colours = {system: plt.get_cmap("tab10")(i % 10) for i, system in enumerate(systems)}
    figure, axes = plt.subplots(1, len(columns), figsize=(5.5 * len(columns), 3.8), squeeze=False)
    for ax, column in zip(axes[0], columns):
        seen = set()
        for run in (r for r in runs if r["column"] == column):
            steps = [point["step"] for point in run["curve"]]
            losses = [point["valid_nll"] for point in run["curve"]]
            label = labels[run["row"]] if run["row"] not in seen else None
            seen.add(run["row"])
            ax.plot(steps, losses, color=colours[run["row"]], linewidth=1.2, alpha=0.85, label=label)
            best = run.get("stopping", {}).get("best_update")
            if best in steps:
                ax.plot([best], [losses[steps.index(best)]], marker="o", color=colours[run["row"]], markersize=4)
        ax.set_title(data["columns"][column], fontsize=9)
        ax.set_xlabel("updates")
        ax.set_ylabel("validation NLL per token")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    title = f"{data['title']}: learning curves (one line per run and seed; dots = the checkpoint translated)"
    figure.suptitle(textwrap.fill(title, width=int(60 * len(columns))), fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
