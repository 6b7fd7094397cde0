"""The SMTP adapter. A message's path, one file a step:

- ``loop.py``: the connection's command loop reads each line (aiosmtpd's loop, leaner);
- ``protocol.py``: the connection (its gate, ``limits.py``, TLS from ``tls.py``, AUTH from
  ``auth.py``) parses MAIL, RCPT and DATA with the pure grammar of ``syntax.py``;
- ``handler.py``: the hooks ask ``sink/ingest.py`` to route each recipient and store the
  message at the final dot, and turn each answer into a reply code;
- ``setup.py``: aiosmtpd's per-connection set-up, learned once.
"""
