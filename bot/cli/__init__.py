"""`vllm-doctor …`, one module per command group (parsers are cheap to build; heavy imports are lazy):

    main.py       entry point, explain / index / eval / kb list|lint|show
    kb.py         kb add | search | stats | review | sync (KB growth)
    diagnose.py   diagnose HOST|GROUP | --local (host checks)
    serve.py      serve [--http] (the Slack bot)
"""
