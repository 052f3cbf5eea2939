"""Print the ids of the seeded sample of dev.jsonl labelled in root_labels.jsonl (with all of blind.jsonl).

    python tests/eval/sample_root_labels.py
"""
import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def sample_ids() -> list[str]:
    ids = [json.loads(line)["id"] for line in (HERE / "dev.jsonl").read_text().splitlines() if line.strip()]
    return random.Random(25).sample(sorted(ids), 120)


if __name__ == "__main__":
    for i in sample_ids():
        print(i)
