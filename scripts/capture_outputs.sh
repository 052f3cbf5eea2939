#!/usr/bin/env bash
# scripts/capture_outputs.sh OUTDIR: eval and explain outputs whose bytes must not change in a refactor (issue 30):
# run it before and after (PYTHONHASHSEED=0), then diff -r the two folders with the timings blanked:
#   diff <(sed -E "s/[0-9.]+ ms|\"elapsed_ms\": [0-9.]+//g" A/f) <(sed -E "...same..." B/f)
set -u
out=$1; mkdir -p "$out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
vd=.venv/bin/vllm-doctor
$vd eval tests/eval/blind.jsonl --errors --no-questions > "$out/eval-blind.txt" 2>&1
$vd eval tests/eval/blind12.jsonl --json --no-questions > "$out/eval-blind12.json" 2>&1
for f in tests/fit_fixtures/*.log; do
  n=$(basename "$f" .log)
  $vd explain "$f" --no-llm > "$out/$n.en.txt" 2>&1
  $vd explain "$f" --no-llm --lang zh > "$out/$n.zh.txt" 2>&1
  $vd explain "$f" --no-llm --json > "$out/$n.json" 2>&1
done
python3 - "$out" <<'PY'
import json, subprocess, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open("tests/eval/blind.jsonl") if l.strip()][:12]
for r in rows:
    p = subprocess.run([".venv/bin/vllm-doctor", "explain", "-", "--no-llm", "--json"], input=r["log"], text=True, capture_output=True)
    open(f"{out}/blind-{r['id']}.json", "w").write(p.stdout + p.stderr)
    p = subprocess.run([".venv/bin/vllm-doctor", "explain", "-", "--no-llm", "--lang", "zh"], input=r["log"], text=True, capture_output=True)
    open(f"{out}/blind-{r['id']}.zh.txt", "w").write(p.stdout + p.stderr)
PY
