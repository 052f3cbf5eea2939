# OS, kernel and C library of the host (no Python needed).
echo "kernel=$(uname -r)"
echo "machine=$(uname -m)"
if [ -r /etc/os-release ]; then . /etc/os-release; echo "os=${PRETTY_NAME:-$NAME}"; fi
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
echo "glibc=${glibc:-unknown}"
if command -v gcc >/dev/null 2>&1; then echo "gcc=$(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"; fi
if [ -f /.dockerenv ] || grep -qE 'docker|kubepods|containerd' /proc/1/cgroup 2>/dev/null; then
  echo "container=1"; else echo "container=0"; fi
exit 0
