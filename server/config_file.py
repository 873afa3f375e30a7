"""--config FILE: the mongod.conf YAML options ebbdb applies, read into plain settings. An option
mongod has but ebbdb does not, a misspelt one, or a value of the wrong type is an error naming the
option's path and what was expected, as mongod refuses a config file it does not understand. PyYAML
is imported only when there is a file to read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.server.tls import TLS_MODES

#: mongod's verbosity range (systemLog.verbosity, -v to -vvvvv).
MAX_VERBOSITY = 5
PROFILE_MODES = {"off": 0, "slowOp": 1, "all": 2}


class ConfigFileError(Exception):
    """The config file cannot be read, is not YAML, or holds an option ebbdb refuses."""


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"expected an integer from {low} to {high}")
        return value

    return check


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def parse_host(text: str) -> tuple[str, int | None]:
    """A `host:port`, `host`, `[v6]:port` or `[v6]` as --replSetHost takes it: the host and the
    port (None: the port the server listens on). Raises ValueError."""
    text = text.strip()
    port: str | None = None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"cannot parse {text!r} as host:port")
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host = text
    if not host or (port is not None and not port.isdigit()):
        raise ValueError(f"cannot parse {text!r} as host:port")
    number = None if port is None else int(port)
    if number is not None and not 1 <= number <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {number}")
    return host, number


def _host(value: Any) -> str:
    text = _text(value)
    parse_host(text)
    return text


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError("expected a number from 0 to 1")
    return float(value)


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError("expected one of " + ", ".join(repr(c) for c in choices))
        return str(value)

    return check


def _profile_mode(value: Any) -> str:
    # YAML 1.1 (PyYAML) reads a bare `off` as false; mongod's YAML 1.2 reader reads it as "off".
    return _one_of(*PROFILE_MODES)("off" if value is False else value)


def _log_destination(value: Any) -> str:
    # mongod's other destination, syslog, is not something ebbdb writes to.
    return _one_of("file")(value)


#: mongod's net.unixDomainSocket.filePermissions default (since 3.0; 0777 before).
DEFAULT_SOCKET_MODE = 0o700
#: mongod's net.unixDomainSocket.pathPrefix default.
DEFAULT_SOCKET_PREFIX = "/tmp"


def parse_file_mode(value: Any) -> int:
    """--filePermissions / net.unixDomainSocket.filePermissions: mongod reads the number as C
    does (a leading 0 is octal, 0x hex, else decimal; YAML's `0770` is octal too). ebbdb takes
    permission bits only (0 to 0777), so that `777` (decimal, which is 0o1411) is refused rather
    than applied. Raises ValueError."""
    number = -1
    if isinstance(value, str):
        digits = value.strip()
        try:
            if digits.lower().startswith(("0x", "0o")):
                number = int(digits, 0)
            elif len(digits) > 1 and digits.startswith("0"):
                number = int(digits, 8)
            else:
                number = int(digits, 10)
        except ValueError:
            number = -1
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    if not 0 <= number <= 0o777:
        raise ValueError(FILE_MODE_EXPECTED)
    return number


#: What parse_file_mode refuses with.
FILE_MODE_EXPECTED = "expected a file mode from 0 to 0777 (octal, as in 0700)"


def is_socket_path(address: str) -> bool:
    """Whether a --bind_ip entry names a Unix domain socket rather than a host: as mongod
    decides, it holds a '/'."""
    return "/" in address


_INT32_MAX = 2**31 - 1


def _number(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number from {low:g} to {high:g}")
        if not low <= value <= high:
            raise ValueError(f"expected a number from {low:g} to {high:g}")
        return value

    return check


def _storage_engine(value: Any) -> str:
    # ebbdb has one engine of its own. wiredTiger, mongod's default (and what its packaged
    # mongod.conf names), is accepted with a warning; any other engine is refused, as its data
    # files and its promises (inMemory's: nothing on disk) are not what ebbdb gives.
    if value != "wiredTiger":
        raise ValueError(
            "ebbdb stores data in its own engine and accepts only 'wiredTiger' here (with a "
            "warning); for data that goes away with the server, use --ephemeral"
        )
    return str(value)


_COMPRESSORS = ("none", "snappy", "zlib", "zstd")

#: Every option read, by its dotted path, with the check that types it.
OPTIONS: dict[str, Callable[[Any], Any]] = {
    "net.port": _integer(0, 65535),
    "net.bindIp": _text,
    "net.bindIpAll": _boolean,
    "net.ipv6": _boolean,
    "net.maxIncomingConnections": _integer(1, _INT32_MAX),
    "net.unixDomainSocket.enabled": _boolean,
    "net.unixDomainSocket.pathPrefix": _text,
    "net.unixDomainSocket.filePermissions": parse_file_mode,
    "net.tls.mode": _one_of(*TLS_MODES),
    "net.tls.certificateKeyFile": _text,
    "net.tls.certificateKeyFilePassword": _text,
    "net.tls.CAFile": _text,
    "net.tls.allowConnectionsWithoutCertificates": _boolean,
    "net.tls.allowInvalidCertificates": _boolean,
    "security.authorization": _one_of("enabled", "disabled"),
    "storage.dbPath": _text,
    "systemLog.destination": _log_destination,
    "systemLog.path": _text,
    "systemLog.logAppend": _boolean,
    "systemLog.quiet": _boolean,
    "systemLog.verbosity": _integer(0, MAX_VERBOSITY),
    "replication.replSetName": _text,
    "replication.oplogSizeMB": _integer(1, 1024 * 1024 * 1024),
    # Not mongod's: --replSetHost, the address the one member is known by.
    "replication.replSetHost": _host,
    "operationProfiling.mode": _profile_mode,
    "operationProfiling.slowOpThresholdMs": _integer(-_INT32_MAX - 1, _INT32_MAX),
    "operationProfiling.slowOpSampleRate": _fraction,
    "security.javascriptEnabled": _boolean,
    # processManagement: as the packages' mongod.conf has it.
    "processManagement.fork": _boolean,
    "processManagement.pidFilePath": _text,
    "processManagement.timeZoneInfo": _text,
    "systemLog.logRotate": _one_of("rename", "reopen"),
    "storage.engine": _storage_engine,
    # Mapped to the server parameters mongod maps them to (see MAPPED).
    "storage.journal.commitIntervalMs": _integer(1, 500),
    "storage.syncPeriodSecs": _number(0, 9 * 1000 * 1000),
}

#: Options mongod has that ebbdb accepts and ignores, with a start-up warning naming each one
#: given (its value is still checked as mongod checks it).
IGNORED: dict[str, Callable[[Any], Any]] = {
    "storage.journal.enabled": _boolean,
    "storage.directoryPerDB": _boolean,
    "storage.wiredTiger.engineConfig.cacheSizeGB": _number(0.25, 10000),
    "storage.wiredTiger.engineConfig.journalCompressor": _one_of(*_COMPRESSORS),
    "storage.wiredTiger.engineConfig.directoryForIndexes": _boolean,
    "storage.wiredTiger.engineConfig.maxCacheOverflowFileSizeGB": _number(0, 10**9),
    "storage.wiredTiger.engineConfig.zstdCompressionLevel": _integer(1, 22),
    "storage.wiredTiger.collectionConfig.blockCompressor": _one_of(*_COMPRESSORS),
    "storage.wiredTiger.indexConfig.prefixCompression": _boolean,
}

#: Why each family of IGNORED options does nothing here.
_IGNORED_BECAUSE = {
    "storage.journal.": "writes are always journaled, as on MongoDB 6.1 and later (a commit "
    "survives a crash of the server at once, and of the machine after journalCommitInterval)",
    "storage.directoryPerDB": "ebbdb keeps every database in one LMDB environment",
    "storage.wiredTiger.": "ebbdb stores data in its own engine, not WiredTiger",
}

#: Options that are server parameters in ebbdb, as mongod documents them: the parameter each
#: sets (a --setParameter of the same name wins, as a flag over the file).
MAPPED = {
    "storage.journal.commitIntervalMs": "journalCommitInterval",
    "storage.syncPeriodSecs": "syncdelay",
}


@dataclass(frozen=True)
class FileSettings:
    """What a config file set: `options` by dotted path (typed), and `set_parameters` as the
    `name=value` pairs --setParameter takes (MAPPED options among them, first)."""

    path: str
    options: dict[str, Any]
    set_parameters: list[str]
    #: What the file asks for that ebbdb accepts and ignores, one line each (logged at start).
    warnings: tuple[str, ...] = ()


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_config(text: str, path: str = "<config>") -> FileSettings:
    """Read the options of a mongod.conf text. Raises ConfigFileError naming the option."""
    import yaml  # type: ignore[import-untyped]

    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"config file {path} is not valid YAML: {exc}") from None
    if tree is None:
        tree = {}
    if not isinstance(tree, Mapping):
        raise ConfigFileError(
            f"config file {path}: expected a mapping of options, got {_describe(tree)}"
        )
    options: dict[str, Any] = {}
    params: list[str] = []

    def walk(node: Mapping[Any, Any], prefix: str) -> None:
        for key, value in node.items():
            where = f"{prefix}{key}"
            if not isinstance(key, str):
                raise ConfigFileError(f"config file {path}: unrecognized option: {where}")
            if where == "setParameter":
                if not isinstance(value, Mapping):
                    raise ConfigFileError(
                        f"config file {path}: setParameter: expected a mapping of parameter "
                        f"names to values, got {_describe(value)}"
                    )
                for name, v in value.items():
                    if isinstance(v, (Mapping, list)) or v is None:
                        raise ConfigFileError(
                            f"config file {path}: setParameter.{name}: expected a value, "
                            f"got {_describe(v)}"
                        )
                    params.append(f"{name}={_scalar_text(v)}")
                continue
            check = OPTIONS.get(where) or IGNORED.get(where)
            if check is None:
                if isinstance(value, Mapping) and value:
                    walk(value, where + ".")  # unknown leaves are named in full
                    continue
                if any(p.startswith(where + ".") for p in (*OPTIONS, *IGNORED)):
                    raise ConfigFileError(
                        f"config file {path}: {where}: expected a mapping of options, "
                        f"got {_describe(value)}"
                    )
                raise ConfigFileError(f"config file {path}: unrecognized option: {where}")
            try:
                options[where] = check(value)
            except ValueError as exc:
                raise ConfigFileError(
                    f"config file {path}: {where}: {exc}, got {_describe(value)}"
                ) from None

    walk(tree, "")
    mapped = [f"{MAPPED[k]}={_scalar_text(options[k])}" for k in MAPPED if k in options]
    warnings = [_ignored_warning(k, options.pop(k)) for k in IGNORED if k in options]
    if options.get("storage.engine") == "wiredTiger":
        warnings.insert(
            0, "storage.engine: wiredTiger accepted, but ebbdb stores data in its own engine (LMDB)"
        )
    if options.get("systemLog.logRotate") == "reopen" and not options.get("systemLog.logAppend"):
        # mongod's rule: reopening the same file only makes sense when it is appended to.
        raise ConfigFileError(
            f"config file {path}: systemLog.logRotate: reopen needs systemLog.logAppend: true"
        )
    if "systemLog.path" in options and options.get("systemLog.destination") is None:
        options["systemLog.destination"] = "file"
    if options.get("systemLog.destination") == "file" and "systemLog.path" not in options:
        raise ConfigFileError(
            f"config file {path}: systemLog.path: required when systemLog.destination is file"
        )
    return FileSettings(path, options, mapped + params, tuple(warnings))


def _ignored_warning(option: str, value: Any) -> str:
    because = next(v for k, v in _IGNORED_BECAUSE.items() if option.startswith(k))
    return f"{option}: {_scalar_text(value)} is ignored: {because}"


def read_config(path: str) -> FileSettings:
    """Read and parse the config file at `path`. Raises ConfigFileError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigFileError(f"cannot read config file {path}: {reason}") from None
    return parse_config(text, path)
