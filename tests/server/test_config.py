"""The command line as parsed, without starting anything: the addresses to listen on, the log and
profiling flags, and --config (a mongod.conf: what it sets, flags over it, and every way a file is
refused with exit 2 naming the option)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebbdb.server.config import parse_args
from ebbdb.server.config_file import parse_config
from ebbdb.storage.core import portability


@pytest.mark.parametrize(
    ("argv", "bind"),
    [
        ([], ("127.0.0.1",)),
        (["--bind_ip", "127.0.0.1, ::1"], ("127.0.0.1", "::1")),
        # mongod's rule: --bind_ip_all is every IPv4 address; IPv6 too only with --ipv6.
        (["--bind_ip_all"], ("0.0.0.0",)),
        (["--bind_ip_all", "--ipv6"], ("0.0.0.0", "::")),
    ],
)
def test_addresses_to_listen_on(argv: list[str], bind: tuple[str, ...]) -> None:
    assert parse_args(argv).bind_ip == bind


def test_empty_bind_ip_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["--bind_ip", " , "])
    assert info.value.code == 2
    assert "--bind_ip needs at least one address" in capsys.readouterr().err


# -- the rest of the command line ------------------------------------------------------------------


def test_defaults() -> None:
    config = parse_args([])
    assert (config.port, config.dbpath, config.verbosity, config.log_format) == (
        27017,
        "./ebbdb-data",
        0,
        "text",
    )
    assert (config.slowms, config.sample_rate, config.profile) == (100, 1.0, 0)
    assert config.max_connections == 1_000_000
    assert not config.ephemeral and config.config_file is None


@pytest.mark.parametrize(
    ("argv", "verbosity"),
    [
        (["-v"], 1),
        (["-vv"], 2),
        (["-vvvvv"], 5),
        (["-v", "-v", "-v"], 3),
        (["--verbose"], 1),
        (["-vvvvvvvv"], 5),  # mongod's deepest level
    ],
)
def test_verbosity_flags(argv: list[str], verbosity: int) -> None:
    assert parse_args(argv).verbosity == verbosity


def test_log_format_and_profiling_flags() -> None:
    config = parse_args(
        ["--logFormat", "json", "--slowms", "20", "--slowOpSampleRate", "0.5", "--profile", "1"]
    )
    assert (config.log_format, config.slowms, config.sample_rate, config.profile) == (
        "json",
        20,
        0.5,
        1,
    )
    assert config.parsed()["operationProfiling"] == {
        "mode": "slowOp",
        "slowOpThresholdMs": 20,
        "slowOpSampleRate": 0.5,
    }


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--logFormat", "xml"], "invalid choice: 'xml'"),
        (["--maxConns", "0"], "must be at least 1"),
        (["--slowOpSampleRate", "2"], "must be between 0 and 1"),
        (["-vx"], "expected only v's"),
        (["--ephemeral", "--dbpath", "/tmp/x"], "--ephemeral keeps its data in a temporary"),
    ],
)
def test_bad_flags_are_refused(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert words in _refused(argv, capsys)


# -- --config --------------------------------------------------------------------------------------

FULL_CONFIG = """\
net:
  port: 27099
  bindIp: 127.0.0.1,::1
  maxIncomingConnections: 50
storage:
  dbPath: /srv/ebbdb
systemLog:
  destination: file
  path: /var/log/ebbdb.log
  logAppend: true
  quiet: true
  verbosity: 2
operationProfiling:
  mode: all
  slowOpThresholdMs: 250
  slowOpSampleRate: 0.25
setParameter:
  ttlMonitorSleepSecs: 5
  enableTestCommands: true
