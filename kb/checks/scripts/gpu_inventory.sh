# GPU index, name, bus id, memory and compute capability. compute_cap is a query field only since
# R510: older drivers (R470) answer 'Field "compute_cap" is not a valid field to query.' and exit 2, so
# they are asked without it and the column reads [N/A] (the GPU count must not depend on it).
fields=index,name,pci.bus_id,memory.total,memory.used
out=$(nvidia-smi --query-gpu=$fields,compute_cap --format=csv,noheader,nounits 2>&1)
rc=$?
case $out in
  *"is not a valid field"*)
    out=$(nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits 2>&1) || {
      rc=$?; printf '%s\n' "$out"; exit "$rc"; }
    printf '%s\n' "$out" | sed '/^ *$/d; s/$/, [N\/A]/'
    exit 0 ;;
esac
printf '%s\n' "$out"
exit "$rc"
