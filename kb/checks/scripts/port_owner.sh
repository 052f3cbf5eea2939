# Who listens on TCP port $1: ss lines, then "cmdline PID ARGS" for each owning process we can see.
port=$1
out=$(ss -H -l -t -n -p "sport = :$port") || exit $?
[ -n "$out" ] || exit 0
printf '%s\n' "$out"
for pid in $(printf '%s\n' "$out" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
  printf 'cmdline %s %s\n' "$pid" "$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)"
done
