"""Caught mail, search and deletes across runsink processes on one PostgreSQL.

Mail one replica answered 250 for is listed, searchable, readable and deletable through
another at once (read-your-writes across the fleet); two replicas deleting one message:
one deletes it, the other finds it gone. Real processes, a real database.
"""

from __future__ import annotations

import threading
import uuid
from email.message import EmailMessage
from typing import Any

import httpx

from tests.support import Server, create_inbox, new_run_id


def _send(server: Server, to: str, subject: str, attachment: bytes | None = None) -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "Acme <app@acme.example>", to, subject
    message.set_content(f"Your code is 482913. {subject}")
    if attachment is not None:
        message.add_attachment(attachment, maintype="application", subtype="pdf", filename="a.pdf")
    with server.smtp() as client:
        client.send_message(message)


def _search(client: httpx.Client, query: str) -> list[dict[str, Any]]:
    response = client.get("/v1/messages", params={"query": query, "limit": 100})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["messages"]
    return found


def _deleted(client: httpx.Client) -> int:
    stats = client.get("/api/v1/info").json()["RuntimeStats"]
    return int(stats["MessagesDeleted"])


def test_mail_stored_by_one_replica_is_listed_searched_and_read_on_another(
    pair: tuple[Server, Server],
) -> None:
    """Right after A's 250s, B lists, searches (text and filters) and reads the mail."""
    a, b = pair
    tag = "t" + uuid.uuid4().hex[:9]  # starts with a letter: never read as a code
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a, new_run_id("fleet"))
        _send(a, inbox["address"], f"Evidence {tag}", attachment=b"%PDF" * 100)
        _send(a, f"nobody-{tag}@gmail.com", f"Caught {tag}")

        found = _search(on_b, tag)
        assert [m["subject"].split()[0] for m in found] == ["Caught", "Evidence"]
        assert [m["subject"].split()[0] for m in _search(on_b, f"{tag} has:attachment")] == [
            "Evidence"
        ]
        assert [m["subject"] for m in _search(on_b, f"{tag} is:caught to:gmail")] == [
            f"Caught {tag}"
        ]
        assert (
            _search(on_b, f'{tag} "CODE IS 482913" -is:caught')[0]["inbox_id"]
            == (inbox["inbox_id"])
        )

        caught_id = found[0]["message_id"]
        listed = on_b.get("/v1/unrouted", params={"limit": 100}).json()["messages"]
        assert caught_id in [m["id"] for m in listed]
        read = on_b.get(f"/v1/unrouted/{caught_id}").json()
        assert read["codes"] == ["482913"] and read["caught"] is True
        assert f"Caught {tag}".encode() in on_b.get(f"/v1/unrouted/{caught_id}/raw").content
        mailpit = on_b.get("/api/v1/search", params={"query": tag}).json()
        assert mailpit["messages_count"] == 2
        assert on_b.get(f"/api/v1/message/{caught_id}").json()["Subject"] == f"Caught {tag}"


def test_two_replicas_deleting_the_same_mail_delete_it_once(
    pair: tuple[Server, Server],
) -> None:
    """Deletes race on both replicas: each answers ok, each message is deleted exactly once."""
    a, b = pair
    tag = "t" + uuid.uuid4().hex[:9]  # starts with a letter: never read as a code
    for n in range(8):
        _send(a, f"race-{n}-{tag}@gmail.com", f"Race {n} {tag}")
    with a.http() as on_a, b.http() as on_b:
        ids = [m["message_id"] for m in _search(on_b, tag)]
        assert len(ids) == 8
        before = _deleted(on_a) + _deleted(on_b)
        answers: list[int] = []
        start = threading.Barrier(2)

        def delete(client: httpx.Client) -> None:
            for entry_id in ids:
                start.wait(10)
                response = client.request("DELETE", "/api/v1/messages", json={"IDs": [entry_id]})
                answers.append(response.status_code)

        # One client per thread (httpx clients are not shared across threads here).
        with a.http() as first, b.http() as second:
            threads = [threading.Thread(target=delete, args=(c,)) for c in (first, second)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        assert answers == [200] * 16
        assert _deleted(on_a) + _deleted(on_b) - before == 8
        assert _search(on_a, tag) == [] and _search(on_b, tag) == []
        for entry_id in ids:
            assert on_a.get(f"/v1/unrouted/{entry_id}").status_code == 404
            assert on_b.get(f"/api/v1/message/{entry_id}/raw").status_code == 404


def test_caught_mail_reaches_every_replicas_stream_once_in_commit_order(
    pair: tuple[Server, Server],
) -> None:
    """Caught mail sent to A is a `message` event (caught) on A's and B's streams of every
    run, once, between the evidence committed before and after it; a run's stream never
    shows it."""
    from tests.test_ui_http import Reader

    a, b = pair
    tag = "t" + uuid.uuid4().hex[:9]  # starts with a letter: never read as a code
    run_id = new_run_id("caught-live")
    readers = [Reader(f"{b.url}/v1/events"), Reader(f"{a.url}/v1/events")]
    of_run = Reader(f"{b.url}/v1/events?run_id={run_id}")
    try:
        with a.http() as on_a:
            inbox = create_inbox(on_a, run_id)
            _send(a, inbox["address"], f"First {tag}")
            _send(a, f"nobody-{tag}@gmail.com", f"Caught {tag}")
            _send(b, inbox["address"], f"Last {tag}")
            caught_id = _search(on_a, f"{tag} is:caught")[0]["message_id"]

        def ours(events: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
            return [d for _, kind, d in events if kind == "message" and tag in d["subject"]]

        def until_last(reader: Reader) -> list[dict[str, Any]]:
            return ours(reader.until(lambda e: f"Last {tag}" in [d["subject"] for d in ours(e)]))

        on_b, on_a_seen, run_only = (until_last(r) for r in (*readers, of_run))
    finally:
        for reader in (*readers, of_run):
            reader.close()
    assert [d["subject"] for d in on_b] == [f"First {tag}", f"Caught {tag}", f"Last {tag}"]
    assert on_a_seen == on_b  # the same events, in the same order, none twice
    caught = on_b[1]
    assert caught["caught"] is True and caught["message_id"] == caught_id
    assert (caught["inbox_id"], caught["run_id"]) == (None, None)
    assert [d["subject"] for d in run_only] == [f"First {tag}", f"Last {tag}"]
