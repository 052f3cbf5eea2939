"""The paste flow's stages (explain): decode and redact at the entry, distil, read facts and frames, rank the KB
cases, read versions, the root line and the fit values. Pure values in, values out (bot/models.py); no Slack, no text
for people (bot/present/ words it)."""
