"""Explaining a paste's diagnosis, one concern per module:

    explainer.py          Explainer: orchestration, fallbacks, the KB-only answer
    prompt.py             prompt assembly and the context budget (templates in prompts/*.j2)
    answer.py             the answer's JSON schema, validation, streaming preview
    llm.py                LLMClient: the only module that imports openai
    resilience.py         circuit breaker and answer cache (in process)
    resilience_shared.py  the same two kept in the shared database, for replicas
"""
