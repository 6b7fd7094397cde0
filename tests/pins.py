"""The runtime dependency pins (constraints.txt), read from the venv the suite runs in.

``python -m tests.pins > constraints.txt`` (``make constraints``) writes them;
tests/test_package.py checks that the file and the venv agree. The image installs exactly these
(Dockerfile), and ``make install`` installs the suite's venv with them as constraints, so what the
image ships is what the suite tested.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
HEADER = """\
# runsink's runtime dependencies (no test tools), pinned at the versions the suite passes with,
# for CPython 3.11 on Linux (the image's platform). Written by `make constraints`;
# tests/test_package.py checks it against the tested venv. setuptools is the build backend
# (pyproject's build-system), so the image builds runsink without downloading anything.
"""


def _wanted(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def runtime_pins() -> dict[str, str]:
    """Every distribution runsink needs at run time (extras followed), at its installed version."""
    pins: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [("runsink", frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        for line in distribution(name).requires or []:
            requirement = Requirement(line)
            if not _wanted(requirement, extras):
                continue
            dependency = canonicalize_name(requirement.name)
            try:
                pins[dependency] = distribution(dependency).version
            except PackageNotFoundError:
                raise SystemExit(f"{dependency} (needed by {name}) is not installed") from None
            todo.append((dependency, frozenset(requirement.extras)))
    return dict(sorted(pins.items()))


def build_backend() -> Requirement:
    """The build backend pyproject.toml names (setuptools), as a requirement."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (requirement,) = pyproject["build-system"]["requires"]
    return Requirement(requirement)


def read(path: Path = CONSTRAINTS) -> dict[str, str]:
    """``name==version`` lines of a constraints file, names canonical."""
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def render(pins: dict[str, str], backend_version: str) -> str:
    lines = [f"{name}=={version}" for name, version in pins.items()]
    lines.append(f"{canonicalize_name(build_backend().name)}=={backend_version}")
    return HEADER + "\n".join(lines) + "\n"


def main() -> None:
    backend = canonicalize_name(build_backend().name)
    current = read() if CONSTRAINTS.exists() else {}
    if backend not in current:
        raise SystemExit(f"add a {backend}==VERSION line to {CONSTRAINTS.name} (build-system)")
    print(render(runtime_pins(), current[backend]), end="")


if __name__ == "__main__":
    main()
