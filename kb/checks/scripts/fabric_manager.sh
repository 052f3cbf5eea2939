# NVSwitch systems (HGX/DGX) need nvidia-fabricmanager running, or CUDA init fails with error 802.
n=$(ls /dev/nvidia-nvswitch* 2>/dev/null | wc -l)
echo "nvswitches=$n"
if command -v systemctl >/dev/null 2>&1; then
  state=$(systemctl is-active nvidia-fabricmanager 2>/dev/null)
  echo "state=${state:-unknown}"
else
  echo "state=unknown"
fi
