"""Check tests/eval/blind16.jsonl and tests/eval/root_labels_blind16.jsonl before they are committed.

    python tests/eval/check_blind16.py

Checks: the five keys of every entry, unique `b16-` ids not used by dev/blind/blind12/blind13/blind14/blind15/pending, `expected` is a KB case
id or null, thread sources not used by dev/blind/blind12/blind13/blind14/blind15/pending or cited by any KB case (URLs normalised: lower case,
/pull/ = /issues/, no fragment or query, no trailing slash), written logs marked as such (`b16-w-` ids,
`written:<file URL>` sources), at most 3 thread logs per repository (12 for vllm-project/vllm), written logs at most
40 % of the round, 36-50 logs; root labels: exact keys, one per log, `root_line` in range with `root_text` equal to
that line stripped (both null together), `component` from the fixed list. Prints the counts the README reports.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
KB = HERE.parent.parent / "kb" / "cases"
OTHER_FILES = (
    "dev.jsonl",
    "blind.jsonl",
    "blind12.jsonl",
    "blind13.jsonl",
    "blind14.jsonl",
    "blind15.jsonl",
    "pending.jsonl",
)
COMPONENTS = {
    "gpu-memory",
    "host-memory",
    "cuda-driver-stack",
    "python-packages",
    "model-files",
    "parallelism",
    "gpu-hardware",
    "serving-api",
    "engine-config",
    "platform",
    "other",
}
URL_RE = re.compile(r"https?://[^\s'\"<>)\]]+")


def normalise(url: str) -> str:
    url = url.strip().lower().split("#")[0].split("?")[0].rstrip("/")
    return url.replace("/pull/", "/issues/")


def repository(url: str) -> str:
    m = re.match(r"https?://github\.com/([^/]+/[^/]+)", url.strip(), re.I)
    return m.group(1).lower() if m else url


def rows(name: str) -> list[dict]:
    path = HERE / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> int:
    errors: list[str] = []
    logs = rows("blind16.jsonl")
    labels = rows("root_labels_blind16.jsonl")

    kb_ids, kb_urls = set(), set()
    for path in KB.glob("*/*.yaml"):
        text = path.read_text(encoding="utf-8")
        m = re.search(r"^id:\s*(\S+)", text, re.M)
        if m:
            kb_ids.add(m.group(1).strip("'\""))
        kb_urls |= {normalise(u) for u in URL_RE.findall(text)}

    used_ids, used_urls = set(), set()
    for name in OTHER_FILES:
        for r in rows(name):
            used_ids.add(r["id"])
            used_urls.add(normalise(str(r["source"]).removeprefix("written:")))

    seen: set[str] = set()
    per_repo: Counter[str] = Counter()
    written = 0
    for n, r in enumerate(logs, 1):
        if set(r) != {"id", "log", "expected", "source", "note"}:
            errors.append(f"{n}: keys {sorted(r)}")
            continue
        rid, src = r["id"], r["source"]
        if not rid.startswith("b16-"):
            errors.append(f"{n}: id {rid} lacks the b16- prefix")
        if rid in seen:
            errors.append(f"{n}: duplicate id {rid}")
        if rid in used_ids:
            errors.append(f"{n}: id {rid} already used by another eval file")
        seen.add(rid)
        if r["expected"] is not None and r["expected"] not in kb_ids:
            errors.append(f"{n}: expected {r['expected']!r} is not a KB case id")
        if not r["log"].strip() or not r["note"].strip():
            errors.append(f"{n}: empty log or note")
        if src.startswith("written:"):
            written += 1
            if not rid.startswith("b16-w-"):
                errors.append(f"{n}: written log {rid} should have a b16-w- id")
            if not src.removeprefix("written:").startswith("https://github.com/"):
                errors.append(f"{n}: written source should name a GitHub file: {src}")
            continue
        if rid.startswith("b16-w-"):
            errors.append(f"{n}: {rid} has a b16-w- id but a thread source")
        if not re.match(r"https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+$", src):
            errors.append(f"{n}: source is not a GitHub issue/PR URL: {src}")
        url = normalise(src)
        if url in used_urls:
            errors.append(f"{n}: thread {src} already used by dev/blind/blind12/blind13/blind14/blind15/pending")
        if url in kb_urls:
            errors.append(f"{n}: thread {src} is cited by a KB case")
        per_repo[repository(src)] += 1

    threads = [r for r in logs if not r["source"].startswith("written:")]
    thread_urls = [normalise(r["source"]) for r in threads]
    for url, k in Counter(thread_urls).items():
        if k > 1:
            errors.append(f"thread {url} used {k} times")
    for repo, k in per_repo.items():
        cap = 12 if repo == "vllm-project/vllm" else 3
        if k > cap:
            errors.append(f"repository {repo} has {k} thread logs (cap {cap})")
    if not 36 <= len(logs) <= 50:
        errors.append(f"{len(logs)} logs, expected 36-50")
    if logs and written / len(logs) > 0.40:
        errors.append(f"written logs are {written}/{len(logs)} > 40 %")

    by_id = {r["id"]: r for r in logs}
    label_ids: set[str] = set()
    components: Counter[str] = Counter()
    null_roots = 0
    for n, r in enumerate(labels, 1):
        if set(r) != {"id", "root_line", "root_text", "component"}:
            errors.append(f"root {n}: keys {sorted(r)}")
            continue
        rid = r["id"]
        if rid in label_ids:
            errors.append(f"root {n}: duplicate id {rid}")
        label_ids.add(rid)
        if rid not in by_id:
            errors.append(f"root {n}: unknown id {rid}")
            continue
        if r["component"] not in COMPONENTS:
            errors.append(f"root {n}: bad component {r['component']}")
        components[r["component"]] += 1
        lines = by_id[rid]["log"].split("\n")
        rl, rt = r["root_line"], r["root_text"]
        if rl is None or rt is None:
            if rl is not None or rt is not None:
                errors.append(f"root {n}: root_line and root_text must be null together")
            null_roots += 1
            continue
        if not isinstance(rl, int) or not 1 <= rl <= len(lines):
            errors.append(f"root {n}: root_line {rl} out of range 1..{len(lines)}")
            continue
        if rt != lines[rl - 1].strip() or not rt:
            errors.append(f"root {n}: root_text differs from line {rl} (or is blank)")
    if label_ids != set(by_id):
        errors.append(f"root labels missing for {sorted(set(by_id) - label_ids)}")

    covered = sum(1 for r in logs if r["expected"] is not None)
    t_cov = sum(1 for r in threads if r["expected"] is not None)
    print(
        f"{len(logs)} logs: {len(threads)} thread ({t_cov} covered), {written} written "
        f"({covered - t_cov} covered); covered {covered}, uncovered {len(logs) - covered}"
    )
    print("thread repositories:", dict(per_repo.most_common()))
    print("components:", dict(components.most_common()), f"root_line null: {null_roots}")
    print("covered cases:", dict(Counter(r["expected"] for r in logs if r["expected"]).most_common()))
    for e in errors:
        print("ERROR", e)
    print(f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
