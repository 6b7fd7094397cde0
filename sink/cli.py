"""The ``runsink`` command: ``serve`` (SMTP + HTTP in one process) and ``mcp`` (stdio)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from sink import __version__
from sink.config import add_serve_arguments, settings_from
from sink.errors import ConfigError, StorageError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runsink", description="An SMTP sink with run-scoped inboxes for CI and LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"runsink {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the SMTP sink and the HTTP API")
    add_serve_arguments(serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return 2  # pragma: no cover - argparse requires a command


def _serve(args: argparse.Namespace) -> int:
    from sink import logs
    from sink.runtime import serve

    try:
        settings = settings_from(args, os.environ)
    except ConfigError as exc:
        print(f"runsink: {exc.message}", file=sys.stderr)
        return 2
    logs.setup(settings.log_level)
    # The composition root: the only place in sink/ that names the HTTP layer.
    from api.app import create_app

    try:
        asyncio.run(serve(settings, create_app))
    except StorageError as exc:
        print(f"runsink: --db {settings.db}: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"runsink: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
