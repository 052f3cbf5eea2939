# NVIDIA Xid error lines from the kernel log (needs root or kernel.dmesg_restrict=0). grep: 1 = none.
dmesg 2>&1 | grep -E 'NVRM: Xid|Operation not permitted|Permission denied' | tail -n 200 | {
  out=$(cat); case "$out" in *"not permitted"*|*"Permission denied"*) echo "$out" >&2; exit 2 ;; esac
  [ -n "$out" ] && printf '%s\n' "$out"; [ -n "$out" ] || exit 1; }
