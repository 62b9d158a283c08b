"""Build ``mesh-bridge.pyz``: the bridge and its dependencies in one file that
runs with nothing but a Python interpreter (3.11 or newer).

    python bridge/build_pyz.py [--output dist/mesh-bridge.pyz]

Steps: ``pip install --target`` the dependencies named in
``bridge/pyproject.toml`` as wheels resolved for Python 3.11, the oldest
supported (so backports that 3.11 needs are included; newer Pythons ignore
them), copy the ``mesh_bridge`` package beside them, drop ``bin/`` and caches,
check that nothing compiled slipped in (the file must run anywhere), and zip it
all with ``zipapp`` (entry point ``mesh_bridge.cli:main``). Needs pip and
access to a package index.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipapp
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The oldest Python the bridge supports: dependencies are resolved for it.
PYTHON_FLOOR = "3.11"
COMPILED = (".so", ".pyd", ".dylib", ".dll")


def dependencies() -> list[str]:
    with open(HERE / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return list(project["dependencies"])


def stage(target: Path) -> None:
    """Fill *target* with the dependencies and the package, ready to zip."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--only-binary=:all:",
            "--python-version",
            PYTHON_FLOOR,
            "--target",
            str(target),
            *dependencies(),
        ],
        check=True,
    )
    shutil.copytree(
        HERE / "mesh_bridge",
        target / "mesh_bridge",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    shutil.rmtree(target / "bin", ignore_errors=True)
    for cache in list(target.rglob("__pycache__")):
        shutil.rmtree(cache)
    compiled = [p for p in target.rglob("*") if p.suffix in COMPILED]
    if compiled:
        raise SystemExit(f"compiled files would tie the .pyz to one platform: {compiled}")


def build(output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mesh-bridge-pyz-") as tmp:
        target = Path(tmp) / "app"
        stage(target)
        zipapp.create_archive(
            target,
            output,
            interpreter="/usr/bin/env python3",
            main="mesh_bridge.cli:main",
            compressed=True,
        )
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("dist/mesh-bridge.pyz"),
        help="where to write the file (default dist/mesh-bridge.pyz)",
    )
    output = build(parser.parse_args().output)
    print(f"built {output} ({output.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
