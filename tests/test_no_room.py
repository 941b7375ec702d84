"""A full temporary folder: 507 with Retry-After, in each API's shape, and the worker goes on.

The server's ``--tmp-dir`` on a 1 MiB tmpfs (mounting one needs root, as CI runs): an upload
larger than the disk fails while the worker receives it, a smaller one while the view saves it.
Before, the first killed the worker (an OSError out of its main loop) and the second was a 500.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from flask import Flask
from support import start_server, stop_server, worker_pids

from extractor import samples
from extractor.config import Settings
from extractor.web.app import create_app


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "tiny"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_uploads_that_do_not_fit_get_507_and_the_worker_serves_on(tiny_disk: Path) -> None:
    url, server = start_server("--workers", "1", "--tmp-dir", str(tiny_disk))
    try:
        (worker,) = worker_pids(server.pid)
        for seconds in (60, 17):  # 1.9 MB: no room to receive it; 0.5 MB: none to save it
            wav = samples.silence_and_noise(seconds)
            ours = httpx.post(url + "/extract", files={"upload": ("a.wav", wav)}, timeout=60)
            assert ours.status_code == 507, (seconds, ours.text)
            assert ours.headers["Retry-After"] == "30"
            assert ours.json()["error"]["code"] == "insufficient_storage"
            assert "no room" in ours.json()["error"]["message"]
            openai = httpx.post(
                url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav)},
                data={"model": "whisper-1"}, timeout=60,
            )  # fmt: skip
            assert openai.status_code == 507, (seconds, openai.text)
            assert openai.json()["error"]["code"] == "insufficient_storage"
        png = samples.encode_image(samples.text_page(["Room again"]).image, "PNG")
        page = httpx.post(url + "/extract", files={"upload": ("p.png", png)}, timeout=60)
        assert page.status_code == 200, page.text
        assert worker_pids(server.pid) == [worker], "the worker was replaced"
    finally:
        stop_server(server)
    assert list(tiny_disk.iterdir()) == [], "a refused request left files behind"


def test_any_other_os_error_is_still_an_unexplained_500() -> None:
    """Only a full disk or quota is a 507: a missing file or a refused permission is our bug."""
    app: Flask = create_app(Settings())

    def boom() -> str:
        raise PermissionError(13, "Permission denied", "/srv/secret")

    app.add_url_rule("/boom", "boom", boom)
    reply = app.test_client().get("/boom")
    assert reply.status_code == 500
    assert reply.get_json()["error"]["code"] == "internal_server_error"
    assert "/srv/secret" not in reply.get_data(as_text=True)
