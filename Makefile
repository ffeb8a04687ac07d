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

# torch is pinned first (the CPU wheel on disk); an unpinned torch could pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
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
