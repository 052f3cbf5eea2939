"""Validate tests/eval/root_labels.jsonl against blind.jsonl and dev.jsonl.

    python tests/eval/check_root_labels.py
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
COMPONENTS = {
    "gpu-memory", "host-memory", "cuda-driver-stack", "python-packages", "model-files", "parallelism",
    "gpu-hardware", "serving-api", "engine-config", "platform", "other",
}


def load(name: str) -> dict[str, dict]:
    return {json.loads(line)["id"]: json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()}


def main() -> int:
    logs = {**load("dev.jsonl"), **load("blind.jsonl")}
    errors, seen = [], set()
    for n, line in enumerate((HERE / "root_labels.jsonl").read_text().splitlines(), 1):
        row = json.loads(line)
        if set(row) != {"id", "root_line", "root_text", "component"}:
            errors.append(f"{n}: keys {sorted(row)}")
        rid = row["id"]
        if rid in seen:
            errors.append(f"{n}: duplicate id {rid}")
        seen.add(rid)
        if rid not in logs:
            errors.append(f"{n}: unknown id {rid}")
            continue
        if row["component"] not in COMPONENTS:
            errors.append(f"{n}: bad component {row['component']}")
        lines = logs[rid]["log"].split("\n")
        rl, rt = row["root_line"], row["root_text"]
        if rl is None:
            if rt is not None:
                errors.append(f"{n}: root_text without root_line")
            continue
        if not isinstance(rl, int) or not 1 <= rl <= len(lines):
            errors.append(f"{n}: root_line {rl} out of range 1..{len(lines)}")
            continue
        if rt != lines[rl - 1].strip():
            errors.append(f"{n}: root_text differs from line {rl}")
        if not rt:
            errors.append(f"{n}: root line {rl} is blank")
    blind = set(load("blind.jsonl"))
    if not blind <= seen:
        errors.append(f"missing blind ids: {sorted(blind - seen)}")
    sys.path.insert(0, str(HERE))
    from sample_root_labels import sample_ids
    missing = set(sample_ids()) - seen
    if missing:
        errors.append(f"missing sampled dev ids: {sorted(missing)}")
    for e in errors:
        print(e)
    print(f"{len(seen)} labels, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
