"""The README's end-to-end labeling flow runs as written: both servers, a user, an OCR project
through the local extractor, auto-labeling against a prediction API, the labels read back."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import free_port

from extractor import samples

README = Path(__file__).parent.parent / "README.md"


def readme_flow() -> str:
    text = README.read_text()
    section = text[text.index("### End to end with curl") :]
    start = section.index("```bash") + len("```bash")
    return section[start : section.index("```", start)]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("jq") is None, reason="the README flow uses jq")
def test_readme_labeling_flow(tmp_path: Path) -> None:
    script = readme_flow()
    for port in ("8000", "8100", "8200"):  # the README's ports, moved to free ones
        script = re.sub(rf"127\.0\.0\.1:{port}\b", f"127.0.0.1:{free_port()}", script)
    page = samples.text_page(["Invoice 4417 from Harbor Street", "Delivered to Acme Corp"])
    (tmp_path / "test.png").write_bytes(samples.encode_image(page.image, "PNG"))
    venv_bin = Path(sys.executable).parent  # `extractor` and `python` of this venv
    env = {**os.environ, "EXTRACTOR_SECRET": "", "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    # Files, not pipes: the servers the flow leaves running would hold pipes open.
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(
            ["bash", "-c", "set -euo pipefail\n" + script], cwd=tmp_path, env=env,
            stdout=out_file, stderr=err_file, start_new_session=True,
        )  # fmt: skip
        try:
            process.wait(timeout=240)
        finally:
            with contextlib.suppress(ProcessLookupError):  # the servers it started
                os.killpg(process.pid, signal.SIGTERM)
    out, err = out_path.read_text(), err_path.read_text()
    assert process.returncode == 0, err[-3000:]
    assert '"DELIVERED"' in err  # the polls print each job state to stderr
    assert '"type": "SPAN"' in out and "Invoice 4417" in out
