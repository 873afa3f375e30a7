"""Install weight: makes a fresh virtual environment, installs ebbdb into it as a user would
(`pip install <checkout>`: not editable, runtime dependencies only, no extras), and prints the size
of each installed distribution (its files as its RECORD lists them, bytecode included), in
site-packages and elsewhere in the venv (a wheel's data files: pcre2's bring PCRE2's sources), and
the totals. pip and setuptools, which every venv starts with, are not counted.

    python bench/weight.py                    # with this Python
    python bench/weight.py --python python3.13
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What the build reads (tests/test_packaging.py copies the same): the checkout is never written to.
BUILD_INPUT = ("pyproject.toml", "README.md", "LICENSE", "ebbdb", "server", "storage", "protocol")
NOT_COUNTED = {"pip", "setuptools", "wheel"}

#: Run inside the new venv: each distribution's name, version and the bytes of its files in
#: site-packages and elsewhere.
SIZES = """
import importlib.metadata, json, os, sysconfig
site = {os.path.realpath(sysconfig.get_path(k)) for k in ("purelib", "platlib")}
out = []
for dist in importlib.metadata.distributions():
    inside = elsewhere = 0
    for f in dist.files or ():
        path = os.path.realpath(f.locate())
        if os.path.isfile(path):
            size = os.path.getsize(path)
            if any(path.startswith(s + os.sep) for s in site):
                inside += size
            else:
                elsewhere += size
    out.append([dist.metadata["Name"], dist.version, inside, elsewhere])
print(json.dumps(out))
"""


def copy_build_input(dest: Path) -> None:
    dest.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in BUILD_INPUT:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, symlinks=True, ignore=junk)
        else:
            shutil.copy2(source, dest / name)


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def run(argv: list[str], cwd: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, cwd=cwd).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the Python to make the venv with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ebbdb-weight-") as tmp:
        source = Path(tmp) / "source"
        copy_build_input(source)
        venv = Path(tmp) / "venv"
        subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
        python = str(venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python"))
        started = time.monotonic()
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-cache-dir", str(source)],
            check=True, cwd=tmp,
        )  # fmt: skip
        took = time.monotonic() - started
        # From the temporary folder: a checkout's own ebbdb.egg-info must not be found too.
        about = "import sys, sysconfig; print(sys.version.split()[0]); print(sysconfig.get_platform()); print(sysconfig.get_path('purelib'))"
        version, platform, purelib = run([python, "-c", about], tmp).splitlines()
        found = json.loads(run([python, "-c", SIZES], tmp))
        counted = sorted((r for r in found if r[0].lower() not in NOT_COUNTED), key=lambda r: -r[2])
        skipped = sum(r[2] + r[3] for r in found if r[0].lower() in NOT_COUNTED)
        print(
            f"ebbdb's install weight: CPython {version} on {platform} (pip install: {took:.0f} s)"
        )
        print(f"{'distribution':<18} {'version':<11} {'site-packages MB':>16} {'elsewhere MB':>13}")
        for name, dist_version, inside, elsewhere in counted:
            print(f"{name:<18} {dist_version:<11} {inside / 1e6:16.1f} {elsewhere / 1e6:13.1f}")
        inside_total = sum(r[2] for r in counted)
        elsewhere_total = sum(r[3] for r in counted)
        print(f"{'total':<18} {'':<11} {inside_total / 1e6:16.1f} {elsewhere_total / 1e6:13.1f}")
        print(
            f"Not counted: pip and setuptools ({skipped / 1e6:.1f} MB). site-packages holds "
            f"{(folder_size(Path(purelib)) - skipped) / 1e6:.1f} MB without them (a cross-check). "
            "MB = 10^6 bytes of file contents; elsewhere = the venv's bin/, include/, share/, src/."
        )


if __name__ == "__main__":
    main()
