"""The SQLite adapter (the embedded default): one file, one writer thread.

``store.py`` is the domain's port; ``writer.py`` the one writer thread (group commit);
``fts.py`` the full-text index kept beside the mail; as PostgreSQL has too ``retention.py``,
``mail.py``, ``runs.py``, ``webhooks.py``, ``migrate.py`` and ``sql/``.
"""
