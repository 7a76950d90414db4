"""The built extension shares torch's shared libstdc++ instead of carrying a static copy (cmake/shared_libstdcxx.cmake),
and that CMake function keeps a library on the shared libstdc++ even where g++ is told to link it statically.

Two copies of libstdc++ in one process crash where a stream of one meets the locale of the other: on a GPU image the
extension, linked statically, died formatting an error message (benchmarks/results/2026-11-26.cuda-quick.notes.md).
libstdc++'s locale (``std::locale``, mangled ``_ZNSt6locale``) is defined only in libstdc++ itself, so an extension
that defines it has a copy of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mma_nmt._C as extension

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF linkage: Linux only")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


REPO = Path(__file__).resolve().parents[3]


def needed_libraries(library: str) -> list[str]:
    dynamic = subprocess.run([_tool("readelf"), "-d", library], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in dynamic.stdout.splitlines() if "(NEEDED)" in line]


def libstdcxx_locale_definitions(library: str) -> list[str]:
    symbols = subprocess.run([_tool("nm"), "-D", "--defined-only", library], capture_output=True, text=True, check=True)
    names = [line.split()[-1] for line in symbols.stdout.splitlines() if line.strip()]
    return [name for name in names if name.startswith("_ZNSt6locale")]


def assert_shares_libstdcxx(library: str) -> None:
    needed = needed_libraries(library)
    assert "libstdc++.so.6" in needed, f"{library} does not need libstdc++.so.6; it needs {needed}"
    locale = libstdcxx_locale_definitions(library)
    assert not locale, (f"{library} defines {len(locale)} symbols of libstdc++'s std::locale (e.g. {locale[0]}): it "
                        f"carries a static copy of libstdc++")


def test_extension_shares_the_shared_libstdcxx():
    assert_shares_libstdcxx(extension.__file__)


PROBE_PROJECT = """\
cmake_minimum_required(VERSION 3.18)
project(probe LANGUAGES CXX)
include("{module}")
# -static-libstdc++ stands for a toolchain that links libstdc++.a (the GPU image of
# benchmarks/results/2026-11-26.cuda-quick.notes.md).
add_library(static_probe MODULE probe.cpp)
target_link_options(static_probe PRIVATE -static-libstdc++)
add_library(shared_probe MODULE probe.cpp)
target_link_options(shared_probe PRIVATE -static-libstdc++)
mma_nmt_link_shared_libstdcxx(shared_probe)
"""

PROBE_SOURCE = """\
#include <sstream>
#include <string>
std::string probe_format(long value) { std::ostringstream out; out << "got " << value; return out.str(); }
"""


def test_cmake_function_overrides_a_static_libstdcxx(tmp_path):
    cmake = _tool("cmake")
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    source = tmp_path / "source"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROBE_PROJECT.format(module=REPO / "cmake" / "shared_libstdcxx.cmake"))
    (source / "probe.cpp").write_text(PROBE_SOURCE)
    build = tmp_path / "build"
    for command in ([cmake, "-S", source, "-B", build, "-DCMAKE_CXX_COMPILER=g++"], [cmake, "--build", build]):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    static_probe, shared_probe = (str(next(build.glob(f"{name}.so*"))) for name in ("libstatic_probe", "libshared_probe"))
    # The stand-in is real: without the function the probe carries libstdc++ ...
    assert "libstdc++.so.6" not in needed_libraries(static_probe)
    assert libstdcxx_locale_definitions(static_probe)
    # ... and with it, the same flags give a probe that shares the shared libstdc++.
    assert_shares_libstdcxx(shared_probe)
