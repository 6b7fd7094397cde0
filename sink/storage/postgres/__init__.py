"""The PostgreSQL adapter: any number of runsink processes share one database.

``store.py`` is the domain's port; as SQLite has too ``retention.py``, ``mail.py``,
``runs.py``, ``webhooks.py``, ``migrate.py`` and ``sql/``; beside them what only a shared
database has: ``batch.py`` (group commit), ``slots.py`` (one wait per inbox, fleet-wide),
``breakers.py`` (the fleet's breakers), ``listener.py`` (wake-ups across replicas),
``feed.py`` (every replica's live events), ``space.py`` (a full disk), and ``driver.py``
(asyncpg's edge). Imported only for a postgresql:// URL (it brings asyncpg).
"""
