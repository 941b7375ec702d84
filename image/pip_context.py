"""Hand this machine's pip configuration to an image build, without writing it into the image.

Reads what ``pip config list`` reports (files and PIP_* variables alike) and fills DIR with an
equivalent pip.conf, copies of the files it names (the CA bundle, a constraints file) and empty
mount points for the directories it names (find-links, file:// indexes). Prints the ``buildah
bud`` arguments that mount DIR read-only at /mnt and each directory inside it, plus
``--build-arg PIP_CONFIG_FILE=/mnt/pip.conf`` for the Dockerfile's build stage.

Why /mnt: buildah applies ``--volume`` to every RUN of every stage and leaves a mount point it had
to create in the layer, so the final image kept an empty /run/host-pip tree naming this
machine's paths. /mnt exists (empty) in every Debian image, and the mount points of the nested
directories are created in DIR, on the host, never in a layer.

    python image/pip_context.py DIR      # one argument per line, for `mapfile`
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
from pathlib import Path

MOUNT = Path("/mnt")


def pip_settings() -> dict[str, str]:
    """``key -> value`` of the effective configuration; environment variables win, as in pip."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, _, key = name.rpartition(".")
        if not sep or section not in (":env:", "global", "install", "download", "wheel"):
            continue
        value = ast.literal_eval(raw)
        (env if section == ":env:" else files)[key] = value
    return {**files, **env}


def local_path(token: str) -> Path | None:
    path = Path(token.removeprefix("file://"))
    return path if path.is_absolute() and path.exists() else None


def main(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    mounts: dict[Path, Path] = {}
    config = configparser.ConfigParser()
    config["global"] = {}
    for key, value in pip_settings().items():
        tokens = []
        for token in value.split():
            path = local_path(token)
            if path is not None:
                inside = path.relative_to("/")
                if path.is_file():
                    (directory / inside).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, directory / inside)
                else:
                    # A file:// index links its files relatively (../../files/x.whl): mount the
                    # directory the index sits in.
                    root = path.parent if key.endswith("index-url") else path
                    (directory / root.relative_to("/")).mkdir(parents=True, exist_ok=True)
                    mounts[root] = MOUNT / root.relative_to("/")
                token = token.replace(str(path), str(MOUNT / inside))
            tokens.append(token)
        config["global"][key] = "\n".join(tokens) if len(tokens) > 1 else " ".join(tokens)
    with (directory / "pip.conf").open("w") as out:
        config.write(out)
    print(f"--volume={directory}:{MOUNT}:ro")
    for path, inside in sorted(mounts.items()):
        print(f"--volume={path}:{inside}:ro")
    print(f"--build-arg=PIP_CONFIG_FILE={MOUNT / 'pip.conf'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
