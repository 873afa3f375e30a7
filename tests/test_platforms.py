"""The supported platforms: for every platform and CPython of README's matrix (and the Docker image's
Python on both its architectures), the package index has a wheel, and a final release, of every
runtime dependency, so `pip install ebbdb` needs no compiler anywhere. It asks the real index
(`pip install --dry-run --only-binary=:all: --platform ... --python-version ... --report`), all
pairs at once in threads; an unreachable index fails the test, it is never skipped.

pip evaluates environment markers against the interpreter it runs in, not the --platform it is
given (`sys_platform == 'darwin'` is false here whatever the target), so the markers are evaluated
here for each target with `packaging`, at the top level and down the dependency tree, and pip is
handed plain requirements.

The GitHub Actions workflow cannot run here: a test reads it and checks it runs the suite on every
platform and Python of the matrix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
DOCKERFILE = ROOT / "Dockerfile"
WORKFLOW = ROOT / ".github" / "workflows" / "tests.yml"
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
PIP_TIMEOUT = 120.0
#: Debian releases the python image is built on, and their glibc: at least manylinux_2_28's.
DEBIAN_GLIBC = {"bookworm": (2, 36), "trixie": (2, 41)}


def manylinux(arch: str, glibc: tuple[int, int] = (2, 28)) -> tuple[str, ...]:
    """The manylinux tags a glibc `glibc` system takes, newest first. pip expands a macOS tag to
    the older releases but takes a manylinux_2_28 tag as that one tag alone, so list them."""
    oldest = 5 if arch == "x86_64" else 17
    tags = [f"manylinux_{glibc[0]}_{minor}_{arch}" for minor in range(glibc[1], oldest - 1, -1)]
    tags.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    return tuple(tags)


@dataclass(frozen=True)
class Platform:
    """One row of README's matrix: the wheel tags pip is given and the marker environment."""

    key: str
    name: str
    tags: tuple[str, ...]
    os_name: str
    sys_platform: str
    platform_system: str
    platform_machine: str

    def environment(self, python: str) -> dict[str, str]:
        return {
            "implementation_name": "cpython",
            "implementation_version": f"{python}.0",
            "os_name": self.os_name,
            "platform_machine": self.platform_machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": self.platform_system,
            "platform_version": "",
            "python_full_version": f"{python}.0",
            "python_version": python,
            "sys_platform": self.sys_platform,
            "extra": "",
        }


LINUX = ("posix", "linux", "Linux")
PLATFORMS = {
    p.key: p
    for p in (
        Platform("linux-x86_64", "Linux x86_64", manylinux("x86_64"), *LINUX, "x86_64"),
        Platform("linux-aarch64", "Linux aarch64", manylinux("aarch64"), *LINUX, "aarch64"),
        Platform(
            "macos-arm64",
            "macOS 11+ arm64",
            ("macosx_11_0_arm64",),
            "posix",
            "darwin",
            "Darwin",
            "arm64",
        ),
        # pyicu-wheels' only macOS x86_64 wheels are tagged macosx_15_0: the row is macOS 15+.
        Platform(
            "macos-x86_64",
            "macOS 15+ x86_64",
            ("macosx_15_0_x86_64",),
            "posix",
            "darwin",
            "Darwin",
            "x86_64",
        ),
        Platform(
            "windows-x86_64", "Windows x86_64", ("win_amd64",), "nt", "win32", "Windows", "AMD64"
        ),
    )
}


def docker_python() -> str:
    """The Python of the Dockerfile's FROM (python:3.X-slim-<debian>), whose glibc must take
    manylinux_2_28 wheels."""
    [line] = [
        ln for ln in DOCKERFILE.read_text(encoding="utf-8").splitlines() if ln.startswith("FROM ")
    ]
    match = re.fullmatch(r"FROM python:(3\.\d+)-slim-(\w+)", line.strip())
    if match is None:
        raise ValueError(f"expected FROM python:3.X-slim-<debian release>, found {line!r}")
    if DEBIAN_GLIBC.get(match.group(2), (0, 0)) < (2, 28):
        raise ValueError(f"{line}: a Debian release whose glibc is unknown here or too old")
    return match.group(1)


