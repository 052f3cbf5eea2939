# Active clock-event (throttle) reasons per GPU. Drivers before R535 call the field
# clocks_throttle_reasons: they print 'Field "clocks_event_reasons.active" is not a valid field to query.'
# on stdout and exit 2, so only that answer selects the old name (any other failure is shown as it is).
out=$(nvidia-smi --query-gpu=index,clocks_event_reasons.active,temperature.gpu --format=csv,noheader 2>&1)
rc=$?
case $out in
  *"is not a valid field"*)
    exec nvidia-smi --query-gpu=index,clocks_throttle_reasons.active,temperature.gpu --format=csv,noheader ;;
esac
printf '%s\n' "$out"
exit "$rc"
