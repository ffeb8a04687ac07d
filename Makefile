# Everything a fresh machine with Python 3.11 needs: `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv demo test bench clean

venv: $(STAMP)

# torch is pinned first: pip takes a CPU wheel of 2.13.0 where its configuration finds one (a find-links folder);
# from PyPI on Linux that pin is the CUDA build (about 6 GB with its nvidia wheels). For the CPU build from the
# network: make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ugrpo demo --out runs/demo

test: $(STAMP)
	$(VENV)/bin/ruff check ugrpo tests benchmarks examples
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q --doctest-modules ugrpo

# Results go to benchmarks/results/local/ (untracked); the committed reference results stay in benchmarks/results/.
bench: $(STAMP)
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

# Only what make and the commands create: nothing tracked by git.
clean:
	rm -rf $(VENV) runs benchmarks/results/local
