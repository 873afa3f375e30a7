""".ci/run deletes only a virtual environment it created itself (one holding its marker file) and
refuses anything else at $EBBDB_VENV (or the smoke venvs beside it); it finds the smoke Pythons
(3.12 and 3.13) in pyenv or on PATH, and fails before doing anything when one is missing. The
script runs from a copy in a scratch folder, with a stub `python3` first on PATH whose venvs hold a
`python` that stops the run right after the venv step, and stub smoke Pythons that only say their
version."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".created-by-ebbdb-ci-run"
STUB_EXIT = 3  # what the stub venv's python exits with: the run got past the venv step

STUB_PYTHON3 = f"""#!/bin/sh
echo "$*" >> "$STUB_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    mkdir -p "$3/bin"
    printf '#!/bin/sh\\nexit {STUB_EXIT}\\n' > "$3/bin/python"
    chmod +x "$3/bin/python"
    exit 0
fi
exit 1
"""


STUB_SMOKE = """#!/bin/sh
echo "smoke $0 $*" >> "$STUB_LOG"
if [ "$1" = "-c" ]; then
    echo "{version}"
    exit 0
fi
exit 1
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A scratch checkout holding only .ci/run, and a stub bin folder."""
    (tmp_path / "repo" / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", tmp_path / "repo" / ".ci" / "run")
    (tmp_path / "stub").mkdir()
    _executable(tmp_path / "stub" / "python3", STUB_PYTHON3)
    for version in ("3.12", "3.13"):
        folder = tmp_path / "pyenv" / "versions" / f"{version}.1" / "bin"
        folder.mkdir(parents=True)
        _executable(folder / "python", STUB_SMOKE.format(version=version))
    return tmp_path / "repo"


def run_ci(
    repo: Path, venv: str | None, pyenv: Path | None = None, smoke: str | None = None
) -> subprocess.CompletedProcess[str]:
    """.ci/run with the stubs; its smoke Pythons from `pyenv` (default: the stub pyenv), or
    $EBBDB_SMOKE_PYTHONS = `smoke`. PATH holds the stubs and the system's folders only (no
    pyenv shims), so python3.12 and python3.13 are only found where a test puts them."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("EBBDB_VENV", "EBBDB_SMOKE_PYTHONS", "PYENV_ROOT", "PYENV_VERSION")
    }
    env["PATH"] = os.pathsep.join([str(repo.parent / "stub"), "/usr/local/bin", "/usr/bin", "/bin"])
    env["STUB_LOG"] = str(repo.parent / "python3.log")
    env["PYENV_ROOT"] = str(repo.parent / "pyenv" if pyenv is None else pyenv)
    if smoke is not None:
        env["EBBDB_SMOKE_PYTHONS"] = smoke
    if venv is not None:
        env["EBBDB_VENV"] = venv
    return subprocess.run(
        ["bash", str(repo / ".ci" / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def venv_created(repo: Path) -> bool:
    log = repo.parent / "python3.log"
    return log.exists() and "-m venv" in log.read_text()


def foreign_venv(path: Path) -> Path:
    """A user's own venv: a pyvenv.cfg and something worth keeping, no marker."""
    (path / "bin").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (path / "keep-me").write_text("mine")
    return path


def test_creates_the_default_venv_with_its_marker(repo: Path) -> None:
    result = run_ci(repo, None)
    assert result.returncode == STUB_EXIT, result.stderr
    assert (repo / ".ci-venv" / MARKER).is_file()


def test_recreates_a_venv_it_made(repo: Path) -> None:
    assert run_ci(repo, ".ci-venv").returncode == STUB_EXIT
    (repo / ".ci-venv" / "stale").write_text("from the last run")
    result = run_ci(repo, ".ci-venv")
    assert result.returncode == STUB_EXIT, result.stderr
    assert not (repo / ".ci-venv" / "stale").exists()
    assert (repo / ".ci-venv" / MARKER).is_file()


@pytest.mark.parametrize("relative", [True, False])
def test_refuses_a_venv_it_did_not_make(repo: Path, relative: bool) -> None:
    own = foreign_venv(repo / ".venv")
    result = run_ci(repo, ".venv" if relative else str(own))
    assert result.returncode == 2
    assert f".ci/run: refusing to delete {own}" in result.stderr
    assert (own / "keep-me").read_text() == "mine"
    assert not (own / MARKER).exists()
    assert not venv_created(repo)


def test_refuses_a_file_and_a_symlink_to_its_own_venv(repo: Path) -> None:
    (repo / "notes.txt").write_text("mine")
    result = run_ci(repo, "notes.txt")
    assert result.returncode == 2 and "refusing to delete" in result.stderr
    assert (repo / "notes.txt").read_text() == "mine"
    # A link is not the venv it points to: neither the link nor its target goes.
    assert run_ci(repo, ".ci-venv").returncode == STUB_EXIT
    (repo / "link").symlink_to(repo / ".ci-venv")
    result = run_ci(repo, "link")
    assert result.returncode == 2 and "refusing to delete" in result.stderr
    assert (repo / "link").is_symlink() and (repo / ".ci-venv" / MARKER).is_file()


def test_finds_the_smoke_pythons_in_pyenv(repo: Path) -> None:
    result = run_ci(repo, None)
    assert result.returncode == STUB_EXIT, result.stderr
    log = (repo.parent / "python3.log").read_text()
    for version in ("3.12", "3.13"):
        assert f"pyenv/versions/{version}.1/bin/python -c" in log


@pytest.mark.parametrize("missing", ["3.12", "3.13"])
def test_a_missing_smoke_python_fails_before_anything(
    repo: Path, tmp_path: Path, missing: str
) -> None:
    shutil.rmtree(repo.parent / "pyenv" / "versions" / f"{missing}.1")
    result = run_ci(repo, None)
    assert result.returncode == 2
    assert f".ci/run: CPython {missing} is missing" in result.stderr, result.stderr
    assert "pyenv install" in result.stderr
    assert not venv_created(repo) and not (repo / ".ci-venv").exists()


def test_a_smoke_python_named_but_absent_fails(repo: Path) -> None:
    result = run_ci(repo, None, smoke=str(repo.parent / "no-such-python"))
    assert result.returncode == 2 and "does not exist or does not run" in result.stderr
    assert not venv_created(repo)


def test_refuses_a_smoke_venv_it_did_not_make(repo: Path) -> None:
    own = foreign_venv(repo / ".ci-venv-py3.13")
    result = run_ci(repo, None)
    assert result.returncode == 2
    assert f".ci/run: refusing to delete {own}" in result.stderr
    assert (own / "keep-me").read_text() == "mine"
    assert not venv_created(repo)