"""


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mongod.conf"
    path.write_text(text)
    return str(path)


def test_config_file_options(tmp_path: Path) -> None:
    path = _config(tmp_path, FULL_CONFIG)
    config = parse_args(["--config", path])
    assert config.port == 27099
    assert config.bind_ip == ("127.0.0.1", "::1")
    assert config.max_connections == 50
    assert config.dbpath == "/srv/ebbdb"
    assert (config.logpath, config.logappend, config.quiet) == ("/var/log/ebbdb.log", True, True)
    assert config.verbosity == 2
    assert (config.profile, config.slowms, config.sample_rate) == (2, 250, 0.25)
    assert config.parameters == {"ttlMonitorSleepSecs": 5, "enableTestCommands": True}
    parsed = config.parsed()
    assert parsed["config"] == path
    assert parsed["net"] == {"bindIp": "127.0.0.1,::1", "port": 27099, "maxIncomingConnections": 50}
    assert parsed["systemLog"]["verbosity"] == 2
    assert parse_args(["-f", path]).port == 27099  # mongod's short form


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    path = _config(tmp_path, FULL_CONFIG)
    config = parse_args(
        [
            "--config",
            path,
            "--port",
            "0",
            "--dbpath",
            "/data/here",
            "--slowms",
            "5",
            "-v",
            "--setParameter",
            "ttlMonitorSleepSecs=7",
            "--bind_ip",
            "127.0.0.2",
        ]
    )
    assert (config.port, config.dbpath, config.slowms, config.verbosity) == (
        0,
        "/data/here",
        5,
        1,
    )
    assert config.bind_ip == ("127.0.0.2",)
    assert config.parameters == {"ttlMonitorSleepSecs": 7, "enableTestCommands": True}
    assert config.max_connections == 50, "what no flag says still comes from the file"


def test_bind_ip_all_and_ipv6_from_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, "net:\n  bindIpAll: true\n  ipv6: true\n")
    assert parse_args(["--config", path]).bind_ip == ("0.0.0.0", "::")


@pytest.mark.parametrize(("mode", "level"), [("off", 0), ("slowOp", 1), ("all", 2)])
def test_profiling_mode(tmp_path: Path, mode: str, level: int) -> None:
    # A bare `off` is YAML 1.1's false to PyYAML; mongod reads it as the word.
    path = _config(tmp_path, f"operationProfiling:\n  mode: {mode}\n")
    assert parse_args(["--config", path]).profile == level


def test_empty_config_file_keeps_the_defaults(tmp_path: Path) -> None:
    assert parse_args(["--config", _config(tmp_path, "# nothing\n")]).port == 27017


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("net:\n  prot: 1\n", "unrecognized option: net.prot"),
        (
            "processManagement:\n  windowsService:\n    serviceName: x\n",
            "unrecognized option: processManagement.windowsService.serviceName",
        ),
        ("storage:\n  engine: inMemory\n", "storage.engine: ebbdb stores data in its own"),
        (
            "storage:\n  wiredTiger:\n    engineConfig:\n      cacheSizeMB: 1\n",
            "unrecognized option: storage.wiredTiger.engineConfig.cacheSizeMB",
        ),
        (
            "storage:\n  wiredTiger:\n    collectionConfig:\n      blockCompressor: lz4\n",
            "storage.wiredTiger.collectionConfig.blockCompressor: expected one of 'none'",
        ),
        ("storage:\n  journal:\n    commitIntervalMs: 900\n", "expected an integer from 1 to 500"),
        (
            "systemLog:\n  path: /x.log\n  logRotate: reopen\n",
            "systemLog.logRotate: reopen needs systemLog.logAppend: true",
        ),
        ("systemLog:\n  logRotate: often\n", "systemLog.logRotate: expected one of 'rename'"),
        ("sharding:\n  clusterRole: shardsvr\n", "unrecognized option: sharding.clusterRole"),
        ("net:\n  port: abc\n", "net.port: expected an integer from 0 to 65535, got 'abc'"),
        ("net:\n  port: 70000\n", "net.port: expected an integer from 0 to 65535, got 70000"),
        ("net:\n  port: true\n", "net.port: expected an integer"),
        ("net: 5\n", "net: expected a mapping of options, got 5"),
        ("systemLog:\n  quiet: yes please\n", "systemLog.quiet: expected true or false"),
        ("systemLog:\n  verbosity: 9\n", "systemLog.verbosity: expected an integer from 0 to 5"),
        ("systemLog:\n  destination: syslog\n", "systemLog.destination: expected one of 'file'"),
        ("systemLog:\n  destination: file\n", "systemLog.path: required"),
        ("operationProfiling:\n  mode: sometimes\n", "operationProfiling.mode: expected one of"),
        ("storage:\n  dbPath: [a, b]\n", "storage.dbPath: expected a non-empty string, got a list"),
        ("setParameter:\n  noSuchParameter: 1\n", "Unknown --setParameter 'noSuchParameter'"),
        ("setParameter:\n  journalCommitInterval: 900\n", "must be between 1 and 500"),
        ("setParameter: 3\n", "setParameter: expected a mapping"),
        ("- a list\n", "expected a mapping of options, got a list"),
        ("net: [unclosed\n", "is not valid YAML"),
    ],
)
def test_bad_config_files_are_refused(
    tmp_path: Path, text: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, text)
    err = _refused(["--config", path], capsys)
    assert words in err
    assert path in err


def test_missing_config_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["--config", str(tmp_path / "nope.conf")], capsys)
    assert f"cannot read config file {tmp_path / 'nope.conf'}: No such file or directory" in err


def test_ephemeral_refuses_a_dbpath_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "storage:\n  dbPath: /srv/x\n")
    err = _refused(["--config", path, "--ephemeral"], capsys)
    assert f"drop storage.dbPath in {path}" in err


def test_readme_config_example_is_accepted() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Config file", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    settings = parse_config(example, "README.md")
    assert settings.options["net.maxIncomingConnections"] == 500
    assert settings.options["operationProfiling.mode"] == "off"
    assert settings.set_parameters == [
        "journalCommitInterval=100",
        "syncdelay=60",
        "ttlMonitorSleepSecs=60",
    ]
    assert settings.options["storage.engine"] == "wiredTiger"


# -- scripting -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "text", "scripting"),
    [
        ([], "", True),
        (["--noscripting"], "", False),
        ([], "security:\n  javascriptEnabled: false\n", False),
        ([], "security:\n  javascriptEnabled: true\n", True),
        # The flag turns it off whatever the file says (mongod has no flag turning it on).
        (["--noscripting"], "security:\n  javascriptEnabled: true\n", False),
    ],
)
def test_scripting_switches(tmp_path: Path, argv: list[str], text: str, scripting: bool) -> None:
    config = parse_args([*argv, "--config", _config(tmp_path, text)])
    assert config.scripting is scripting
    security = config.parsed().get("security", {})
    assert security.get("javascriptEnabled", True) is scripting


def test_javascript_enabled_must_be_a_boolean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "security:\n  javascriptEnabled: sometimes\n")
    err = _refused(["--config", path], capsys)
    assert "security.javascriptEnabled: expected true or false, got 'sometimes'" in err


# -- the mongod.conf MongoDB's packages install ----------------------------------------------------

#: /etc/mongod.conf as the Debian and Ubuntu packages of MongoDB 7.0 install it (debian/mongod.conf
#: in MongoDB's source), verbatim.
DEBIAN_MONGOD_CONF = """\
# mongod.conf

