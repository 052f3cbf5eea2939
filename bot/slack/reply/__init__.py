"""Block Kit builders, one module per feature: pure functions from pipeline values to Slack payloads."""
