"""Logs used by the Slack tests: shaped like real vLLM output (line formats from public vLLM issues)."""

KV_CACHE_LOG = """\
INFO 11-18 18:07:20 model_runner.py:1072] Loading model weights took 14.9916 GB
INFO 11-18 18:07:27 worker.py:232] Memory profiling takes 6.12 seconds
ERROR 11-18 18:07:28 engine.py:366] Traceback (most recent call last):
ERROR 11-18 18:07:28 engine.py:366]   File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 493, in raise_if_cache_size_invalid
ERROR 11-18 18:07:28 engine.py:366]     raise ValueError("No available memory for the cache blocks. "
ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
"""
KV_CACHE_CASE = "kv-cache-no-memory"

CHATTER = [
    "anyone else seeing errors with vllm today?",
    "the deploy failed again, I'll look after lunch",
    "Traceback reading group is at 3pm :)",
    "我们的 vLLM 服务今天好像有点慢，有人知道原因吗？",
    "I got a ValueError when I ran it, any idea?",
    "ok\nthanks\nsee you",
]