def _docker_pairs() -> set[tuple[str, str]]:
    try:
        python = docker_python()
    except ValueError:
        return set()  # test_the_docker_image_platforms_are_covered says why
    return {(p, python) for p in ("linux-x86_64", "linux-aarch64")}


#: Every (platform, Python) pair resolved: the matrix, and the image's Python on linux/amd64 and
#: linux/arm64 (the same pairs when the image's Python is one of the matrix's).
PAIRS = sorted({(p, v) for p in PLATFORMS for v in PYTHONS} | _docker_pairs())
#: The test extra (which the workflow installs too) on the oldest and newest Python of each
#: platform: its compiled packages are abi3 or pure, so the two ends cover the ABIs, in half the
#: pip runs.
TEST_EXTRA_PAIRS = sorted((p, v) for p in PLATFORMS for v in (PYTHONS[0], PYTHONS[-1]))


def runtime_requirements() -> list[Requirement]:
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_requirements() -> list[Requirement]:
    """The test extra, which the workflow installs on every runner, wheels only, as well."""
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    return [Requirement(r) for r in project["optional-dependencies"]["test"]]


test_requirements.__test__ = False  # type: ignore[attr-defined]  # not a test: pytest's name rule


def js_requirements() -> list[Requirement]:
    """The js extra (server-side JavaScript's engine), which .ci/run and the workflow install."""
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    return [Requirement(r) for r in project["optional-dependencies"]["js"]]


@dataclass
class Resolution:
    """What pip would install for one pair, and what is wrong with it."""

    wheels: dict[str, str] = field(default_factory=dict)  # the needed names -> wheel file names
    problems: list[str] = field(default_factory=list)


def _applies(req: Requirement, env: dict[str, str], extras: Iterable[str] = ("",)) -> bool:
    return req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in extras)


def _plain(req: Requirement) -> str:
    """`req` without its marker (evaluated already, for the target)."""
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras}{req.specifier}"


def _pip(
    platform: Platform, python: str, reqs: list[str], report: Path
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    for tag in platform.tags:
        argv += ["--platform", tag]
    argv += ["--report", str(report), "--quiet", "--no-input", "--disable-pip-version-check"]
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    env.pop("PIP_PRE", None)
    return subprocess.run(
        [*argv, *reqs],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )


_NO_MATCH_RE = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)")


def resolve(key: str, python: str, requirements: list[Requirement]) -> Resolution:
    """Resolve `requirements` for one pair: each needed package's wheel, or what is missing.
    The needed packages are those the target's markers select, down the tree; pip runs again
    with any that its own (host) markers left out."""
    platform = PLATFORMS[key]
    env = platform.environment(python)
    out = Resolution()
    direct = [r for r in requirements if _applies(r, env)]
    wanted: dict[str, str] = {canonicalize_name(r.name): _plain(r) for r in direct}
    unavailable: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        for _ in range(len(wanted) + 5):  # each round drops a missing package or adds one
            result = _pip(platform, python, list(wanted.values()), report_path)
            if result.returncode != 0:
                missing = _NO_MATCH_RE.search(result.stderr)
                if missing is None:
                    tail = "\n".join(result.stderr.strip().splitlines()[-5:])
                    out.problems.append(f"pip could not resolve: {tail}")
                    return out
                name: str = canonicalize_name(missing.group(1))
                out.problems.append(f"{name}: no wheel (or no final release) for this pair")
                if name not in wanted:  # a dependency's dependency: nothing more to learn
                    return out
                del wanted[name]  # and look for more missing ones without it
                unavailable.add(name)
                continue
            report = json.loads(report_path.read_text(encoding="utf-8"))
            installed: dict[str, Any] = {
                canonicalize_name(i["metadata"]["name"]): i for i in report["install"]
            }
            needed = _closure(direct, installed, env)
            left_out = {
                n: r for n, r in needed.items() if n not in installed and n not in unavailable
            }
            if left_out:
                wanted.update({n: _plain(r) for n, r in left_out.items()})
                continue
            for name in sorted(needed.keys() - unavailable):
                item = installed[name]
                version = item["metadata"]["version"]
                filename = item["download_info"]["url"].rsplit("/", 1)[-1]
                out.wheels[name] = filename
                if not filename.endswith(".whl"):
                    out.problems.append(f"{name} {version}: not a wheel ({filename})")
                if Version(version).is_prerelease:
                    out.problems.append(f"{name} {version}: a pre-release was picked ({filename})")
            return out
    out.problems.append("pip kept finding dependencies its markers had left out")
    return out


