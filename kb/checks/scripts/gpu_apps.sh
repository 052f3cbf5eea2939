# Processes holding GPU memory, with their state, parent and command line (read from /proc).
# Output lines: "app pid=P used_mib=M name=N", "proc pid=P state=S ppid=Q", "cmdline pid=P ARGS".
apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits) || {
  rc=$?; printf '%s\n' "$apps" >&2; exit "$rc"; }
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
  pid=$(printf '%s' "${line%%,*}" | tr -d ' ')
  mem=$(printf '%s' "${line##*,}" | tr -d ' ')
  name=${line#*,}; name=${name%,*}; name=$(printf '%s' "$name" | sed 's/^ *//; s/ *$//')
  printf 'app pid=%s used_mib=%s name=%s\n' "$pid" "$mem" "$name"
  describe "$pid"
done
