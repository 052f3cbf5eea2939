"""Growing the KB from Slack and the CLI (issue 6). One concern per module:

    growth.py       KBGrowth: the façade the Slack listeners and `vllm-doctor kb add|search|stats|review` use
    form.py         a case as typed in a form (text boxes) → validated Case, errors per field
    suggest.py      pre-fill from a log: signatures (generalised root error lines), title, area, example
    lint.py         KB rules beyond the schema: examples hit own signatures, none fire on healthy logs
    duplicates.py   nearest existing cases with their similarity (the live pipeline's own diagnosis)
    writer.py       Case → kb/cases/<area>/<id>.yaml: atomic, under a file lock, id collisions renamed
    caseyaml.py     Case ⇄ YAML text (house format, round-trip checked)
    gitcommit.py    optional commit of a case file with the author's name (argv, never a shell)
    db.py           the SQLite file (WAL) behind:
    feedback.py       votes (one per user per answer), outcomes "solved 9 of 10", the bounded ranking prior
    candidates.py     logs that got "unknown" or "Didn't help" (redacted), folded by fingerprint
    submissions.py    draft → pending → approved/rejected, one decision per submission
    sync.py         case files written on one replica reach every other one (shared database)
"""

from bot.kb_growth.form import CaseForm
from bot.kb_growth.growth import KBGrowth, ReviewerPolicy

__all__ = ["CaseForm", "KBGrowth", "ReviewerPolicy"]
