#!/usr/bin/env bash
# Builds the project's venv from requirements.lock (hashes required), never from a fresh resolve.
#
#   scripts/setup_venv.sh [VENV]          default .venv
#
# The venv is built beside the old one (VENV.new) and swapped in only when every install step passed, so a
# missing package or a hash mismatch leaves pip's own error and the previous venv, never half a venv.
# A stamp (hash of the lock, pyproject.toml and this script) makes a re-run free.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${1:-.venv}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3

"$python" scripts/check_lock.py

# The machine's pip.conf (extra local indexes, caps) is not ours: only the lock, PyPI and the torch wheel count.
export PIP_CONFIG_FILE=/dev/null
want="$(cat requirements.lock "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
want_project="$(sha256sum pyproject.toml | cut -c1-16)"
stamp="$venv/.installed-lock"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/vllm-doctor" ]; then
    # Same lock: at most the project's own metadata (entry points, package data) changed.
    if [ "$(cat "$venv/.installed-project" 2>/dev/null)" != "$want_project" ]; then
        PYTHONWARNINGS=ignore "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
        echo "$want_project" >"$venv/.installed-project"
    fi
    exit 0
fi

new="$venv.new"
rm -rf "$new"
"$python" -m venv "$new"
# torch 2.13.0+cpu is a local wheel (PyPI has only CUDA builds of 2.13.0); its hash is in the lock.
pip=("$new/bin/python" -m pip install -q --disable-pip-version-check --find-links /opt/wheels)
"${pip[@]}" --require-hashes -r requirements.lock
# The project itself, editable, with nothing new resolved (its dependencies all came from the lock).
PYTHONWARNINGS=ignore "${pip[@]}" --no-deps --no-build-isolation -e .  # no setuptools editable-mode banner
"$new/bin/python" -m pip check -q >/dev/null || { "$new/bin/python" -m pip check >&2; exit 1; }

# Swap in. A venv records its own path in its scripts: rewrite it (only paths under the new folder).
rm -rf "$venv"
mv "$new" "$venv"
abs_new="$(pwd)/$new" abs_venv="$(pwd)/$venv"
grep -rlF "$abs_new" "$venv/bin" 2>/dev/null | while read -r f; do
    sed -i "s|$abs_new|$abs_venv|g" "$f"
done
echo "$want" >"$stamp"
echo "$want_project" >"$venv/.installed-project"
echo "setup: $venv installed from requirements.lock ($(grep -c '^[a-zA-Z]' requirements.lock) pinned packages)"
