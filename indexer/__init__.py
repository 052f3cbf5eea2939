"""Build and query the KB search index (BM25 + MiniLM/FAISS). Knows kb/, not Slack or the LLM.

Importing this package is cheap: it loads neither torch nor faiss. Use
`from indexer.index import KBIndex, Hit` and `from indexer.encoder import SentenceTransformerEncoder`.
"""