# for documentation of all options, see:
#   http://docs.mongodb.org/manual/reference/configuration-options/

# Where and how to store data.
storage:
  dbPath: /var/lib/mongodb
#  engine:
#  wiredTiger:

# where to write logging data.
systemLog:
  destination: file
  logAppend: true
  path: /var/log/mongodb/mongod.log

# network interfaces
net:
  port: 27017
  bindIp: 127.0.0.1


# how the process runs
processManagement:
  timeZoneInfo: /usr/share/zoneinfo

#security:

#operationProfiling:

#replication:

#sharding:

## Enterprise-Only Options:

#auditLog:
"""

#: /etc/mongod.conf as the RPM packages up to MongoDB 6.0 install it (rpm/mongod.conf), verbatim:
#: it runs the server in the background and names a pid file, and still has the journal option
#: MongoDB 6.1 removed.
RPM_MONGOD_CONF = """\
# mongod.conf

# for documentation of all options, see:
#   http://docs.mongodb.org/manual/reference/configuration-options/

# where to write logging data.
systemLog:
  destination: file
  logAppend: true
  path: /var/log/mongodb/mongod.log

# Where and how to store data.
storage:
  dbPath: /var/lib/mongo
  journal:
    enabled: true
#  engine:
#  wiredTiger:

# how the process runs
processManagement:
  fork: true  # fork and run in background
  pidFilePath: /var/run/mongodb/mongod.pid  # location of pidfile
  timeZoneInfo: /usr/share/zoneinfo

