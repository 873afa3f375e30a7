"""The distribution as a user's environment gets it: the wheel holds one import package, `ebbdb`
(its subpackages real files, not links), and installed into a fresh virtual environment beside an
application with its own `server/` package and `storage.py` (installed there too), both import
correctly, `python -m ebbdb` runs, and uninstalling ebbdb leaves the application's files.

The wheel is built from a copy of what the build reads; the venv gets it with `--no-deps`, and
ebbdb's dependencies are lent to it from this environment by a .pth line (no index needed)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("server", "storage", "protocol")
DEPENDENCIES = ("lmdb", "bson", "pymongo", "yaml")  # what importing ebbdb.server needs
TIMEOUT = 120.0

# The user's application: its own `server` package and `storage` module, the names ebbdb's folders
# have in the repository.
TOY_FILES = {
    "server/__init__.py": "def create_app():\n    return 'the toy app'\n",
    "server/routes.py": "ROUTES = ['/']\n",
    "storage.py": "KIND = 'the toy storage'\n",
}

PROBE = """
import importlib.metadata, json, sys
import server, server.routes, storage
import ebbdb, ebbdb.server.app, ebbdb.storage.engine.store, ebbdb.protocol
from ebbdb.server.version import EBBDB_VERSION
print(json.dumps({
    "app": server.create_app(),
    "routes": server.routes.ROUTES,
    "storage": storage.KIND,
    "server_file": server.__file__,
    "storage_file": storage.__file__,
    "ebbdb_files": [m.__file__ for m in (ebbdb, ebbdb.server.app, ebbdb.storage.engine.store, ebbdb.protocol)],
    "version": ebbdb.__version__,
    "server_version": EBBDB_VERSION,
    "dist_version": importlib.metadata.version("ebbdb"),
}))
"""


def clean_env() -> dict[str, str]:
    """This environment without what would import the checkout instead of the installed copy."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
    return result


def build_input(dest: Path) -> Path:
    """A copy of what the build reads: pyproject.toml, README.md, LICENSE, ebbdb/ (its links kept
    as links) and the folders they lead to."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    junk = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("ebbdb", *FOLDERS):
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=junk)
    return dest


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of `files`, written by hand (what any build backend would produce)."""
    dist_info = f"{name}-{version}.dist-info"
    contents = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in contents.items():
            z.writestr(path, text)
        z.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


def dependency_dirs() -> list[str]:
    """The folders this environment imports ebbdb's dependencies from."""
    found: list[str] = []
    for module in DEPENDENCIES:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{module} is not installed"
        origin = Path(spec.origin)
        folder = origin.parent.parent if spec.submodule_search_locations else origin.parent
        if str(folder) not in found:
            found.append(str(folder))
    return found


@dataclass(frozen=True)
class Site:
    wheel: Path
    venv: Path
    purelib: Path
    toy: Path  # the application's source folder
    elsewhere: Path  # a folder holding nothing importable

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-m", "pip", "--python", self.python, *args], self.elsewhere)

    def probe(self, cwd: Path) -> dict[str, Any]:
        result = run([self.python, "-c", PROBE], cwd)
        out: dict[str, Any] = json.loads(result.stdout)
        return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    source = build_input(base / "source")
    out = base / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)], base
    )
    [built] = out.glob("ebbdb-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("site")
    toy = base / "toy"
    for rel, text in TOY_FILES.items():
        (toy / rel).parent.mkdir(parents=True, exist_ok=True)
        (toy / rel).write_text(text)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    purelib = Path(
        run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            base,
        ).stdout.strip()
    )
    (purelib / "zz-ebbdb-test-dependencies.pth").write_text("\n".join(dependency_dirs()) + "\n")
    site = Site(wheel, venv, purelib, toy, elsewhere)
    toy_wheel = make_wheel(base, "toy_app", "1.0", TOY_FILES)
    site.pip("install", "--no-deps", "--no-index", "-q", str(toy_wheel), str(wheel))
    yield site


