"""Measuring the diagnosis: labelled logs (`vllm-doctor eval`), k-fold tuning, variants, the team-learning replay and
the learned ranker's training (`vllm-doctor train`). Not on the answer path."""
