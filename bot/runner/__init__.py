"""Host checks: the allow-listed check catalogue (kb/checks) run on inventory hosts over SSH, or here.

Stages, in flow order (bot/pipeline.py: Pipeline.diagnose composes them):

    access.py     validate the target, parse chat requests, who may check which hosts (default deny)
    inventory.py  hosts and groups (own YAML or Ansible YAML; ~/.ssh/config honoured)
    catalogue.py  the check catalogue and which checks a request selects
    engine.py     run the checks on many hosts at once over a transport: ssh.py | local.py
    parsers/      command output → facts; rules.py: facts → verdicts and KB cases
    report.py     FleetReport read back from JSON (the values live in bot/models.py)
    audit.py      every run and refusal, in SQLite

Importing this package is cheap: asyncssh is loaded only when a remote run starts.
"""
