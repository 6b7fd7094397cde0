"""Malformed and hostile mail over real SMTP: stored exactly, read_message never fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import Server, create_inbox, new_run_id, on_each_backend, wait


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, server: Server) -> Server:
    """Byte-exact storage is checked on each persistent backend (PostgreSQL: bytea)."""
    return on_each_backend(request, server)


BOUNDARY_BROKEN = (
    b'Content-Type: multipart/mixed; boundary="abc"\r\n\r\n'
    b"--abc\r\nContent-Type: text/plain\r\n\r\n"
    b"part one\r\n--ab\r\nno closing boundary at all\r\n"
)
DEEP = (
    b"".join(
        f'Content-Type: multipart/mixed; boundary="b{n}"\r\n\r\n--b{n}\r\n'.encode()
        for n in range(200)
    )
    + b"Content-Type: text/plain\r\n\r\ndeep inside\r\n"
)
GARBAGE_B64 = (
    b"Content-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!not base64***==\r\n"
)
GARBAGE_QP = (
    b"Content-Type: text/plain; charset=x-unknown-charset\r\n"
    b"Content-Transfer-Encoding: quoted-printable\r\n\r\n=ZZ=4=\r\nsoft=\r\nbreak =E9\r\n"
)
EIGHT_BIT = b"Content-Type: text/plain\r\n\r\ncaf\xe9 \xff\xfe bytes without a charset\r\n"
EVIL_NAMES = (
    b'Content-Type: multipart/mixed; boundary="x"\r\n\r\n'
    b"--x\r\nContent-Type: text/plain\r\n\r\nsee attachments\r\n"
    b"--x\r\nContent-Type: application/octet-stream\r\n"
    b'Content-Disposition: attachment; filename="../../etc/passwd"\r\n\r\nroot\r\n'
    b"--x\r\nContent-Type: application/octet-stream\r\n"
    b'Content-Disposition: attachment; filename="/abs/path/evil.sh"\r\n\r\nrm\r\n'
    b"--x\r\nContent-Type: application/pdf\r\n"
    b'Content-Disposition: attachment; filename="invoice\xe2\x80\xaefdp.exe"\r\n\r\nMZ\r\n'
    b"--x--\r\n"
)
CRLF_SUBJECT = b"Subject: =?utf-8?q?hello=0D=0ABcc=3A_victim=40evil=2Etest?=\r\n\r\nbody\r\n"


@pytest.mark.parametrize(
    "body",
    [BOUNDARY_BROKEN, DEEP, GARBAGE_B64, GARBAGE_QP, EIGHT_BIT, EVIL_NAMES, CRLF_SUBJECT],
    ids=[
        "broken-boundary",
        "200-deep",
        "garbage-base64",
        "garbage-qp",
        "8bit",
        "evil-names",
        "crlf-subject",
    ],
)
def test_hostile_mail_is_stored_exactly_and_readable(server: Server, body: bytes) -> None:
    """The raw bytes come back unchanged and read_message answers 200 with safe names."""
    run_id = new_run_id("hostile")
    with server.http() as client:
        inbox = create_inbox(client, run_id)
        headers = f"From: app@x.test\r\nTo: {inbox['address']}\r\n".encode()
        raw = headers + (body if body.startswith(b"Subject") else b"Subject: hostile\r\n" + body)
        with server.smtp() as smtp:
            smtp.sendmail("app@x.test", [inbox["address"]], raw)
        found = wait(client, inbox["inbox_id"], timeout_s=5).json()
        message_id = found["message"]["message_id"]
        read = client.get(f"/v1/messages/{message_id}")
        stored = client.get(f"/v1/messages/{message_id}/raw").content
    assert read.status_code == 200
    assert stored == raw
    message = read.json()
    assert "\r" not in message["subject"] and "\n" not in message["subject"]
    for attachment in message["attachments"]:
        name = attachment["filename"]
        assert "/" not in name and "\\" not in name and ".." not in name
        assert "\u202e" not in name and "\x00" not in name


def test_realistic_samples_round_trip_over_smtp(server: Server) -> None:
    """Each realistic sample message is stored byte for byte and read with codes and links."""
    samples = sorted((Path(__file__).parent / "mail").glob("*.eml"))
    assert len(samples) >= 15
    run_id = new_run_id("samples")
    with server.http() as client:
        for sample in samples:
            inbox = create_inbox(client, run_id, purpose=sample.stem[:64].replace("_", "-"))
            raw = sample.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
            with server.smtp() as smtp:
                smtp.sendmail("app@x.test", [inbox["address"]], raw)
            message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"][
                "message_id"
            ]
            read = client.get(f"/v1/messages/{message_id}")
            assert read.status_code == 200, sample.name
            assert client.get(f"/v1/messages/{message_id}/raw").content == raw, sample.name
            assert isinstance(read.json()["links"], list) and isinstance(read.json()["codes"], list)