def test_the_wheel_holds_one_import_package_of_real_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
    version = wheel.name.split("-")[1]
    tops = {info.filename.split("/")[0] for info in infos}
    assert tops == {"ebbdb", f"ebbdb-{version}.dist-info"}
    links = [i.filename for i in infos if stat.S_ISLNK(i.external_attr >> 16)]
    assert not links
    shipped = {i.filename for i in infos if i.filename.endswith(".py")}
    sources = {
        f"ebbdb/{path.relative_to(ROOT).as_posix()}"
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
    }
    assert shipped == sources | {"ebbdb/__init__.py", "ebbdb/__main__.py"}
    assert all(i.file_size > 0 for i in infos if i.filename.endswith("/app.py"))


def test_the_app_and_ebbdb_both_import(site: Site) -> None:
    # From elsewhere both come from site-packages; from the app's folder its own files win.
    for cwd, app_root in ((site.elsewhere, site.purelib), (site.toy, site.toy)):
        got = site.probe(cwd)
        assert (got["app"], got["routes"], got["storage"]) == (
            "the toy app",
            ["/"],
            "the toy storage",
        )
        assert got["server_file"] == str(app_root / "server" / "__init__.py")
        assert got["storage_file"] == str(app_root / "storage.py")
        assert all(f.startswith(str(site.purelib / "ebbdb") + os.sep) for f in got["ebbdb_files"])
        assert got["version"] == got["server_version"] == got["dist_version"]
        assert got["version"] == site.wheel.name.split("-")[1]


def test_python_dash_m_ebbdb_and_the_console_script(site: Site) -> None:
    version = site.probe(site.elsewhere)["version"]
    for argv in (
        [site.python, "-m", "ebbdb", "--version"],
        [str(site.venv / "bin" / "ebbdb"), "--version"],
    ):
        result = run(argv, site.elsewhere)
        assert f"ebbdb {version}" in result.stdout


def test_uninstalling_ebbdb_leaves_the_app(site: Site) -> None:
    installed = {p.name for p in site.purelib.iterdir()}
    assert {"ebbdb", "server", "storage.py"} <= installed
    site.pip("uninstall", "-y", "-q", "ebbdb")
    left = {p.name for p in site.purelib.iterdir()}
    assert "ebbdb" not in left and not any(n.startswith("ebbdb-") for n in left)
    for rel, text in TOY_FILES.items():
        assert (site.purelib / rel).read_text() == text, rel
        assert (site.toy / rel).read_text() == text, rel
    result = run(
        [site.python, "-c", "import server, storage; print(server.create_app())"], site.elsewhere
    )
    assert result.stdout.strip() == "the toy app"


# -- the checkout ----------------------------------------------------------------------------------


def test_the_checkout_links_ebbdb_to_the_folders() -> None:
    for folder in FOLDERS:
        link = ROOT / "ebbdb" / folder
        assert link.is_symlink() and os.readlink(link) == f"../{folder}", link
        assert link.resolve() == ROOT / folder


def test_a_checkout_whose_links_are_plain_files_still_imports(tmp_path: Path) -> None:
    """Git without symlink support (Windows) writes each link as a file holding its target."""
    (tmp_path / "ebbdb").mkdir()
    shutil.copy2(ROOT / "ebbdb" / "__init__.py", tmp_path / "ebbdb" / "__init__.py")
    for folder in FOLDERS:
        (tmp_path / "ebbdb" / folder).write_text(f"../{folder}")
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(f"NAME = {folder!r}\n")
    code = "import ebbdb.server, ebbdb.storage, ebbdb.protocol as p; print(ebbdb.server.NAME, p.__file__)"
    result = run([sys.executable, "-c", code], tmp_path)
    assert result.stdout.split() == ["server", str(tmp_path / "protocol" / "__init__.py")]
