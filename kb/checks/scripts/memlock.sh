# Locked-memory limit (RDMA / GPUDirect need it high) and whether InfiniBand devices exist.
echo "memlock_kb=$(ulimit -l)"
n=0
[ -d /sys/class/infiniband ] && n=$(ls /sys/class/infiniband 2>/dev/null | wc -l)
echo "ib_devices=$n"
