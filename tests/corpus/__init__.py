"""Mail corpora for tests and benches (``injection.py``: hostile and ordinary mail)."""
