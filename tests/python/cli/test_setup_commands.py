"""The README's two commands are what CI runs, its quick third translates with the committed example model, and a
plain install never needs GoogleTest."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _readme_commands() -> dict[str, str]:
    """The one-line bash blocks of the README's "The two commands" section, by the first word of the paragraph that
    introduces each."""
    section = REPO.joinpath("README.md").read_text(encoding="utf-8").split("## The two commands", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"\n\n((?:[^\n]+\n)+)\n```bash\n([^\n]+)\n```", section)
    return {intro.split()[0]: command.split("#")[0].strip() for intro, command in blocks}


def test_the_readme_names_two_commands():
    commands = _readme_commands()
    assert commands["Main"] == "make demo" and commands["Tests"] == "make test", commands


def test_ci_runs_exactly_the_readme_test_command():
    command = _readme_commands()["Tests"]
    ci = REPO.joinpath(".ci", "run").read_text(encoding="utf-8")
    runs = [line for line in ci.splitlines() if not line.lstrip().startswith("#")
            and re.search(rf"(^|[\s!(]){re.escape(command)}($|[\s;)])", line)]
    assert runs, f".ci/run does not run the README's test command {command!r}"


def test_both_make_targets_set_up_what_they_need_first():
    makefile = REPO.joinpath("Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo: setup$", makefile, re.M) and re.search(r"^test: setup-tests$", makefile, re.M)
    assert "scripts/setup.sh --tests" in makefile


def test_googletest_is_read_only_for_the_cpp_tests():
    cmake = REPO.joinpath("CMakeLists.txt").read_text(encoding="utf-8")
    assert re.search(r'option\(MMA_NMT_BUILD_TESTS "[^"]*" OFF\)', cmake)
    tests_block = cmake.split("if(MMA_NMT_BUILD_TESTS)", 1)[1].split("endif()", 1)[0]
    outside = cmake.replace(tests_block, "")
    assert "googletest.cmake" in tests_block and "GTest" not in outside and "googletest" not in outside


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_setup_script_parses_and_rejects_unknown_options():
    script = REPO / "scripts" / "setup.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    bad = subprocess.run(["bash", str(script), "--frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage: scripts/setup.sh [--tests]" in bad.stderr


def test_the_quick_third_command_translates_with_the_committed_example():
    """``make translate``: the README's quick third command, on the converged example model (no training)."""
    assert _readme_commands()["And"] == "make translate"
    makefile = REPO.joinpath("Makefile").read_text(encoding="utf-8")
    assert re.search(r"^translate: setup$", makefile, re.M)
    example = re.search(r"^EXAMPLE \?= (\S+)$", makefile, re.M).group(1)
    sentence = re.search(r"^SENTENCE \?= (.+)$", makefile, re.M).group(1)
    assert (REPO / example / "card.json").is_file(), f"{example}, the README's quick command's model, is missing"
    import sys

    done = subprocess.run([sys.executable, "-m", "mma_nmt", "translate", "--model", str(REPO / example), "--input",
                           "-"], input=sentence + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    words = done.stdout.lower().split()
    assert len(done.stdout.splitlines()) == 1 and "man" in words, done.stdout  # "Ein Mann ..." is about a man