def _closure(
    direct: list[Requirement], installed: dict[str, Any], env: dict[str, str]
) -> dict[str, Requirement]:
    """The packages the target needs: `direct`, and what their metadata requires under the
    target's markers (with the extras asked for), as far as `installed` shows metadata."""
    needed: dict[str, Requirement] = {}
    todo = list(direct)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in needed and req.extras <= needed[name].extras:
            continue
        needed[name] = req
        item = installed.get(name)
        if item is None:
            continue
        for line in item["metadata"].get("requires_dist", []):
            sub = Requirement(line)
            if _applies(sub, env, ("", *req.extras)):
                todo.append(sub)
    return needed


def _index_url() -> str:
    """The index pip asks (its configuration, else PyPI)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30
    )
    for line in result.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.endswith(".index-url") and not name.endswith(".extra-index-url"):
            return value.strip("'\"")
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")


@cache
def resolutions() -> dict[tuple[str, str, str], Resolution]:
    """Every pair's runtime and test requirements, resolved in parallel (pip spends its time
    waiting on the index)."""
    pip_version = Version(
        subprocess.run(
            [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, timeout=30
        ).stdout.split()[1]
    )
    assert pip_version >= Version("23.1"), f"pip {pip_version}: --dry-run --report needs 23.1+"
    index = _index_url().rstrip("/")
    try:
        with urllib.request.urlopen(f"{index}/pip/", timeout=30) as response:
            response.read(1)
    except (OSError, urllib.error.URLError) as exc:
        pytest.fail(
            f"the package index {index} is unreachable ({exc}): this test asks it for the "
            "wheels of every platform, and cannot pass without it"
        )
    sets = {"runtime": runtime_requirements(), "test": test_requirements(), "js": js_requirements()}
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {
            (key, python, what): pool.submit(resolve, key, python, reqs)
            for what, reqs in sets.items()
            for key, python in (PAIRS if what == "runtime" else TEST_EXTRA_PAIRS)
        }
        return {job: f.result() for job, f in futures.items()}


@pytest.mark.parametrize(("key", "python"), PAIRS, ids=[f"{k}-py{v}" for k, v in PAIRS])
def test_runtime_dependencies_install_from_wheels(key: str, python: str) -> None:
    got = resolutions()[(key, python, "runtime")]
    where = f"{PLATFORMS[key].name}, CPython {python}"
    assert not got.problems, f"{where}:\n  " + "\n  ".join(got.problems)
    # Every runtime dependency the target selects is among them (pip's own markers cannot drop
    # one silently).
    env = PLATFORMS[key].environment(python)
    for req in runtime_requirements():
        if _applies(req, env):
            assert canonicalize_name(req.name) in got.wheels, f"{where}: {req.name} not resolved"


@pytest.mark.parametrize(
    ("key", "python"), TEST_EXTRA_PAIRS, ids=[f"{k}-py{v}" for k, v in TEST_EXTRA_PAIRS]
)
def test_the_test_extra_installs_from_wheels(key: str, python: str) -> None:
    """What the workflow installs on each runner with --only-binary=:all:."""
    got = resolutions()[(key, python, "test")]
    where = f"{PLATFORMS[key].name}, CPython {python}, the test extra"
    assert not got.problems, f"{where}:\n  " + "\n  ".join(got.problems)


@pytest.mark.parametrize(
    ("key", "python"), TEST_EXTRA_PAIRS, ids=[f"{k}-py{v}" for k, v in TEST_EXTRA_PAIRS]
)
def test_the_js_extra_installs_from_wheels(key: str, python: str) -> None:
    """mini-racer's wheels are py3-none (one per platform, any CPython 3): the two ends of the
    matrix's Pythons cover them."""
    got = resolutions()[(key, python, "js")]
    where = f"{PLATFORMS[key].name}, CPython {python}, the js extra"
    assert not got.problems, f"{where}:\n  " + "\n  ".join(got.problems)
    assert "mini-racer" in got.wheels, f"{where}: mini-racer not resolved"


