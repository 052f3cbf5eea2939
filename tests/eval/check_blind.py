"""Check a blind round (tests/eval/blindN.jsonl and root_labels_blindN.jsonl) before it is committed; the suite runs
it on every round since 13 (tests/test_eval.py).

    python tests/eval/check_blind.py N

Checks: the five keys of every entry, unique `bN-` ids used by no other eval file, `expected` a KB case id or null,
thread sources used by no other eval file nor cited by a KB case (bot.evaluation.eval_tuning.normalise_url), written
logs marked as such (`bN-w-` ids, `written:<GitHub file URL>` sources), at most 3 thread logs per repository (12 for
vllm-project/vllm), written logs at most 40 % of the round, 36-50 logs; root labels: exact keys, one per log,
`root_line` in range with `root_text` equal to that line stripped (both null together), a known component.
Prints the counts the round's README section reports.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from bot.evaluation.eval_tuning import normalise_url, repository  # noqa: E402  (the checkout's own, after sys.path)
from bot.models import COMPONENTS  # noqa: E402

KB = HERE.parents[1] / "kb" / "cases"
URL_RE = re.compile(r"https?://[^\s'\"<>)\]]+")
THREAD_RE = re.compile(r"https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+$")


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check(n: int) -> tuple[list[str], dict[str, object]]:
    """The round's errors (empty when it may be committed) and its counts."""
    errors: list[str] = []
    name, prefix = f"blind{n}.jsonl", f"b{n}-"
    logs, labels = rows(HERE / name), rows(HERE / f"root_labels_blind{n}.jsonl")
    kb_ids, kb_urls = set(), set()
    for path in KB.glob("*/*.yaml"):
        text = path.read_text(encoding="utf-8")
        if m := re.search(r"^id:\s*(\S+)", text, re.M):
            kb_ids.add(m.group(1).strip("'\""))
        kb_urls |= {normalise_url(u) for u in URL_RE.findall(text)}
    others = [r for p in sorted(HERE.glob("*.jsonl")) if p.name != name and not p.name.startswith("root_labels")
              for r in rows(p) if "log" in r]
    used_ids = {r["id"] for r in others}
    used_urls = {normalise_url(str(r["source"])) for r in others}

    seen: set[str] = set()
    per_repo: Counter[str] = Counter()
    written = 0
    for i, r in enumerate(logs, 1):
        if set(r) != {"id", "log", "expected", "source", "note"}:
            errors.append(f"{i}: keys {sorted(r)}")
            continue
        rid, src = r["id"], r["source"]
        if not rid.startswith(prefix):
            errors.append(f"{i}: id {rid} lacks the {prefix} prefix")
        if rid in seen or rid in used_ids:
            errors.append(f"{i}: id {rid} used twice or by another eval file")
        seen.add(rid)
        if r["expected"] is not None and r["expected"] not in kb_ids:
            errors.append(f"{i}: expected {r['expected']!r} is not a KB case id")
        if not r["log"].strip() or not r["note"].strip():
            errors.append(f"{i}: empty log or note")
        is_written = src.startswith("written:")
        if is_written != rid.startswith(prefix + "w-"):
            errors.append(f"{i}: {rid}: written logs, and only they, have {prefix}w- ids and written: sources")
        if is_written:
            written += 1
            if not src.removeprefix("written:").startswith("https://github.com/"):
                errors.append(f"{i}: written source should name a GitHub file: {src}")
            continue
        if not THREAD_RE.match(src):
            errors.append(f"{i}: source is not a GitHub issue/PR URL: {src}")
        if normalise_url(src) in used_urls or normalise_url(src) in kb_urls:
            errors.append(f"{i}: thread {src} already used by another eval file or cited by a KB case")
        per_repo[repository(src)] += 1

    threads = [r for r in logs if not str(r.get("source", "")).startswith("written:")]
    for url, k in Counter(normalise_url(r["source"]) for r in threads).items():
        if k > 1:
            errors.append(f"thread {url} used {k} times")
    for repo, k in per_repo.items():
        if k > (cap := 12 if repo == "vllm-project/vllm" else 3):
            errors.append(f"repository {repo} has {k} thread logs (cap {cap})")
    if not 36 <= len(logs) <= 50:
        errors.append(f"{len(logs)} logs, expected 36-50")
    if logs and written / len(logs) > 0.40:
        errors.append(f"written logs are {written}/{len(logs)} > 40 %")

    by_id = {r["id"]: r for r in logs}
    components: Counter[str] = Counter()
    for i, r in enumerate(labels, 1):
        if set(r) != {"id", "root_line", "root_text", "component"} or r["id"] not in by_id:
            errors.append(f"root {i}: keys {sorted(r)} or an id not in {name}")
            continue
        components[r["component"]] += 1
        if r["component"] not in COMPONENTS:
            errors.append(f"root {i}: bad component {r['component']}")
        lines, rl, rt = by_id[r["id"]]["log"].split("\n"), r["root_line"], r["root_text"]
        if rl is None or rt is None:
            if rl is not None or rt is not None:
                errors.append(f"root {i}: root_line and root_text must be null together")
        elif not isinstance(rl, int) or not 1 <= rl <= len(lines) or rt != lines[rl - 1].strip() or not rt:
            errors.append(f"root {i}: root_line {rl} out of range, or root_text differs from that line")
    if sorted(r["id"] for r in labels) != sorted(by_id):
        errors.append("root labels are not exactly one per log")

    covered = sum(r.get("expected") is not None for r in logs)
    t_cov = sum(r.get("expected") is not None for r in threads)
    counts: dict[str, object] = {
        "logs": len(logs), "thread": len(threads), "thread_covered": t_cov, "written": written,
        "written_covered": covered - t_cov, "uncovered": len(logs) - covered,
        "thread_repositories": dict(per_repo.most_common()), "components": dict(components.most_common()),
        "root_line_null": sum(r.get("root_line") is None for r in labels),
        "covered_cases": dict(Counter(r["expected"] for r in logs if r.get("expected")).most_common()),
    }
    return errors, counts


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python tests/eval/check_blind.py N", file=sys.stderr)
        return 2
    errors, counts = check(int(argv[0]))
    print(json.dumps(counts, ensure_ascii=False, indent=1))
    for e in errors:
        print("ERROR", e)
    print(f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
