"""One attempt at a delivery: sign it, POST it, say what came of it (in-process or in the
delivery child, ``child.py``).

An attempt is one POST of the delivery's stored body with fresh Standard Webhooks headers
(the timestamp is the attempt's), on ``http.py``'s kept-alive connections, no redirects
followed, its answer's head within ``ATTEMPT_S`` (the body after it only decides whether
the connection is kept). Its result is the answer's status (None: no answer) and a
short cause for anything but a 2xx: ``http_500``, ``gone`` (410), ``timeout``, ``connect``,
``tls``, ``protocol``, ``network``, never a body or a secret.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from sink.webhook_signature import signed_headers
from sink.webhooks.http import Http1, ProtocolError

ATTEMPT_S = 5.0  # an answer's head within this counts (a 2xx: delivered); else a timeout
USER_AGENT = "runsink-webhooks"


async def post(
    http: Http1, url: str, secret: str, event_id: str, timestamp: int, body: bytes
) -> tuple[int | None, str | None]:
    """(status, error) of one signed POST; error None means delivered."""
    headers = signed_headers(secret, event_id, timestamp, body)
    headers["user-agent"] = USER_AGENT
    status: int | None = None
    try:
        status = await http.post(url, body, headers, timeout_s=ATTEMPT_S)
    except TimeoutError:
        return status, "timeout"
    except (ConnectionRefusedError, socket.gaierror):
        return status, "connect"
    except ssl.SSLError:  # an untrusted certificate, or no TLS at an https URL
        return status, "tls"
    except ProtocolError:
        return status, "protocol"
    except (OSError, asyncio.IncompleteReadError):
        return status, "network"
    except Exception as exc:  # never a crash: a failed attempt, retried
        return status, type(exc).__name__.lower()
    if 200 <= status < 300:
        return status, None
    return status, "gone" if status == 410 else f"http_{status}"
