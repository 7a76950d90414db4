"""What a benchmark section returns (tables of rows plus the figures the targets read) and how the suite's report is
written: Markdown for people, JSON for tools. Both hold the same numbers."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.timing import markdown_table


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list]
    note: str = ""


@dataclass
class Section:
    """One section's result. ``figures`` maps a target id (see ``targets``) to the (value, where) pairs measured for
    it; ``error`` is set (and the tables may be partial) when the section failed."""

    name: str
    title: str
    description: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def figure(self, target: str, value: float, where: str) -> None:
        self.figures.setdefault(target, []).append((float(value), where))


@dataclass
class Report:
    title: str
    machine: dict
    command: str
    profile: str
    sections: list[Section]
    targets: list[dict]
    seconds: float = 0.0


def _machine_lines(machine: dict) -> list[str]:
    build = machine.get("mma_nmt_build", {})
    load_start, load_end = machine.get("load_average_start"), machine.get("load_average_end")
    return [
        f"- CPU: {machine.get('cpu_model')} ({machine.get('cores')} cores usable, {machine.get('cpu_capability')} "
        f"kernels in torch, last-level cache {machine.get('last_level_cache_mib', '?')} MiB); torch "
        f"{machine.get('torch_version')}, {machine.get('torch_threads')} intra-op threads",
        f"- mma_nmt build: CPU kernel `{build.get('cpu_kernel')}`, CUDA {build.get('cuda')}, built against torch "
        f"{build.get('torch_version')}; commit {machine.get('git_commit')}",
        f"- memory: glibc malloc {machine.get('malloc', 'system defaults')} (`benchmarks/allocator.py`)",
        f"- load average (1, 5, 15 min) at start {load_start}, at end {load_end} — the machine is shared, so absolute "
        f"times are noise; only the side-by-side ratios are meant to be read",
    ]


def _fmt(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def targets_table(targets: list[dict]) -> str:
    rows = [[t["target"], t["measured"], t["status"], t["where"]] for t in targets]
    return markdown_table(["target (issue 8)", "measured", "status", "where / how"], rows)


def render_markdown(report: Report) -> str:
    lines = [f"# {report.title}", "", f"`{report.command}` (profile `{report.profile}`, {report.seconds / 60:.1f} "
             "min). Every figure is a ratio of timings interleaved in one run (medians).", ""]
    lines += _machine_lines(report.machine) + ["", "## Targets", "", targets_table(report.targets), ""]
    for section in report.sections:
        lines += [f"## {section.title}", "", f"_{section.seconds:.0f} s._ {section.description}".rstrip(), ""]
        if section.error:
            lines += [f"**Section failed:** `{section.error}`", ""]
        for table in section.tables:
            lines += [f"### {table.title}", ""]
            if table.note:
                lines += [table.note, ""]
            lines += [markdown_table(table.columns, [[_fmt(v) for v in row] for row in table.rows]), ""]
    return "\n".join(lines)


def write_report(report: Report, out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Writes ``<out_dir>/<stem>.md`` and ``<stem>.json``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{stem}.md", out_dir / f"{stem}.json"
    md.write_text(render_markdown(report) + "\n", encoding="utf-8")
    js.write_text(json.dumps(dataclasses.asdict(report), indent=1) + "\n", encoding="utf-8")
    return md, js
