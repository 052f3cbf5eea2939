#!/usr/bin/env bash
# `make deps-latest` (not part of CI): the newest versions pyproject.toml allows, in a scratch venv, then the
# suite; prints what moved against requirements.lock and which tests broke. Changes nothing in the checkout.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${DEPS_LATEST_VENV:-.cache/deps-latest}"
export PIP_CONFIG_FILE=/dev/null HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
rm -rf "$venv"
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --find-links /opt/wheels)
"${pip[@]}" --upgrade pip setuptools
# torch stays the CPU build (a newer release from PyPI would be a multi-GB CUDA build).
mkdir -p .cache && echo 'torch==2.13.0+cpu' >.cache/deps-latest-constraints.txt
"${pip[@]}" -c .cache/deps-latest-constraints.txt 'torch==2.13.0+cpu'
"${pip[@]}" -c .cache/deps-latest-constraints.txt --upgrade --upgrade-strategy eager -e '.[test]' || { echo "deps-latest: the newest allowed set does not install"; exit 1; }
echo "== versions that differ from requirements.lock =="
"$venv/bin/python" - <<'PY'
import re, importlib.metadata as md
pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\]+)", open("requirements.lock").read(), re.M))
for name, want in sorted(pins.items()):
    try:
        got = md.version(name)
    except md.PackageNotFoundError:
        continue
    if got != want:
        print(f"  {name}: lock {want} -> newest {got}")
PY
echo "== the suite on the newest set =="
"$venv/bin/python" -m pytest -q -p no:cacheprovider -x --maxfail=25 -rf "$@" | tee .cache/deps-latest.log | tail -40
rc=${PIPESTATUS[0]}
echo "== what broke =="
grep -E "^(FAILED|ERROR) " .cache/deps-latest.log || echo "  nothing"
exit "$rc"
