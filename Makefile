# The two commands of the README, each of which sets up what it needs on first use (scripts/setup.sh: the virtual
# environment .venv, torch, the dependencies, the build, and for the tests GoogleTest):
#   make demo         prepare Multi30k, train the tiny MMA Transformer for 3 minutes, translate, score (DEMO_ARGS=...)
#   make test         the Python tests, then the GoogleTest suite of the C++ code (what CI runs), each spread over
#                     the machine's cores (TEST_WORKERS=0 runs the Python tests in make's own process, one at a time)
# and a quick third:
#   make translate    translate SENTENCE (German) with the committed converged example model, no training
# Others:
#   make notebooks-html  execute the notebooks and write them as HTML to runs/notebooks/html/
#   make bench        the benchmark suite (under 10 minutes on 2 cores): benchmarks/results/<date>.md and .json
#   make bench-quick  the same at smaller sizes (about a minute; written as <date>.quick.md)
#   make test-cuda    the CUDA suite, on a machine with a GPU (fails rather than skips without one)
#   make bench-cuda   the CUDA benchmarks (benchmarks/results/<date>.cuda.md), on a machine with a GPU
# VENV=path picks another virtual environment (a torch already in it is kept, e.g. a CUDA build).
VENV ?= .venv
PYTHON := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
DEMO_ARGS ?=
# pytest-xdist workers of make test: one per core
TEST_WORKERS ?= auto
SENTENCE ?= Ein Mann mit einem roten Hut fährt mit dem Fahrrad durch die Stadt.
EXAMPLE ?= examples/mma_multi30k_de_en

.PHONY: setup setup-tests demo translate test test-cuda notebooks-html bench bench-quick bench-cuda

setup:
	@VENV=$(VENV) bash scripts/setup.sh

setup-tests:
	@VENV=$(VENV) bash scripts/setup.sh --tests

demo: setup
	$(PYTHON) -m mma_nmt demo $(DEMO_ARGS)

translate: setup
	@echo '$(SENTENCE)' | $(PYTHON) -m mma_nmt translate --model $(EXAMPLE) --input -

test: setup-tests
	$(PYTHON) -m pytest -n $(TEST_WORKERS)
	ctest --test-dir build/dev --output-on-failure --parallel $(shell nproc 2> /dev/null || echo 2)

notebooks-html: setup-tests
	$(PYTHON) -m mma_nmt.demos.export_notebooks

bench: setup
	$(PYTHON) -m benchmarks

bench-quick: setup
	$(PYTHON) -m benchmarks --quick

bench-cuda: setup
	$(PYTHON) -m benchmarks --device cuda

test-cuda: setup-tests
	MMA_NMT_REQUIRE_CUDA=1 $(PYTHON) -m pytest -m cuda
