"""Storage: the port (``base.py``), the backend bundle chosen by URL (``backend.py``), and
the adapters: the peers ``sqlite/`` and ``postgres/``, and ``memory.py`` for tests and the
fake. Storage never knows SMTP or HTTP exist."""
