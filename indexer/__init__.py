"""Build and query the KB search index (BM25 + MiniLM/FAISS). Knows kb/, not Slack or the LLM."""
