"""Every error code the HTTP API can answer is known to both clients (no drift by hand).

The codes are collected from the server's code itself: the literal ``code`` of every call that
builds an error answer in ``api/`` (``error_response``, the connection layer's early answers),
plus the tables those helpers are handed (``sink.errors``' class table, ownership refusals,
provider trouble's reasons, the local-safety refusals). A call whose code is neither a literal
nor a known table fails the collection until its source is named here, so a new code cannot
slip past. ``sink/mcp`` is left out: its tool errors go to MCP hosts, never to these clients.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from sink import errors
from sink.client import errors as client_errors

ROOT = Path(__file__).resolve().parents[1]
TS_TYPES = ROOT / "clients" / "typescript" / "src" / "types.ts"

# The functions that make an error answer, and the position of their ``code`` argument.
_MAKERS = {
    "error_response": 1,
    "_closing": 1,
    "_answer_and_close": 1,
    "_answer": 1,
    "for_error": 0,
}


def _provider_reasons() -> set[str]:
    found: set[str] = set()
    todo: list[type[errors.ProviderTrouble]] = [errors.ProviderTrouble]
    while todo:
        cls = todo.pop()
        found.add(cls.reason.value)
        todo.extend(cls.__subclasses__())
    return found


def _local_safety_refusals() -> set[str]:
    """The codes ``WriteRule.refusal`` returns, as ``(status, code, message)`` literals."""
    tree = ast.parse((ROOT / "api" / "local_safety.py").read_text())
    return {
        node.value.elts[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Return)
        and isinstance(node.value, ast.Tuple)
        and len(node.value.elts) == 3
        and isinstance(node.value.elts[1], ast.Constant)
        and isinstance(node.value.elts[1].value, str)
    }


# (file, function) -> where the codes of its non-literal error answers come from.
_TABLES: dict[tuple[str, str], Callable[[], set[str]]] = {
    ("api/errors.py", "runsink_error"): lambda: (
        {code for _, _, code in errors.STATUS_AND_CODE} | set(errors.REFUSAL_STATUS)
    ),
    ("api/errors.py", "trouble_response"): _provider_reasons,
    ("api/local_safety.py", "__call__"): _local_safety_refusals,
}


def _calls(tree: ast.AST) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call]]:
    """Each call to an error maker, with the function it is made in."""
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = func.id if isinstance(func, ast.Name) else None
                    if isinstance(func, ast.Attribute) and func.attr == "_answer_and_close":
                        name = func.attr
                    if name in _MAKERS:
                        yield function, node


def _code_argument(call: ast.Call, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "code":
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def server_error_codes() -> set[str]:
    """Every ``error.code`` the HTTP API can answer with, read from its code."""
    codes: set[str] = set()
    unexplained: list[str] = []
    for path in sorted((ROOT / "api").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for function, call in _calls(ast.parse(path.read_text())):
            name = call.func.id if isinstance(call.func, ast.Name) else "_answer_and_close"
            code = _code_argument(call, _MAKERS[name])
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                codes.add(code.value)
            elif (where, function.name) in _TABLES:
                codes |= _TABLES[where, function.name]()
            elif function.name in _MAKERS and isinstance(code, ast.Name) and code.id == "code":
                continue  # a maker handing its own ``code`` on: its callers are collected
            else:
                unexplained.append(f"{where}:{call.lineno} {function.name}: {ast.unparse(call)}")
    assert not unexplained, "error answers whose code this test cannot collect:\n" + "\n".join(
        unexplained
    )
    return codes


def typescript_error_codes() -> set[str]:
    source = TS_TYPES.read_text()
    found = re.search(r"export const ERROR_CODES = \[(.*?)\] as const;", source, re.S)
    assert found, "clients/typescript/src/types.ts: no ERROR_CODES list"
    return set(re.findall(r'"([a-z_]+)"', found.group(1)))


def test_the_collection_finds_codes_from_every_source() -> None:
    """The collector reads literals, the class table, refusals, trouble and local safety."""
    codes = server_error_codes()
    for code in (
        "over_capacity",  # a literal in api/
        "request_timeout",  # an early answer of the connection layer
        "webhook_disabled",  # sink.errors.STATUS_AND_CODE
        "claimed_by_other_run",  # an ownership refusal
        "provider_timeout",  # provider trouble
        "cross_site_request",  # a local-safety refusal
    ):
        assert code in codes


def test_the_typescript_client_knows_every_error_code() -> None:
    """clients/typescript's ERROR_CODES lists every code the server can answer with."""
    missing = server_error_codes() - typescript_error_codes()
    assert not missing, f"add to ERROR_CODES (and errors.ts' CLASSES): {sorted(missing)}"


def test_the_python_client_knows_every_error_code() -> None:
    """sink.client's ERROR_CODES lists every code the server can answer with."""
    missing = server_error_codes() - set(client_errors.ERROR_CODES)
    assert not missing, f"add to sink/client/errors.py ERROR_CODES: {sorted(missing)}"


def test_an_error_that_says_retry_after_carries_the_header() -> None:
    """internal_error (500) says retry_after: Retry-After comes with it, as the envelope
    section asks of every retry_after (it came only where the caller gave the header)."""
    from api.errors import error_response

    response = error_response(500, "internal_error", "the server failed; retry")
    assert json.loads(bytes(response.body))["retry_after"] == 1.0
    assert response.headers["retry-after"] == "1"
    refused = error_response(422, "invalid_request", "x: missing")  # no retry_after, no header
    assert "retry-after" not in refused.headers
