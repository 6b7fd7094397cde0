"""The code's shape that issue 25 set: small modules, peer storage adapters, a runtime that
knows no adapter. Read from the source files, so a change that breaks the shape fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 900
# The concerns both SQL adapters have, each in a module of the same name.
SHARED = {
    "__init__.py",
    "store.py",
    "retention.py",
    "mail.py",
    "runs.py",
    "webhooks.py",
    "migrate.py",
}


def test_no_module_of_sink_or_api_is_over_900_lines() -> None:
    """A module past 900 lines holds more than one concept: split it by concern."""
    long = {
        str(path.relative_to(ROOT)): n
        for folder in ("sink", "api")
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_sql_adapters_are_peers_with_the_same_file_names() -> None:
    """SQLite and PostgreSQL each keep the shared concerns in modules of the same name, and
    their migrations in their own sql/ folder."""
    for adapter in ("sqlite", "postgres"):
        folder = ROOT / "sink" / "storage" / adapter
        names = {path.name for path in folder.glob("*.py")}
        assert names >= SHARED, (adapter, SHARED - names)
        assert sorted((folder / "sql").glob("001_*.sql")), adapter


def test_the_runtime_imports_no_adapter_and_asks_no_type() -> None:
    """sink/runtime.py takes the backend from open_backend (or a test's opener): it imports
    no adapter module and never asks what type a store is."""
    tree = ast.parse((ROOT / "sink" / "runtime.py").read_text(encoding="utf-8"))
    imported = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    adapters = ("sink.storage.sqlite", "sink.storage.postgres", "sink.storage.memory")
    assert [m for m in imported if m.startswith(adapters)] == []
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
    ]
    assert calls == []


def test_no_module_of_sink_or_api_imports_another_ones_private_name() -> None:
    """A name that starts with _ is its module's own: a second module that needs it gets a
    public name in the module of its concept (as api/inputs.py's json_body), not an import."""
    private = {
        f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}"
        for folder in ("sink", "api")
        for path in (ROOT / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("sink", "api"))
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    }
    assert private == set()