def test_exactly_one_icu_binding_on_every_platform() -> None:
    """Collation needs the `icu` module (PyICU's API) everywhere: pyicu-wheels, except on macOS
    arm64 where only icukit-pyicu has wheels; never both (they would overwrite one `icu`)."""
    bindings = {"pyicu-wheels", "icukit-pyicu"}
    for key, platform in PLATFORMS.items():
        for python in PYTHONS:
            env = platform.environment(python)
            chosen = {
                canonicalize_name(r.name)
                for r in runtime_requirements()
                if canonicalize_name(r.name) in bindings and _applies(r, env)
            }
            expected = {"icukit-pyicu"} if key == "macos-arm64" else {"pyicu-wheels"}
            assert chosen == expected, (key, python, chosen)


def test_the_docker_image_platforms_are_covered() -> None:
    python = docker_python()
    for key in ("linux-x86_64", "linux-aarch64"):
        assert (key, python) in PAIRS


def test_markers_are_evaluated_for_the_target_not_the_host() -> None:
    """The reason the markers are evaluated here: pip takes `--platform` for wheel tags only."""
    mac = PLATFORMS["macos-arm64"].environment("3.12")
    assert Marker("sys_platform == 'darwin' and platform_machine == 'arm64'").evaluate(mac)
    assert not Marker("sys_platform == 'win32'").evaluate(mac)


# -- the GitHub Actions workflow -------------------------------------------------------------------

#: The runner of each platform: GitHub's labels.
RUNNERS = {
    "linux-x86_64": "ubuntu-24.04",
    "linux-aarch64": "ubuntu-24.04-arm",
    "macos-arm64": "macos-14",
    "macos-x86_64": "macos-15-intel",
    "windows-x86_64": "windows-latest",
}


def _workflow() -> dict[Any, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), doc
    return doc


def _matrix_job() -> dict[str, Any]:
    jobs = _workflow()["jobs"]
    matrix_jobs = [j for j in jobs.values() if "matrix" in j.get("strategy", {})]
    assert len(matrix_jobs) == 1, "expected one job with a platform x Python matrix"
    job: dict[str, Any] = matrix_jobs[0]
    return job


def test_the_workflow_runs_on_push_and_pull_requests() -> None:
    # PyYAML reads the key `on` as True (YAML 1.1).
    doc = _workflow()
    triggers = doc.get("on", doc.get(True))
    assert triggers is not None and {"push", "pull_request"} <= set(triggers), triggers


def test_the_workflow_covers_every_platform_and_python() -> None:
    job = _matrix_job()
    matrix = job["strategy"]["matrix"]
    assert job["strategy"].get("fail-fast") is False, "one platform's failure must not hide others"
    assert job["runs-on"] == "${{ matrix.os }}"
    assert sorted(matrix["os"]) == sorted(RUNNERS.values())
    assert [str(v) for v in matrix["python"]] == list(PYTHONS), "quote versions: 3.10 reads 3.1"
    assert not matrix.get("exclude"), "every pair of the matrix runs"
    steps = job["steps"]
    setup = [s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python@")]
    assert len(setup) == 1 and setup[0]["with"]["python-version"] == "${{ matrix.python }}"
    runs = " ".join(str(s.get("run", "")) for s in steps)
    assert "pip install" in runs and "--only-binary=:all:" in runs, "wheels only, no compiler"
    assert "pytest" in runs


def test_the_workflow_runs_the_platform_check_and_the_lint_once() -> None:
    jobs = _workflow()["jobs"]
    single = [j for j in jobs.values() if "matrix" not in j.get("strategy", {})]
    assert len(single) == 1, "expected one job beside the matrix: lint, types, wheels"
    runs = " ".join(str(s.get("run", "")) for s in single[0]["steps"])
    assert "pytest -q tests/test_platforms.py" in runs
    assert "ruff check" in runs and "ruff format --check" in runs and "mypy" in runs
