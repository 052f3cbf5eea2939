# Is the model directory ($1) complete? config.json readable, safetensors headers parse, index consistent.
# Reads at most a few kB per file (the header), never the weights. Prints one JSON line.
import json
import os
import struct
import sys

path = sys.argv[1]
out = {"path": path, "exists": os.path.isdir(path)}
if out["exists"]:
    out["config"] = os.path.isfile(os.path.join(path, "config.json"))
    if out["config"]:
        try:
            with open(os.path.join(path, "config.json")) as f:
                cfg = json.load(f)
            out["architectures"] = cfg.get("architectures")
            out["model_type"] = cfg.get("model_type")
        except Exception as exc:
            out["config_error"] = "%s: %s" % (type(exc).__name__, exc)
    bad, total, names = [], 0, []
    for name in sorted(os.listdir(path)):
        if not name.endswith(".safetensors"):
            continue
        names.append(name)
        full = os.path.join(path, name)
        size = os.path.getsize(full)
        total += size
        try:
            with open(full, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                if n > 100 * 1024 * 1024 or 8 + n > size:
                    raise ValueError("header length %d beyond file size %d" % (n, size))
                header = json.loads(f.read(n))
            end = max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] or [0])
            if 8 + n + end > size:
                raise ValueError("file is %d bytes, tensors need %d (partial download?)" % (size, 8 + n + end))
        except Exception as exc:
            bad.append("%s: %s" % (name, exc))
    out.update(safetensors=len(names), bad=bad, weights_bytes=total)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index) as f:
                wanted = sorted(set(json.load(f)["weight_map"].values()))
            out["missing_shards"] = [w for w in wanted if w not in names]
        except Exception as exc:
            out["index_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
