# make bench        the benchmark suite (under 10 minutes on 2 cores): benchmarks/results/<date>.md and .json
# make bench-quick  the same at smaller sizes (about a minute; written as <date>.quick.md)
# make test         the Python tests, then the GoogleTest suite when the extension was built with it
# make test-cuda    the CUDA suite, on a machine with a GPU (fails rather than skips without one)
# make bench-cuda   the CUDA benchmarks (benchmarks/results/<date>.cuda.md), on a machine with a GPU
PYTHON ?= python

.PHONY: bench bench-quick bench-cuda test test-cuda

bench:
	$(PYTHON) -m benchmarks

bench-quick:
	$(PYTHON) -m benchmarks --quick

bench-cuda:
	$(PYTHON) -m benchmarks --device cuda

test:
	$(PYTHON) -m pytest
	if [ -f build/dev/CTestTestfile.cmake ]; then ctest --test-dir build/dev --output-on-failure; fi

test-cuda:
	MMA_NMT_REQUIRE_CUDA=1 $(PYTHON) -m pytest -m cuda
