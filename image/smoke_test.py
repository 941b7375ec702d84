"""Run the built image as a user would and check it works: ``python image/smoke_test.py IMAGE``.

Checks, against a container started with a read-only root filesystem: ``/readyz`` answers 200,
a generated page is read by OCR, espeak-ng speech is transcribed, the server does not run as
root, the build left no pip configuration behind, the HEALTHCHECK is in the image config and
passes, and the image stays within its size budget (IMAGE_MAX_MB, default 700, as ``podman
images`` counts). An image built with base among its MODELS (its ``io.github.extractor.models``
label) also answers ``?model=base`` on German speech with German text labelled ``de``, and
lists base among the installed models when a request names one it lacks. Prints the image size.
``--brief`` checks only the start, the models and the size: for an image whose other layers were
checked already (``make image-test``'s image with base).

Runs where `make image-test` runs: podman with runc (crun fails on this kind of machine's
cgroups), the host's network (nothing to map), ulimits within the hard limits.
Needs the extractor's venv (for its sample generators) and espeak-ng on the host.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from extractor import samples

PAGE = ["Invoice number 4417 for garden tools", "Delivered to Harbor Street warehouse"]
SPOKEN = "The weather is sunny today and we will walk to the park"
SPOKEN_DE = "Guten Morgen. Heute ist das Wetter sehr schön, und wir fahren mit dem Zug nach Berlin."
MAX_MB = float(os.environ.get("IMAGE_MAX_MB", "700"))
# The engine to check: EXTRACTOR_ASR_ENGINE=openai-whisper for an ENGINES=openai image.
ENGINE = os.environ.get("EXTRACTOR_ASR_ENGINE", "faster-whisper")
READY_SECONDS = 180  # a cold start on 2 busy cores: Tesseract's check and the model load


def container_limits() -> tuple[int, int]:
    """Open files and processes for a container: within the hard limits, which podman's defaults
    exceed here. (An nproc of 65536 was refused with EPERM under gVisor; 32768 is accepted.)"""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    return nofile, nproc


def podman_run_args() -> list[str]:
    """``podman run`` options this kind of machine needs (see the module docstring)."""
    nofile, nproc = container_limits()
    return [
        "--runtime", "runc", "--network", "host",
        "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}",
    ]  # fmt: skip


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], check=check, capture_output=True, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def words(text: str) -> set[str]:
    return {w.strip(".,!?;:'\"").casefold() for w in text.split()}


def post(url: str, name: str, data: bytes, accept: str, query: str = "") -> str:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url + "/extract" + query, data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Accept": accept},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as reply:
        return str(reply.read().decode())


@contextmanager
def container(image: str, port: int) -> Iterator[str]:
    name = f"extractor-smoke-{uuid.uuid4().hex[:8]}"
    try:
        podman(
            "run", "--detach", "--name", name, *podman_run_args(), "--read-only",
            "--env", f"EXTRACTOR_BIND=127.0.0.1:{port}", "--env", "EXTRACTOR_WORKERS=1",
            "--env", f"EXTRACTOR_ASR_ENGINE={ENGINE}", image,
        )  # fmt: skip
        yield name
    except BaseException:
        print(podman("logs", "--tail", "40", name, check=False).stderr, file=sys.stderr)
        raise
    finally:
        podman("rm", "--force", "--time", "10", name, check=False)


def wait_ready(url: str, name: str) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        if state != "running":
            raise SystemExit(f"container {name} is {state}")
        time.sleep(1)
    raise SystemExit(f"{url}/readyz did not answer 200 in {READY_SECONDS} s")


def main(image: str, *, brief: bool = False) -> None:
    config = json.loads(podman("image", "inspect", image).stdout)[0]
    healthcheck = (config.get("Config") or {}).get("Healthcheck") or config.get("Healthcheck")
    assert healthcheck and healthcheck.get("Test"), "no HEALTHCHECK in the image config"
    size = podman("images", "--format", "{{.Size}}", image).stdout.split("\n")[0].strip()
    size_mb = config["Size"] / 1e6  # podman images counts in SI megabytes
    labels = (config.get("Config") or {}).get("Labels") or config.get("Labels") or {}
    models = labels.get("io.github.extractor.models", "tiny.en").split()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with container(image, port) as name:
        wait_ready(url, name)
        ready_after = time.monotonic() - started
        if not brief:
            check_everything(url, name)
        if "base" in models:
            check_base(url)

    print(
        f"image {image} ({' '.join(models)}): {size} ({size_mb:.0f} MB), ready in"
        f" {ready_after:.0f} s"
    )
    assert size_mb <= MAX_MB, f"the image is {size_mb:.0f} MB, over the {MAX_MB:.0f} MB budget"


def check_everything(url: str, name: str) -> None:
    """OCR of a page and a PDF, English speech, the uid, no build traces, the health check."""
    page = samples.text_page(PAGE)
    text = post(url, "page.png", samples.encode_image(page.image, "PNG"), "text/plain")
    missing = words(" ".join(PAGE)) - words(text)
    assert not missing, f"OCR missed {missing}: {text!r}"

    # Two pages: one read inside the worker, one by the CLI, both rendered by a renderer
    # process of the PDF's own (RLIMIT_AS under the container's limits, read-only root).
    pages = [samples.text_page(PAGE, page=i) for i in range(2)]
    pdf_text = post(url, "two.pdf", samples.pdf(pages), "text/plain")
    missing = words(" ".join(PAGE)) - words(pdf_text)
    assert not missing and len(pdf_text.splitlines()) >= 2 * len(PAGE), f"PDF: {pdf_text!r}"

    transcript = post(url, "speech.wav", samples.speech_wav(SPOKEN), "text/plain")
    heard = words(transcript) & words(SPOKEN)
    assert len(heard) >= 0.7 * len(words(SPOKEN)), f"transcribed {transcript!r}"

    status = podman("exec", name, "cat", "/proc/1/status").stdout
    uid = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert "0" not in uid, f"the server runs as uid {uid}"

    # The build's pip configuration, CA bundle and index mounts left nothing behind.
    leftovers = podman(
        "exec", name, "sh", "-c", "ls -A /mnt; find / -xdev -name pip.conf 2>/dev/null; true"
    ).stdout.split()
    assert not leftovers, f"build mounts left traces in the image: {leftovers}"

    health = podman("healthcheck", "run", name, check=False)
    assert health.returncode == 0, f"HEALTHCHECK failed: {health.stdout} {health.stderr}"
    print(f"ok: /readyz 200, OCR, a PDF, speech {transcript!r}, uid {uid[0]}, health check")


def check_base(url: str) -> None:
    """base, from the image's model cache: German speech heard as German, and listed."""
    reply = json.loads(
        post(url, "sprache.wav", samples.speech_wav(SPOKEN_DE, voice="de"), "application/json",
             query="?model=base")
    )  # fmt: skip
    text = " ".join(cell["content"] for cell in reply["cells"])
    heard = words(text) & words(SPOKEN_DE)
    assert reply.get("language") == "de", f"base labelled German {reply.get('language')!r}"
    assert len(heard) >= 0.5 * len(words(SPOKEN_DE)), f"base transcribed {text!r}"
    try:
        post(url, "sprache.wav", b"RIFF", "application/json", query="?model=no-such-model")
        raise AssertionError("an unknown model was accepted")
    except urllib.error.HTTPError as error:
        refusal = error.read().decode()
        assert error.code == 400 and "base" in refusal, f"{error.code}: {refusal}"
    print(f"ok: model=base heard German as {reply.get('language')!r}: {text!r}")


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--brief"]
    main(arguments[0] if arguments else "localhost/extractor:latest", brief="--brief" in sys.argv)
