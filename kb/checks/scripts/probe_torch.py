# torch as the host's Python sees it. Prints one JSON line. Runs in its own process (under `timeout`),
# so a broken CUDA install cannot hang or crash the runner. Python 3.8+ syntax, stdlib only.
import json
import os
import sys
import warnings

out = {"python": sys.executable, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def emit():
    print(json.dumps(out, default=str))
    sys.exit(0)


try:
    import torch
except BaseException as exc:  # ImportError, OSError (missing .so), anything raised at import time
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
    emit()

out["torch_version"] = getattr(torch, "__version__", None)
out["torch_cuda"] = getattr(torch.version, "cuda", None)
out["hip"] = getattr(torch.version, "hip", None)
try:
    out["arch_list"] = list(torch.cuda.get_arch_list())
except Exception:
    out["arch_list"] = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count()) if out["cuda_available"] else 0
        devices = []
        for i in range(out["device_count"]):
            major, minor = torch.cuda.get_device_capability(i)
            devices.append({"index": i, "name": torch.cuda.get_device_name(i), "capability": "%d.%d" % (major, minor)})
        out["devices"] = devices
    except Exception as exc:
        out["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    # e.g. "CUDA initialization: The NVIDIA driver on your system is too old (found version 12020)"
    messages = [str(w.message) for w in caught if "CUDA" in str(w.message) or "NVIDIA" in str(w.message)]
    out["cuda_warning"] = messages[0] if messages else None
if out.get("torch_cuda"):
    try:
        out["cudnn_version"] = torch.backends.cudnn.version()
    except Exception as exc:
        out["cudnn_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        version = torch.cuda.nccl.version()
        out["nccl_version"] = ".".join(str(x) for x in version) if isinstance(version, tuple) else str(version)
    except Exception:
        out["nccl_version"] = None
emit()
