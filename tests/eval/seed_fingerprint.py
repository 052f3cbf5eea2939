"""Fingerprint of the two seed guides (../shared/seeds), so the question sets' provenance check runs where the
guides are absent (a fresh CI machine): the sorted 4-byte BLAKE2b hashes of every WINDOW-character window of each
guide, one hex per line, in seed_fingerprint.txt. Hashes, not text: the guides themselves are not copied here.

    python tests/eval/seed_fingerprint.py [SEEDS_DIR]   # rewrite seed_fingerprint.txt from the guides
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

WINDOW = 10
HERE = Path(__file__).resolve().parent
FINGERPRINT = HERE / "seed_fingerprint.txt"


def windows(text: str) -> set[str]:
    return {hashlib.blake2b(text[i:i + WINDOW].encode("utf-8"), digest_size=4).hexdigest()
            for i in range(len(text) - WINDOW + 1)}


def fingerprint(seeds: Path) -> set[str]:
    out: set[str] = set()
    for path in sorted(seeds.glob("*.txt")):
        out |= windows(path.read_text(encoding="utf-8"))
    return out


def load() -> set[str]:
    return set(FINGERPRINT.read_text(encoding="utf-8").split())


def copied(text: str, prints: set[str]) -> bool:
    """Every window of the text is a window of a guide: the text is (all but certainly) a passage of a guide."""
    own = windows(text)
    return bool(own) and own <= prints


if __name__ == "__main__":
    seeds = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2] / "shared" / "seeds"
    prints = fingerprint(seeds)
    if not prints:
        sys.exit(f"no guides in {seeds}")
    FINGERPRINT.write_text("".join(f"{h}\n" for h in sorted(prints)), encoding="utf-8")
    print(f"{len(prints)} windows from {seeds} -> {FINGERPRINT}")
