"""Local safety over real sockets: the Host check (DNS rebinding) and cross-site writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.local_safety import HostRule
from tests.support import Server, create_inbox, new_run_id, start_server

REBOUND = "rebind.attacker.example"


def _inboxes(client: httpx.Client, run_id: str) -> list[object]:
    """The run's inboxes (none for a run nobody created)."""
    response = client.get(f"/v1/runs/{run_id}")
    inboxes: list[object] = [] if response.status_code == 404 else response.json()["inboxes"]
    return inboxes


def _route_families(inbox_id: str) -> list[tuple[str, str, dict[str, object] | None]]:
    """(method, path, JSON body) of one request per route family."""
    return [
        ("GET", f"/v1/inboxes/{inbox_id}", None),
        ("POST", "/v1/inboxes", {"run_id": new_run_id(), "purpose": "p"}),
        ("POST", f"/v1/inboxes/{inbox_id}/wait", {"timeout_s": 0}),
        ("GET", "/v1/messages?query=reset", None),
        ("GET", "/v1/unrouted", None),
        ("GET", "/api/v1/messages", None),
        ("GET", "/api/v1/info", None),
        ("GET", "/", None),
        ("GET", "/caught", None),
        ("GET", "/v1/events", None),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ("GET", "/metrics", None),
        ("GET", "/openapi.json", None),
    ]


def test_a_rebound_host_is_421_on_every_route_family(server: Server) -> None:
    """Host: rebind.attacker.example is 421 naming --allowed-hosts on the API, Mailpit, UI,
    SSE, MCP and the wait path, and nothing is created."""
    with server.http() as client:
        inbox = create_inbox(client)
        for method, path, body in _route_families(inbox["inbox_id"]):
            response = client.request(
                method,
                path,
                json=body,
                headers={"Host": f"{REBOUND}:{server.http_port}", "Accept": "*/*"},
            )
            assert response.status_code == 421, (method, path, response.text)
            error = response.json()["error"]
            assert error["code"] == "host_not_allowed" and "--allowed-hosts" in error["message"]
            assert response.headers["x-trace-id"]


def test_loopback_names_and_literals_are_served(server: Server) -> None:
    """localhost, 127.0.0.1 and [::1] (any port) are served, the health checks as any route."""
    with server.http() as client:
        for host in ("localhost", f"localhost:{server.http_port}", "127.0.0.1:1", "[::1]:9"):
            response = client.get("/v1/messages?query=reset", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)
            for path in ("/healthz", "/readyz"):
                assert client.get(path, headers={"Host": host}).status_code == 200, (path, host)


def test_a_host_is_a_loopback_literal_only_as_a_whole(server: Server) -> None:
    """``[::1]`` followed by anything but a port is another name (421); an empty port
    (``localhost:``, RFC 3986 3.2.3) is the same host and is served."""
    with server.http() as client:
        for host in (f"[::1]{REBOUND}", f"[::1].{REBOUND}", "[::1]:80x", "localhost:80x"):
            response = client.get("/v1/messages", headers={"Host": host})
            assert response.status_code == 421, (host, response.text)
        for host in ("localhost:", "127.0.0.1:", "[::1]:"):
            response = client.get("/v1/messages", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)


def test_the_health_checks_follow_the_host_rule_too(server: Server) -> None:
    """The contract's "on every route": /healthz and /readyz answer 421 to a rebound name."""
    with server.http() as client:
        for path in ("/healthz", "/readyz"):
            response = client.get(path, headers={"Host": f"{REBOUND}:{server.http_port}"})
            assert response.status_code == 421, (path, response.text)
            assert response.json()["error"]["code"] == "host_not_allowed"


