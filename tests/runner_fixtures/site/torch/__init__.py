"""Stand-in for a CUDA build of torch on a fake GPU host (tests only).

Behaves like the real thing where the probes look: the profile's torch.json gives the build (version,
CUDA, arch list) and the machine (GPUs, the driver's CUDA version). CUDA_VISIBLE_DEVICES is applied the
way the CUDA runtime does (enumeration stops at the first index that does not exist), and a driver older
than the build gives torch's own "driver too old" warning and no devices; `init_warning` is the warning
torch gives when CUDA cannot start at all (no driver, Error 802 with the fabric manager down).
"""

import json
import os
import warnings


def _load():
    for d in os.environ.get("FAKEGPU_DIRS", "").split(":"):
        path = os.path.join(d, "torch.json")
        if d and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    raise ImportError("fake torch: no torch.json in FAKEGPU_DIRS")


_P = _load()
if _P.get("import_signal"):  # a torch build for another CPU dies while loading its libraries
    import signal

    os.kill(os.getpid(), getattr(signal, _P["import_signal"]))
if _P.get("import_error"):
    raise ImportError(_P["import_error"])

__version__ = _P["version"]


def _tuple(v):
    return tuple(int(x) for x in str(v).split("."))


class version:  # noqa: N801 - mirrors torch.version
    cuda = _P.get("cuda")
    hip = None
    debug = False


def _driver_too_old():
    return bool(version.cuda) and _tuple(_P["driver_cuda"])[:1] < _tuple(version.cuda)[:1]


def _visible():
    physical = len(_P.get("gpus", []))
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(range(physical))
    out = []
    for part in cvd.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= physical:
            break
        out.append(int(part))
    return out


class _Nccl:
    @staticmethod
    def version():
        return tuple(_P.get("nccl_version", (2, 27, 3)))


class _Cuda:
    nccl = _Nccl()

    @staticmethod
    def is_available():
        if _P.get("init_warning"):  # CUDA could not start at all: torch's own warning, no devices
            warnings.warn(_P["init_warning"])
            return False
        if _driver_too_old():
            found = "".join("%d%02d" % (a, b) for a, b in [_tuple(_P["driver_cuda"])[:2]]) + "0"
            warnings.warn(
                "CUDA initialization: The NVIDIA driver on your system is too old (found version %s). Please "
                "update your GPU driver by downloading and installing a new version from the URL: "
                "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install "
                "a PyTorch version that has been compiled with your version of the CUDA driver." % found
            )
            return False
        return bool(version.cuda) and bool(_visible())

    @staticmethod
    def device_count():
        return 0 if _driver_too_old() or _P.get("init_warning") else len(_visible())

    @staticmethod
    def get_device_capability(i):
        return tuple(_P["gpus"][_visible()[i]]["capability"])

    @staticmethod
    def get_device_name(i):
        return _P["gpus"][_visible()[i]]["name"]

    @staticmethod
    def get_arch_list():
        return list(_P.get("arch_list", []))


cuda = _Cuda()


class _Cudnn:
    @staticmethod
    def version():
        return _P.get("cudnn_version")


class backends:  # noqa: N801
    cudnn = _Cudnn()
