# Active clock-event (throttle) reasons per GPU; drivers before 535 call the field clocks_throttle_reasons.
nvidia-smi --query-gpu=index,clocks_event_reasons.active,temperature.gpu --format=csv,noheader 2>/dev/null ||
  nvidia-smi --query-gpu=index,clocks_throttle_reasons.active,temperature.gpu --format=csv,noheader
