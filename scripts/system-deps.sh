#!/usr/bin/env bash
# System packages the test suite needs: a real OpenSSH sshd on 127.0.0.x (runner integration tests),
# plus ss and ps, which the stand-in GPU hosts use, and a PostgreSQL server (storage and replica tests
# start a throw-away one; tests/postgres_support.py).
# Idempotent; needs root (CI runs as root). Fails loudly when it cannot install.
set -euo pipefail
need=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
command -v ps >/dev/null 2>&1 || need+=(procps)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing system packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p /run/sshd 2>/dev/null || true
echo "system deps ok: $(/usr/sbin/sshd -V 2>&1 | head -1 || true); $(ls -d /usr/lib/postgresql/*/bin | head -1)"
