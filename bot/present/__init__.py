"""Presentation: diagnoses and reports turned into English or Chinese text, pictures and report drafts, independent
of Slack (bot/slack/reply/ builds Slack blocks from the same values)."""
