"""The Slack bot. Read in this order:

    app.py            the only slack_bolt import: WebClient, App, HTTP server, Socket Mode
    server.py         SlackBot: pipeline + App + transport + /health, started and stopped together
    events/ commands/ actions/ shortcuts/ views/
                      one listener per file, named after Slack's own concepts; they parse, ack and
                      hand slow work to deps.workers
    conversation.py   placeholder → pipeline → answer → progressive LLM text → files in the thread
    reply/            pure Block Kit builders by feature (golden-tested; kit.py: shared pieces);
                      reply/mrkdwn.py escapes every untrusted string
    hosts.py          bridge to Pipeline.diagnose for /vllm-diagnose; usergroups.py: the asker's user groups
    seen_events.py    drops Slack's retries of an event already handled
    recent.py, thread_facts.py, store.py
                      answers the buttons need and each thread's last host diagnosis, in memory and in
                      SQLite (they survive a restart)
"""
