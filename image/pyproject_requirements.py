"""Print the requirements pyproject.toml declares (and those of the extras named as arguments).

The image installs them before copying the code, so editing the code does not reinstall them:
a stub package could not stand in, since the package list in pyproject.toml names every
sub-package. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"no such extra in {pyproject}: {', '.join(unknown)}")
    return [*project["dependencies"], *(r for extra in extras for r in optional[extra])]


if __name__ == "__main__":
    print("\n".join(requirements(Path("pyproject.toml"), sys.argv[1:])))
