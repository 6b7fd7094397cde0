"""The Python package on its own: the wheel and sdist that `python -m build` makes, installed into
a fresh venv outside the checkout, serve the UI and run the pytest plugin (issue 22 item 3);
and constraints.txt pins what the suite runs with."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import pins

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_constraints_pin_exactly_the_runtime_dependencies_the_suite_runs_with() -> None:
    """constraints.txt = runsink's runtime dependency closure at the venv's versions, plus the
    build backend (`make constraints` rewrites it)."""
    pinned = pins.read()
    backend = pins.build_backend()
    assert backend.specifier.contains(pinned.pop(backend.name)), "setuptools pin vs build-system"
    assert pinned == pins.runtime_pins(), "constraints.txt is stale: run `make constraints`"


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """`python -m build`: the sdist, then the wheel built from that sdist."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("runsink-*.whl")
    (sdist,) = out.glob("runsink-*.tar.gz")
    return Dist(wheel, sdist)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, dist: Dist) -> Path:
    """A fresh venv with only the wheel (its pinned dependencies) and pytest in it."""
    folder = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(folder / "bin" / "python")),
            *("install", "--quiet", "--no-compile", "--constraint", str(ROOT / "constraints.txt")),
            *(str(dist.wheel), "pytest"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def outside_the_checkout() -> dict[str, str]:
    """The environment for the fresh venv's programs: no PYTHONPATH, no RUNSINK_* settings."""
    return {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("RUNSINK_")
    }


def test_the_wheel_and_sdist_carry_the_ui_and_the_sql(dist: Dist) -> None:
    """Both archives hold the UI's templates and static files, the SQL migrations and py.typed."""
    wanted = [
        r"api/ui/templates/[^/]+\.html",
        r"api/ui/static/app\.css",
        r"api/ui/static/app\.js",
        r"sink/storage/sqlite/sql/001_init\.sql",
        r"sink/storage/postgres/sql/[^/]+\.sql",
        r"sink/py\.typed",
    ]
    in_wheel = zipfile.ZipFile(dist.wheel).namelist()
    with tarfile.open(dist.sdist) as sdist:
        in_sdist = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
    for pattern in wanted:
        assert any(re.fullmatch(pattern, n) for n in in_wheel), f"wheel lacks {pattern}"
        assert any(re.fullmatch(pattern, n) for n in in_sdist), f"sdist lacks {pattern}"
    assert not any(n.startswith("tests/") for n in in_wheel)


@pytest.fixture
def installed_server(venv: Path, tmp_path: Path) -> Iterator[str]:
    """`runsink serve` from the fresh venv, run outside the checkout on free ports; its URL."""
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [str(venv / "bin" / "runsink"), "serve", "--smtp-port", "0", "--http-port", "0"],
            cwd=tmp_path,
            env=outside_the_checkout(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            for line in log.read_text().splitlines():
                if '"listening"' in line:
                    port = json.loads(line)["http_port"]
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0, log.read_text()


def test_the_installed_command_serves_the_web_ui(installed_server: str) -> None:
    """The installed `runsink serve` renders the UI's runs page and serves its static files."""
    page = httpx.get(f"{installed_server}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/static/app.css" in page.text
    style = httpx.get(f"{installed_server}/static/app.css", timeout=10)
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")


def test_the_installed_pytest_plugin_runs_the_readme_example(venv: Path, tmp_path: Path) -> None:
    """The README's pytest example passes in the fresh venv (runsink_inbox from the installed
    plugin, its embedded server from the installed package)."""
    (example,) = (
        block
        for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
        if "def test_password_reset" in block
    )
    (tmp_path / "test_signup.py").write_text(example, encoding="utf-8")
    probe = "import sink; print(sink.__file__)"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        env=outside_the_checkout(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(venv)), where
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=outside_the_checkout(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{example.count('def test_')} passed" in done.stdout
