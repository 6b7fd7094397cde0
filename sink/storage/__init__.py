"""Storage: the port (``base.py``), the backend bundle chosen by URL (``backend.py``), and
the adapters: the peers ``sqlite/`` and ``postgres/`` (what they read and write alike in
``rows.py``, their route cache in ``routecache.py``), and ``memory.py`` (with
``memory_webhooks.py``) for tests and the fake. Storage never knows SMTP or HTTP exist."""
