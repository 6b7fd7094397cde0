"""The ``runsink`` command: ``serve`` (SMTP + HTTP in one process) and ``mcp`` (stdio)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections.abc import Coroutine
from functools import partial
from typing import Any

from sink import __version__
from sink.config import Settings, add_serve_arguments, settings_from
from sink.errors import ConfigError, StorageError

_DEFAULT_URL = "http://127.0.0.1:8025"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runsink", description="An SMTP sink with run-scoped inboxes for CI and LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"runsink {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the SMTP sink and the HTTP API")
    add_serve_arguments(serve)
    mcp = commands.add_parser(
        "mcp", help="serve the MCP tools over stdio, answered by a running runsink server"
    )
    mcp.add_argument(
        "--url", help=f"the server's HTTP API (env RUNSINK_URL; default {_DEFAULT_URL})"
    )
    mcp.add_argument(
        "--api-token",
        help="its bearer token (env RUNSINK_API_TOKEN); a run token (POST "
        "/v1/runs/{run_id}/token) confines the tools to that one run",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "mcp":
        return _mcp(args)
    return 2  # pragma: no cover - argparse requires a command


def _serve(args: argparse.Namespace) -> int:
    # The imports below make ~60,000 objects that live as long as the process; the cyclic
    # collector's passes over them while they are made find nothing (~10 ms of start-up).
    # Afterwards they are frozen out of its later passes, and it runs as usual.
    gc.disable()
    try:
        # The composition root: the HTTP app and the MCP endpoint over one runtime.
        from api.app import create_app
        from api.mcp_route import LazyMcp
        from api.serve import serve
        from sink import logs
    finally:
        gc.freeze()
        gc.enable()
    try:
        settings = settings_from(args, os.environ)
    except ConfigError as exc:
        print(f"runsink: {exc.message}", file=sys.stderr)
        return 2
    logs.setup(settings.log_level)
    logs.quiet_http_server("uvicorn.access", "uvicorn", "uvicorn.error")
    mcp = LazyMcp()
    try:
        _run(serve(settings, partial(create_app, mcp=mcp), mcp.running), settings)
    except ConfigError as exc:
        print(f"runsink: {exc.message}", file=sys.stderr)
        return 2
    except StorageError as exc:
        print(f"runsink: --db {settings.store}: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"runsink: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _run(main: Coroutine[Any, Any, None], settings: Settings) -> None:
    """Run the server on uvloop where it is installed (``--event-loop``), else asyncio's loop.

    uvloop does the sockets and the event loop in C: about a third less CPU per message.
    """
    if settings.event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if settings.event_loop == "uvloop":
                main.close()
                raise ConfigError("--event-loop uvloop: uvloop is not installed") from None
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def _mcp(args: argparse.Namespace) -> int:
    from sink.mcp.stdio import run

    url = args.url or os.environ.get("RUNSINK_URL") or _DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        print(f"runsink: --url {url!r}: expected an http:// or https:// URL", file=sys.stderr)
        return 2
    token = args.api_token or os.environ.get("RUNSINK_API_TOKEN") or None
    asyncio.run(run(url, token))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
