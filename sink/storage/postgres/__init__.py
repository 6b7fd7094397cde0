"""The PostgreSQL adapter: any number of runsink processes share one database.

``store.py`` is the domain's port; beside it what only a shared database has:
``batch.py`` (group commit), ``breakers.py`` (the fleet's breakers), ``listener.py``
(wake-ups across replicas), ``feed.py`` (every replica's live events), ``space.py`` (a
full disk), and as SQLite has too ``mail.py``, ``runs.py``, ``migrate.py`` and ``sql/``.
``driver.py`` is asyncpg's edge. Imported only for a postgresql:// URL (it brings asyncpg).
"""
