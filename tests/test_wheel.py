"""The wheel as users get it: built from this tree, installed non-editable into a new venv, and
run from there with no checkout on the path: the CLI, the server, the labeling service and its
migrations must find every file they read (the contracts in ``schemas/`` above all) inside it.

The new venv reuses this venv's installed dependencies through a ``.pth`` line (the issue allows
it: reinstalling torch and friends would take minutes); the code under test comes from the wheel.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import site
import sqlite3
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from support import PAGE_ONE, free_port, stop_server, wait_ready, words_of

from extractor import samples
from extractor.replies.schemas import importable_errors

ROOT = Path(__file__).resolve().parent.parent
# What a build reads from the tree (the rest of a checkout is not shipped).
BUILD_INPUTS = ("pyproject.toml", "README.md", "extractor", "schemas")

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site_packages: Path
    work: Path

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment without anything that would put a checkout on the path."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith(("EXTRACTOR_", "VIRTUAL_ENV"))
        }
        return {**env, "EXTRACTOR_CACHE_DIR": str(self.work / "cache"), **extra}

    def run(self, *command: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / command[0]), *command[1:]], cwd=self.work,
            env=self.env(**extra), capture_output=True, text=True, timeout=120,
        )  # fmt: skip


def _pip(*command: str) -> None:
    """Run pip; a failure shows pip's own words (a bare exit status says nothing of why)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    # Built from a copy: building in the tree leaves build/ and *.egg-info behind, and two test
    # runs building at once would share them.
    source = work / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _pip(*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(work / "dist"),
         str(source))  # fmt: skip
    (wheel,) = (work / "dist").glob("extractor-*.whl")

    venv = work / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    site_packages = Path(purelib)
    # This venv's dependencies, after the new venv's own site-packages: a plain path line, so the
    # editable install's finder (a .pth of this venv) is not loaded there.
    reused = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (site_packages / "zz_reuse_test_dependencies.pth").write_text("\n".join(reused) + "\n")
    _pip(*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel))
    return Installed(wheel, venv, site_packages, work)


def test_the_wheel_carries_every_module_and_the_contracts(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    modules = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "extractor").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    # A package missing from pyproject.toml's explicit list would be missing here.
    assert modules - names == set()
    contracts = {f"extractor/contracts/{p.name}" for p in (ROOT / "schemas").iterdir()}
    assert contracts and contracts <= names
    assert not any(name.startswith("schemas/") for name in names)  # no top-level package


def test_the_installed_package_reads_the_contracts_through_importlib_resources(
    installed: Installed,
) -> None:
    probe = (
        "import json, extractor, extractor.replies.schemas as s, extractor.web.openapi as o;"
        "from extractor.labeling.graphql import labeling_schema;"
        "print(json.dumps([extractor.__file__, str(s.SCHEMAS_DIR / 'labeling.graphql'),"
        " sorted(o.load_openapi()['paths']), labeling_schema().query_type.name]))"
    )
    result = installed.run("python", "-c", probe)
    assert result.returncode == 0, result.stderr
    package, contracts, paths, query = json.loads(result.stdout)
    assert Path(package).is_relative_to(installed.site_packages)
    assert Path(contracts) == installed.site_packages / "extractor/contracts/labeling.graphql"
    assert "/extract" in paths and query == "Query"


def test_extract_runs_from_the_wheel(installed: Installed) -> None:
    page = samples.text_page(PAGE_ONE)
    (installed.work / "page.png").write_bytes(samples.encode_image(page.image, "PNG"))
    result = installed.run("extractor", "extract", "page.png", "--format", "json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert importable_errors(reply) == []
    text = " ".join(cell["content"] for cell in reply["cells"])
    assert {"invoice", "garden", "harbor", "warehouse"} <= words_of(text)


@pytest.fixture
def server(installed: Installed) -> Iterator[str]:
    port = free_port()
    log = (installed.work / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(installed.venv / "bin" / "extractor"), "serve", "--bind", f"127.0.0.1:{port}",
         "--workers", "1"],
        cwd=installed.work, env=installed.env(), stdout=subprocess.DEVNULL, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        stop_server(process)
        log.close()


def test_serve_runs_from_the_wheel(installed: Installed, server: str) -> None:
    with urllib.request.urlopen(server + "/readyz", timeout=10) as reply:
        assert reply.status == 200
    openapi = httpx.get(server + "/openapi.json", timeout=10).json()
    assert "Importable" in openapi["components"]["schemas"]
    page = samples.text_page(PAGE_ONE)
    reply = httpx.post(
        server + "/extract",
        files={"upload": ("page.png", samples.encode_image(page.image, "PNG"), "image/png")},
        headers={"Accept": "text/plain"},
        timeout=60,
    )
    assert reply.status_code == 200
    assert {"invoice", "garden", "harbor", "warehouse"} <= words_of(reply.text)
    # A PDF: its pages are rendered by `python -m extractor.media.pdfrender`, found in the install.
    pdf = samples.pdf([samples.text_page(PAGE_ONE, page=i) for i in range(2)])
    reply = httpx.post(
        server + "/extract",
        files={"upload": ("two.pdf", pdf, "application/pdf")},
        headers={"Accept": "application/json"},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert {label["pageIndex"] for label in reply.json()["labels"]} == {0, 1}


def test_labeling_migrate_runs_from_the_wheel(installed: Installed) -> None:
    data = installed.work / "labeling"
    result = installed.run(
        "extractor", "labeling", "migrate", EXTRACTOR_LABELING_DATA_DIR=str(data)
    )
    assert result.returncode == 0, result.stderr
    migrations = installed.site_packages / "extractor" / "labeling" / "migrations" / "versions"
    heads = {p.stem.split("_", 1)[0] for p in migrations.glob("*.py")}
    with sqlite3.connect(data / "labeling.db") as db:
        (version,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version.split("_", 1)[0] == max(heads)


def test_the_labeling_service_serves_from_the_wheel(installed: Installed) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data_dir = str(installed.work / "labeling-serve")
    env = installed.env(EXTRACTOR_LABELING_DATA_DIR=data_dir)
    added = installed.run(
        "extractor", "labeling", "add-user", "wheel@example.com",
        EXTRACTOR_LABELING_DATA_DIR=data_dir,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    token = json.loads(added.stdout)["token"]
    process = subprocess.Popen(
        [str(installed.venv / "bin" / "extractor"), "labeling", "serve", "--bind",
         f"127.0.0.1:{port}"],
        cwd=installed.work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        reply = httpx.post(
            url + "/graphql", json={"query": "query { getPersonalTags { id name } }"},
            headers={"Authorization": f"Bearer {token}"}, timeout=10,
        )  # fmt: skip
        assert reply.json()["data"] == {"getPersonalTags": []}
    finally:
        stop_server(process)