# network interfaces
net:
  port: 27017
  bindIp: 127.0.0.1  # Enter 0.0.0.0,:: to bind to all IPv4 and IPv6 addresses or, alternatively, use the net.bindIpAll setting.


#security:

#operationProfiling:

#replication:

#sharding:

## Enterprise-Only Options

#auditLog:
"""


def test_the_debian_package_mongod_conf(tmp_path: Path) -> None:
    config = parse_args(["--config", _config(tmp_path, DEBIAN_MONGOD_CONF)])
    assert (config.dbpath, config.port, config.bind_ip) == (
        "/var/lib/mongodb",
        27017,
        ("127.0.0.1",),
    )
    assert (config.logpath, config.logappend) == ("/var/log/mongodb/mongod.log", True)
    assert config.timezone_info == "/usr/share/zoneinfo"
    assert (config.fork, config.pid_file, config.warnings) == (False, None, ())
    assert config.parsed()["processManagement"] == {"timeZoneInfo": "/usr/share/zoneinfo"}


def test_the_rpm_package_mongod_conf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, RPM_MONGOD_CONF)
    if not portability.can_fork():  # Windows, where mongod has no --fork either
        assert "--fork: this system cannot fork" in _refused(["--config", path], capsys)
        return
    config = parse_args(["--config", path])
    assert (config.dbpath, config.fork) == ("/var/lib/mongo", True)
    assert config.pid_file == "/var/run/mongodb/mongod.pid"
    assert config.warnings == (
        "storage.journal.enabled: true is ignored: writes are always journaled, as on MongoDB "
        "6.1 and later (a commit survives a crash of the server at once, and of the machine "
        "after journalCommitInterval)",
    )
    assert config.parsed()["processManagement"] == {
        "fork": True,
        "pidFilePath": "/var/run/mongodb/mongod.pid",
        "timeZoneInfo": "/usr/share/zoneinfo",
    }


def test_wired_tiger_is_accepted_with_warnings(tmp_path: Path) -> None:
    text = (
        "storage:\n  engine: wiredTiger\n  directoryPerDB: true\n  wiredTiger:\n"
        "    engineConfig:\n      cacheSizeGB: 1.5\n      journalCompressor: zstd\n"
        "    collectionConfig:\n      blockCompressor: snappy\n"
        "    indexConfig:\n      prefixCompression: false\n"
    )
    config = parse_args(["--config", _config(tmp_path, text)])
    assert config.storage_engine == "wiredTiger"
    assert config.parsed()["storage"]["engine"] == "wiredTiger"
    assert [w.split(" is ignored")[0] for w in config.warnings[1:]] == [
        "storage.directoryPerDB: true",
        "storage.wiredTiger.engineConfig.cacheSizeGB: 1.5",
        "storage.wiredTiger.engineConfig.journalCompressor: zstd",
        "storage.wiredTiger.collectionConfig.blockCompressor: snappy",
        "storage.wiredTiger.indexConfig.prefixCompression: false",
    ]
    assert config.warnings[0] == (
        "storage.engine: wiredTiger accepted, but ebbdb stores data in its own engine (LMDB)"
    )


def test_storage_options_that_are_server_parameters(tmp_path: Path) -> None:
    text = "storage:\n  syncPeriodSecs: 30\n  journal:\n    commitIntervalMs: 40\n"
    path = _config(tmp_path, text)
    config = parse_args(["--config", path])
    assert config.parameters == {"journalCommitInterval": 40, "syncdelay": 30.0}
    flagged = parse_args(["--config", path, "--setParameter", "journalCommitInterval=7"])
    assert flagged.parameters["journalCommitInterval"] == 7  # a flag wins over the file


def test_log_rotate(tmp_path: Path) -> None:
    text = "systemLog:\n  path: /x.log\n  logAppend: true\n  logRotate: reopen\n"
    config = parse_args(["--config", _config(tmp_path, text)])
    assert config.log_rotate == "reopen"
    assert config.parsed()["systemLog"]["logRotate"] == "reopen"


def test_fork_needs_a_log_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--fork has to be used with --logpath" in _refused(["--fork"], capsys)
