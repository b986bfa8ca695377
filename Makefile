# Two entry points that set themselves up on a fresh machine:
#   make demo   - train a small model with monitoring on, write TensorBoard logs
#   make test   - the whole test suite
# Both create .venv (Python >= 3.10) and install the package with its extras,
# with uv (the same versions as pip, downloaded and installed in parallel:
# about 16 s here against pip's 78 s); with pip where uv cannot.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := .[dev,tensorflow,agents,jax]

.PHONY: demo test test-tf test-jax test-agents lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv && \
	$(VENV)/bin/uv pip install --quiet --python $(PY) -e "$(EXTRAS)" || \
	$(PY) -m pip install --quiet --disable-pip-version-check -e "$(EXTRAS)"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/keras-gradmon demo

# tf-agents needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, and
# Keras picks its backend once per process, so their tests and the JAX
# backend's (tests/jax) run in processes of their own.
# The three run at once (`make -j3`), each printing when it ends
# (--output-sync): one alone leaves a core idle at times (its start, its
# last file, waits on subprocesses), and the others fill it.
# The TF process runs its tests on both cores (pytest-xdist, a test file per
# worker at a time: the fixtures a file shares are built once); the JAX and
# tf-agents ones share the cores with it, on one worker each.
# Four test processes share the cores, so each op runs on one thread: a
# thread pool per process would spin waiting for cores the others hold
# (about 5-12% less CPU time a file). Inter-op threads stay, for the
# multi-device collectives in tests/distribute.
PYTEST := TF_CPP_MIN_LOG_LEVEL=2 TF_NUM_INTRAOP_THREADS=1 \
	XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
	$(PY) -m pytest -q
test: $(STAMP)
	$(PY) -m ruff check .
	$(MAKE) --no-print-directory -j3 --output-sync=target test-tf test-jax test-agents

test-tf: $(STAMP)
	$(PYTEST) -n 2 --dist loadfile --ignore=tests/agents

test-jax: $(STAMP)
	KERAS_BACKEND=jax $(PYTEST) -n 1 tests/jax

test-agents: $(STAMP)
	TF_USE_LEGACY_KERAS=1 $(PYTEST) -n 1 tests/agents

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) benchmarks/bench_keras.py

clean:
	rm -rf $(VENV) runs
