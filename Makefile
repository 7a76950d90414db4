# make bench        the benchmark suite (under 10 minutes on 2 cores): benchmarks/results/<date>.md and .json
# make bench-quick  the same at smaller sizes (about a minute; written as <date>.quick.md)
# make test         the Python tests, then the GoogleTest suite when the extension was built with it
PYTHON ?= python

.PHONY: bench bench-quick test

bench:
	$(PYTHON) -m benchmarks

bench-quick:
	$(PYTHON) -m benchmarks --quick

test:
	$(PYTHON) -m pytest
	if [ -f build/dev/CTestTestfile.cmake ]; then ctest --test-dir build/dev --output-on-failure; fi
