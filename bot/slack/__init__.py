"""The Slack bot. Read in this order:

    app.py            the only slack_bolt import: WebClient, App, HTTP server, Socket Mode
    server.py         SlackBot: pipeline + App + transport + /health, started and stopped together
    deps.py           SlackDeps: what every listener gets (the Pipeline, workers, state)
    events/ commands/ actions/ shortcuts/ views/
                      one listener per file, named after Slack's own concepts; they parse, ack and
                      hand slow work to deps.workers
    conversation.py   placeholder → pipeline → answer → progressive LLM text → files in the thread
    reply/            pure Block Kit builders per feature (golden-tested); reply/mrkdwn.py escapes
                      every untrusted string
    hosts.py          /vllm-diagnose: Pipeline.diagnose with progress edits; usergroups.py: the asker's groups
    incoming.py       Slack text → the raw log; Where: where a request came from and its answer goes
    seen_events.py    drops Slack's retries of an event already being answered
    recent.py, thread_facts.py, store.py
                      answers the buttons need and each thread's last host diagnosis, in memory and in
                      SQLite (they survive a restart)
"""
