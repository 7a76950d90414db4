"""The benchmark suite of issue 8: fused operators against their references and against what a user would use
instead (SDPA with a mask, FlexAttention, nn.MultiheadAttention), distance to the matmul limit, scaling, end to end.

    python -m benchmarks                      # the full suite (under 10 minutes on 2 cores): the report
    python -m benchmarks --quick              # about a minute, smaller sizes
    python -m benchmarks --only mixed         # one section (repeatable)

    python -m benchmarks --device cuda        # the GPU suite (benchmarks/cuda_suite.py): needs a GPU

Writes ``benchmarks/results/<YYYY-MM-DD>.md`` and ``.json`` (``--out``/``--name`` to change; a ``--quick``, ``--only``
or ``--tiny`` run is named ``<date>.<profile>[.<sections>]`` so it never overwrites the full report; a CUDA run adds
``.cuda``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch

from benchmarks.allocator import keep_freed_memory
from benchmarks.cuda_suite import CUDA_SECTIONS, run_cuda_suite
from benchmarks.report import targets_table, write_report
from benchmarks.suite import SECTIONS, run_suite

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes, about a minute")
    size.add_argument("--tiny", action="store_true", help="toy sizes in seconds (tests the report; numbers are noise)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: the CPU suite (default); cuda: the GPU suite (needs a GPU and the CUDA build)")
    parser.add_argument("--only", action="append", choices=sorted({*SECTIONS, *CUDA_SECTIONS}), metavar="SECTION",
                        help=f"run only this section (repeatable): CPU {', '.join(SECTIONS)}; "
                             f"CUDA {', '.join(CUDA_SECTIONS)}")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report directory (default: benchmarks/results)")
    parser.add_argument("--name", help="report file stem (default: the date, plus the profile unless full)")
    parser.add_argument("--malloc", choices=("keep", "system"), default="keep",
                        help="keep: glibc malloc keeps freed memory for reuse (default; see benchmarks/allocator.py); "
                             "system: glibc's defaults")
    args = parser.parse_args(argv)
    sections = CUDA_SECTIONS if args.device == "cuda" else SECTIONS
    unknown = [name for name in args.only or [] if name not in sections]
    if unknown:
        parser.error(f"--only {unknown[0]!r} is not a section of the {args.device} suite ({', '.join(sections)})")
    return args


def report_name(args, profile: str) -> str:
    if args.name:
        return args.name
    parts = ([time.strftime("%Y-%m-%d")] + (["cuda"] if args.device == "cuda" else [])
             + ([profile] if profile != "full" else []) + (args.only or []))
    return ".".join(parts)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = "quick" if args.quick else "tiny" if args.tiny else "full"
    malloc = "keeps freed memory" if args.malloc == "keep" and keep_freed_memory() else "system defaults"
    command = "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv)
    if args.device == "cuda":
        report = run_cuda_suite(profile, args.only, command=command.strip())
    else:
        report = run_suite(profile, args.only, command=command.strip(), malloc=malloc)
    md, js = write_report(report, args.out, report_name(args, profile))
    print("\n" + targets_table(report.targets))
    print(f"\nwrote {md} and {js} ({report.seconds / 60:.1f} min)")
    return 1 if any(s.error for s in report.sections) else 0


if __name__ == "__main__":
    sys.exit(main())
