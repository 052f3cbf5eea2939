"""Print the settings table of docs/settings.md from bot/settings.py (one source of truth).

    .venv/bin/python scripts/settings_table.py [--write]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.settings import Settings, env_name  # noqa: E402


def rows() -> list[tuple[str, str, str]]:
    out = []
    for name, field in Settings.model_fields.items():
        env = env_name(name)
        default = field.default if field.default_factory is None else "(computed)"
        if default is None:
            default = "unset"
        out.append((str(env), f"`{default}`", (field.description or "").replace("\n", " ")))
    return out


def table() -> str:
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    lines += [f"| `{env}` | {default} | {desc} |" for env, default, desc in rows()]
    return "\n".join(lines)


def main() -> None:
    """Print the table, or with --write replace it in docs/settings.md between the settings markers."""
    if "--write" in sys.argv:
        readme = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
        text = readme.read_text(encoding="utf-8")
        start, end = "<!-- settings:start -->", "<!-- settings:end -->"
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        readme.write_text(f"{head}{start}\n{table()}\n{end}{tail}", encoding="utf-8")
    else:
        print(table())


if __name__ == "__main__":
    main()
