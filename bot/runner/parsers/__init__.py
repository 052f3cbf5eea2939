"""Output parsers by name (the `parser:` field of a check). Importing this package registers them all.

To add one: write a function in the module for its area, decorate it with
`@parser("name", [facts…])`, and use the name in kb/checks/*.yaml.
"""

from bot.runner.parsers import env, http, kernel, libs, net, nvidia, processes, python_probes, system  # noqa: F401
from bot.runner.parsers.base import REGISTRY, Facts, Output, ParseError, Parser, Unavailable
from bot.runner.parsers.http import Sample, parse_prometheus

__all__ = ["REGISTRY", "Facts", "Output", "ParseError", "Parser", "Sample", "Unavailable", "parse_prometheus"]
