# Processes holding GPU memory, with their state, parent and command line (read from /proc), and each
# GPU's memory (used by anyone, also processes of other containers that the list above cannot show).
# Output lines: "gpu bus=B total_mib=T used_mib=U", "app pid=P bus=B used_mib=M name=N",
# "proc pid=P state=S ppid=Q", "cmdline pid=P ARGS".
apps=$(nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv,noheader,nounits) || {
  rc=$?; printf '%s\n' "$apps" >&2; exit "$rc"; }
gpus=$(nvidia-smi --query-gpu=pci.bus_id,memory.total,memory.used --format=csv,noheader,nounits) || {
  rc=$?; printf '%s\n' "$gpus" >&2; exit "$rc"; }
printf '%s\n' "$gpus" | while IFS=', ' read -r bus total used; do
  [ -n "$bus" ] && printf 'gpu bus=%s total_mib=%s used_mib=%s\n' "$bus" "$total" "$used"
done
describe() {
  [ -r "/proc/$1/stat" ] || return 0
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  set -- "$1" $(printf '%s\n' "$stat" | sed 's/^.*) //')
  printf 'proc pid=%s state=%s ppid=%s\n' "$1" "$2" "$3"
  printf 'cmdline pid=%s %s\n' "$1" "$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)"
  if [ -r "/proc/$3/cmdline" ]; then
    printf 'cmdline pid=%s %s\n' "$3" "$(tr '\0' ' ' < "/proc/$3/cmdline" 2>/dev/null)"
  fi
}
printf '%s\n' "$apps" | while IFS= read -r line; do
  case "$line" in ''|*"No running"*) continue ;; esac
  bus=$(printf '%s' "${line%%,*}" | tr -d ' ')
  rest=${line#*,}
  pid=$(printf '%s' "${rest%%,*}" | tr -d ' ')
  mem=$(printf '%s' "${line##*,}" | tr -d ' ')
  name=${rest#*,}; name=${name%,*}; name=$(printf '%s' "$name" | sed 's/^ *//; s/ *$//')
  printf 'app pid=%s bus=%s used_mib=%s name=%s\n' "$pid" "$bus" "$mem" "$name"
  describe "$pid"
done