@pytest.fixture(scope="module")
def allowing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server started with --allowed-hosts, --allowed-origins (and the environment's list)."""
    folder: Path = tmp_path_factory.mktemp("allowing")
    running = start_server(
        folder,
        "--allowed-hosts",
        "runsink",
        "--allowed-hosts",
        "*.fleet.test",
        "--allowed-origins",
        "http://localhost:3000",
        "--allowed-origins",
        "https://app.fleet.test:443/",
        env={"RUNSINK_ALLOWED_HOSTS": "ignored.example"},
    )
    yield running
    running.stop()


def test_allowed_hosts_are_served_and_others_still_refused(allowing: Server) -> None:
    """--allowed-hosts names (and *. wildcards) are served; a flag beats the environment."""
    with allowing.http() as client:
        for host in ("runsink:8025", "a.fleet.test", "RUNSINK."):
            assert client.get("/v1/messages", headers={"Host": host}).status_code == 200, host
        for host in (REBOUND, "ignored.example", "fleet.test", "10.1.2.3"):
            assert client.get("/v1/messages", headers={"Host": host}).status_code == 421, host


def test_star_turns_the_host_check_off(tmp_path: Path) -> None:
    """RUNSINK_ALLOWED_HOSTS='*' serves any Host (documented as unsafe)."""
    running = start_server(tmp_path, env={"RUNSINK_ALLOWED_HOSTS": "*"})
    try:
        with running.http() as client:
            assert client.get("/v1/messages", headers={"Host": REBOUND}).status_code == 200
    finally:
        running.stop()


def test_a_body_that_is_not_json_is_415(server: Server) -> None:
    """text/plain, form and absent content types on a body are 415 and change nothing:
    create, claim, mint, faults and the Mailpit delete alike."""
    run_id = new_run_id("xs")
    body = f'{{"run_id": "{run_id}", "purpose": "p"}}'.encode()
    with server.http() as client:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": content_type} if content_type else {}
            for method, path in (
                ("POST", "/v1/inboxes"),
                ("POST", "/v1/messages/m_x/claim"),
                ("POST", f"/v1/runs/{run_id}/token"),
                ("POST", "/v1/faults"),
                ("DELETE", "/api/v1/messages"),
                ("POST", "/mcp"),
            ):
                response = client.request(method, path, content=body, headers=headers)
                assert response.status_code == 415, (method, path, content_type, response.text)
                assert response.json()["error"]["code"] == "unsupported_media_type"
        assert _inboxes(client, run_id) == []
        # JSON with parameters is JSON; no body at all needs no type.
        typed = {"Content-Type": "application/json; charset=utf-8"}
        assert client.post("/v1/inboxes", content=body, headers=typed).status_code == 201
        assert client.delete(f"/v1/runs/{run_id}").status_code == 204


def test_a_cross_site_write_is_403_and_a_read_is_not(server: Server) -> None:
    """A POST with Origin: evil, Origin: null or Sec-Fetch-Site: cross-site is 403; the same
    origin (also as null with Sec-Fetch-Site: same-origin), and GETs from anywhere, are not."""
    create = {"run_id": new_run_id("xs"), "purpose": "p"}
    own = f"http://127.0.0.1:{server.http_port}"
    with server.http() as client:
        for headers in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Origin": "null", "Sec-Fetch-Site": "cross-site"},  # a sandboxed mail frame
            {"Origin": "http://127.0.0.1:1"},  # another port of this host: another site
            {"Sec-Fetch-Site": "cross-site"},
            {"Origin": own, "Sec-Fetch-Site": "cross-site"},
        ):
            response = client.post("/v1/inboxes", json=create, headers=headers)
            assert response.status_code == 403, (headers, response.text)
            error = response.json()["error"]
            assert error["code"] == "cross_site_request" and "--allowed-origins" in error["message"]
        assert _inboxes(client, str(create["run_id"])) == []
        got = client.get("/v1/messages", headers={"Origin": "https://evil.example"})
        assert got.status_code == 200 and "access-control-allow-origin" not in got.headers
        same = client.post("/v1/inboxes", json=create, headers={"Origin": own})
        assert same.status_code == 201, same.text
        # A page of ours under Referrer-Policy: no-referrer: Origin null, the browser's own
        # Sec-Fetch-Site says same-origin.
        hidden = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
        assert client.post("/v1/inboxes", json=create, headers=hidden).status_code == 200


def test_a_preflight_gets_no_permissive_answer(server: Server) -> None:
    """A CORS preflight is refused and allows nothing (no Access-Control-Allow-* header)."""
    with server.http() as client:
        response = client.options(
            "/v1/inboxes",
            headers={
                "Origin": "https://evil.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
    assert response.status_code >= 400
    assert not [h for h in response.headers if h.lower().startswith("access-control-allow")]


def test_allowed_origins_may_write(allowing: Server) -> None:
    """An origin named by --allowed-origins may POST; another is still 403."""
    create = {"run_id": new_run_id("xs"), "purpose": "p"}
    with allowing.http() as client:
        allowed = {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "cross-site"}
        assert client.post("/v1/inboxes", json=create, headers=allowed).status_code == 201
        other = {"Origin": "http://localhost:3001"}
        assert client.post("/v1/inboxes", json=create, headers=other).status_code == 403


def test_an_allowed_origin_is_the_one_a_browser_sends(allowing: Server) -> None:
    """--allowed-origins https://app.fleet.test:443/ is the origin a browser sends as
    https://app.fleet.test (no default port, no slash); another port of it is not."""
    with allowing.http() as client:
        for origin, status in (
            ("https://app.fleet.test", 201),
            ("https://app.fleet.test:8443", 403),
        ):
            create = {"run_id": new_run_id("xs"), "purpose": "p"}
            response = client.post("/v1/inboxes", json=create, headers={"Origin": origin})
            assert response.status_code == status, (origin, response.text)


def test_mcp_get_stream_is_405(server: Server) -> None:
    """GET /mcp opens no stream that could hold a connection: 405 naming POST."""
    with server.http() as client:
        response = client.get("/mcp", headers={"Accept": "text/event-stream"})
    assert response.status_code == 405 and "POST" in response.headers["allow"]


def test_a_server_bound_to_every_address_serves_a_probe_by_its_container_address() -> None:
    """Bound to 0.0.0.0 (a container), any IP literal is served (an orchestrator's probe by the
    pod's address), a name only when allowed; on loopback only loopback literals are."""
    everywhere = HostRule.of("0.0.0.0", ())
    assert everywhere.serves("172.17.0.2:8025") and everywhere.serves("[fd00::2]:8025")
    assert not everywhere.serves(f"{REBOUND}:8025")
    loopback = HostRule.of("127.0.0.1", ())
    assert loopback.serves("127.0.0.1:8025") and not loopback.serves("172.17.0.2:8025")


def test_the_bound_address_is_served_however_it_is_written() -> None:
    """Bound to an IPv6 address written long (``fd00:0:0:0::2``), a browser's short form of it
    (``[fd00::2]``, any case) is the same address and is served; its neighbour is not."""
    bound = HostRule.of("FD00:0:0:0::2", ())
    for host in ("[fd00::2]:8025", "[FD00::2]", "[fd00:0:0:0:0:0:0:2]:1"):
        assert bound.serves(host), host
    assert not bound.serves("[fd00::3]:8025")
