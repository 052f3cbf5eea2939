# GET one URL from the host itself (the vLLM server usually listens on localhost only) and print the
# response as one JSON line. argv[1] is the base URL from the inventory, argv[2] the fixed path.
import json
import sys
import time
import urllib.error
import urllib.request

url = sys.argv[1].rstrip("/") + sys.argv[2]
limit = 4 * 1024 * 1024
out = {"url": url}
start = time.time()
try:
    req = urllib.request.Request(url, headers={"User-Agent": "vllm-doctor"})
    with urllib.request.urlopen(req, timeout=float(sys.argv[3]) if len(sys.argv) > 3 else 5) as resp:
        out["status"] = resp.status
        out["content_type"] = resp.headers.get("Content-Type")
        out["body"] = resp.read(limit).decode("utf-8", "replace")
except urllib.error.HTTPError as exc:
    out["status"] = exc.code
    out["body"] = exc.read(65536).decode("utf-8", "replace")
except Exception as exc:
    reason = getattr(exc, "reason", exc)
    out["error"] = "%s: %s" % (type(exc).__name__, reason)
out["elapsed_ms"] = round((time.time() - start) * 1000, 1)
print(json.dumps(out))
