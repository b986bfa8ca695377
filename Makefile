# Two entry points that set themselves up on a fresh machine:
#   make demo   - train a small model with monitoring on, write TensorBoard logs
#   make test   - the whole test suite
# Both create .venv (Python >= 3.10) and install the package with its extras.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev,tensorflow,agents,jax]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/keras-gradmon demo

# tf-agents needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, and
# Keras picks its backend once per process, so their tests and the JAX
# backend's (tests/jax) run in processes of their own.
# Each process runs its tests on both cores (pytest-xdist, a test file per
# worker at a time: the fixtures a file shares are built once).
XDIST := -n 2 --dist loadfile
test: $(STAMP)
	$(PY) -m ruff check .
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q $(XDIST) --ignore=tests/agents
	KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q $(XDIST) tests/jax
	TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q $(XDIST) tests/agents

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) benchmarks/bench_keras.py

clean:
	rm -rf $(VENV) runs
