# The installed vllm distribution and the installed versions of what it requires, read from package
# metadata only: vllm itself is NOT imported. The runner checks the pins. Prints one JSON line.
import json
import os
import platform
import re
import sys

try:
    from importlib import metadata
except ImportError:  # Python < 3.8
    print(json.dumps({"installed": False, "executable": sys.executable, "error": "Python too old"}))
    sys.exit(0)

out = {
    "executable": sys.executable,
    "env": {
        "python_version": "%d.%d" % sys.version_info[:2],
        "python_full_version": platform.python_version(),
        "platform_machine": platform.machine(),
        "platform_system": platform.system(),
        "platform_release": platform.release(),
        "sys_platform": sys.platform,
        "os_name": os.name,
        "implementation_name": sys.implementation.name,
        "platform_python_implementation": platform.python_implementation(),
    },
}
try:
    dist = metadata.distribution("vllm")
except metadata.PackageNotFoundError:
    out["installed"] = False
    print(json.dumps(out))
    sys.exit(0)
requires = list(dist.requires or [])
versions = {}
for req in requires + ["torch"]:  # torch is always reported, even when the metadata does not pin it
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not m or m.group(1) in versions:
        continue
    try:
        versions[m.group(1)] = metadata.version(m.group(1))
    except metadata.PackageNotFoundError:
        versions[m.group(1)] = None
out.update(installed=True, version=dist.version, location=str(dist.locate_file("")), requires=requires,
           versions=versions)
print(json.dumps(out))
