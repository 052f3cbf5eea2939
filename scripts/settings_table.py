"""Print the README settings table from bot/settings.py (one source of truth).

    .venv/bin/python scripts/settings_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.settings import Settings  # noqa: E402


def rows() -> list[tuple[str, str, str]]:
    out = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        env = alias.choices[0] if alias is not None and hasattr(alias, "choices") else name.upper()
        default = field.default if field.default_factory is None else "(computed)"
        if default is None:
            default = "unset"
        out.append((str(env), f"`{default}`", (field.description or "").replace("\n", " ")))
    return out


def main() -> None:
    print("| variable | default | meaning |\n|---|---|---|")
    for env, default, desc in rows():
        print(f"| `{env}` | {default} | {desc} |")


if __name__ == "__main__":
    main()
