"""`python -m kb lint [DIR]`: validate every case file (usable before the CLI is installed)."""

import sys
from pathlib import Path

from kb.loader import DEFAULT_CASES_DIR, load_kb


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["lint"]:
        args = args[1:]
    cases_dir = Path(args[0]) if args else DEFAULT_CASES_DIR
    kb = load_kb(cases_dir, strict=False)
    for err in kb.errors:
        print(f"ERROR {err}")
    print(f"{len(kb.cases)} cases OK, {len(kb.errors)} with errors")
    return 1 if kb.errors else 0


if __name__ == "__main__":
    sys.exit(main())
