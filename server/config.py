"""Command line and configuration, in mongod's spelling: flags, and the options of a mongod.conf
given with --config (flags override the file)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ebbdb.server.config_file import (
    DEFAULT_SOCKET_MODE,
    DEFAULT_SOCKET_PREFIX,
    FILE_MODE_EXPECTED,
    MAX_VERBOSITY,
    PROFILE_MODES,
    ConfigFileError,
    is_socket_path,
    parse_file_mode,
    parse_host,
    read_config,
)
from ebbdb.server.log import LOG_FORMATS, LogFormat
from ebbdb.server.parameters import parse_startup
from ebbdb.server.tls import TLS_MODES, TLSSettings
from ebbdb.server.version import EBBDB_VERSION, MONGODB_VERSION
from ebbdb.storage.core import portability

DEFAULT_PORT = 27017
DEFAULT_DBPATH = "./ebbdb-data"
#: mongod's net.maxIncomingConnections default.
DEFAULT_MAX_CONNECTIONS = 1_000_000
#: mongod's operationProfiling.slowOpThresholdMs default.
DEFAULT_SLOWMS = 100
#: The oplog's size when --oplogSize is not given (mongod takes 5% of the disk; ebbdb a fixed size).
DEFAULT_OPLOG_SIZE_MB = 192
#: mongod's bound on --oplogSize: 1 PB.
MAX_OPLOG_SIZE_MB = 1024 * 1024 * 1024


@dataclass(frozen=True)
class RootUser:
    """The root user the `mongo` image's MONGO_INITDB_ROOT_USERNAME and _PASSWORD ask for (the
    password is never shown: not in repr, not in getCmdLineOpts, not in the log)."""

    name: str
    password: str = field(repr=False)


#: The `mongo` image's variables: both set, the server creates this root user (if missing) and
#: runs with --auth. The *_FILE forms name a file holding the value (Docker secrets).
ROOT_USER_VARIABLES = ("MONGO_INITDB_ROOT_USERNAME", "MONGO_INITDB_ROOT_PASSWORD")


def root_user_from(environ: Mapping[str, str]) -> RootUser | None:
    """The root user the environment asks for; None if it asks for none. Raises ValueError when
    only one of the two is given."""
    values: list[str] = []
    for name in ROOT_USER_VARIABLES:
        value = environ.get(name, "")
        path = environ.get(f"{name}_FILE", "")
        if not value and path:
            try:
                with open(path, encoding="utf-8") as f:
                    value = f.read().rstrip("\n")
            except OSError as exc:
                raise ValueError(f"{name}_FILE: cannot read {path}: {exc.strerror}") from exc
        values.append(value)
    name_value, password = values
    if not name_value and not password:
        return None
    if not name_value or not password:
        raise ValueError(
            "missing 'MONGO_INITDB_ROOT_USERNAME' or 'MONGO_INITDB_ROOT_PASSWORD': both must be "
            "specified for a user to be created"
        )
    return RootUser(name_value, password)


@dataclass(frozen=True)
class Config:
    port: int = DEFAULT_PORT
    bind_ip: tuple[str, ...] = ("127.0.0.1",)
    dbpath: str = DEFAULT_DBPATH
    parameters: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False
    argv: tuple[str, ...] = ()
    #: --logpath: the log goes to this file instead of stderr.
    logpath: str | None = None
    #: --logappend: append to an existing --logpath instead of renaming it aside.
    logappend: bool = False
    #: --ephemeral: the data lives in a temporary directory (made at start, `dbpath` then names
    #: it) that is removed when the server stops.
    ephemeral: bool = False
    #: -v (1) to -vvvvv (5), or systemLog.verbosity: debug lines down to D<verbosity>.
    verbosity: int = 0
    #: --logFormat: readable "text" lines, or mongod's structured "json" lines.
    log_format: LogFormat = "text"
    #: --maxConns / net.maxIncomingConnections: connections past this are closed at once.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    #: --slowms / operationProfiling.slowOpThresholdMs: an operation slower than this is logged.
    slowms: int = DEFAULT_SLOWMS
    #: --slowOpSampleRate / operationProfiling.slowOpSampleRate: the share of slow operations
    #: logged (and profiled at level 1).
    sample_rate: float = 1.0
    #: --profile / operationProfiling.mode: every database's profiling level until `profile`.
    profile: int = 0
    #: --config: the YAML file the options were read from.
    config_file: str | None = None
    #: --bind_ip_all and --ipv6 as given (bind_ip holds the addresses they mean).
    bind_ip_all: bool = False
    ipv6: bool = False
    #: --tlsMode and the other --tls* options.
    tls: TLSSettings = field(default_factory=TLSSettings)
    #: --auth / security.authorization: enabled: clients log in, and commands are checked
    #: against their roles.
    auth: bool = False
    #: MONGO_INITDB_ROOT_USERNAME and _PASSWORD: created at start if missing (implies `auth`).
    root_user: RootUser | None = None
    #: --replSet / replication.replSetName: a one-member replica set of this name (None: a
    #: standalone server, the default).
    repl_set: str | None = None
    #: --oplogSize / replication.oplogSizeMB: the capped size of local.oplog.rs, in megabytes.
    oplog_size_mb: int = DEFAULT_OPLOG_SIZE_MB
    #: --replSetHost: the host:port the replica set's one member is known by (clients connect to
    #: it after discovery); None: the first --bind_ip address and the port listened on.
    repl_set_host: str | None = None
    #: net.unixDomainSocket: listen on PREFIX/ebbdb-<port>.sock too, where the system has Unix
    #: domain sockets (--nounixsocket: not), with these permissions (--filePermissions).
    unix_socket: bool = True
    unix_socket_prefix: str = DEFAULT_SOCKET_PREFIX
    unix_socket_mode: int = DEFAULT_SOCKET_MODE
    #: --noscripting / security.javascriptEnabled: false turns server-side JavaScript ($where,
    #: $function, $accumulator, mapReduce) off, as on mongod.
    scripting: bool = True
    #: --fork / processManagement.fork: run in the background once listening (POSIX).
    fork: bool = False
    #: --pidfilepath / processManagement.pidFilePath: the file the server's pid is written to.
    pid_file: str | None = None
    #: --timeZoneInfo / processManagement.timeZoneInfo: the time zone database's directory.
    timezone_info: str | None = None
    #: systemLog.logRotate: "rename" (mongod's default) or "reopen".
    log_rotate: str = "rename"
    #: storage.engine as the config file names it (only "wiredTiger" is accepted).
    storage_engine: str | None = None
    #: What the config file asks for that is accepted and ignored, logged as warnings at start.
    warnings: tuple[str, ...] = ()

    def unix_socket_path(self, port: int) -> str:
        """The socket file for the port the server listens on (the real one with --port 0):
        mongod's mongodb-<port>.sock, named ebbdb-<port>.sock here."""
        return os.path.join(self.unix_socket_prefix, f"ebbdb-{port}.sock")

    @property
    def hosts(self) -> tuple[str, ...]:
        """The --bind_ip addresses that are hosts (TCP)."""
        return tuple(a for a in self.bind_ip if not is_socket_path(a))

    @property
    def socket_paths(self) -> tuple[str, ...]:
        """The --bind_ip entries that name Unix domain sockets (a path: mongod's rule)."""
        return tuple(a for a in self.bind_ip if is_socket_path(a))

    def parsed(self) -> dict[str, Any]:
        """The `parsed` section of getCmdLineOpts."""
        net: dict[str, Any] = {"bindIp": ",".join(self.bind_ip), "port": self.port}
        if self.bind_ip_all:
            net["bindIpAll"] = True
        if self.ipv6:
            net["ipv6"] = True
        if self.max_connections != DEFAULT_MAX_CONNECTIONS:
            net["maxIncomingConnections"] = self.max_connections
        if self.tls.enabled:
            net["tls"] = self.tls.parsed()
        unix: dict[str, Any] = {}
        if not self.unix_socket:
            unix["enabled"] = False
        if self.unix_socket_prefix != DEFAULT_SOCKET_PREFIX:
            unix["pathPrefix"] = self.unix_socket_prefix
        if self.unix_socket_mode != DEFAULT_SOCKET_MODE:
            unix["filePermissions"] = self.unix_socket_mode
        if unix:
            net["unixDomainSocket"] = unix
        out: dict[str, Any] = {}
        if self.config_file is not None:
            out["config"] = self.config_file
        out["net"] = net
        profiling: dict[str, Any] = {}
        if self.profile:
            profiling["mode"] = next(k for k, v in PROFILE_MODES.items() if v == self.profile)
        if self.slowms != DEFAULT_SLOWMS:
            profiling["slowOpThresholdMs"] = self.slowms
        if self.sample_rate != 1.0:
            profiling["slowOpSampleRate"] = self.sample_rate
        if profiling:
            out["operationProfiling"] = profiling
        out["storage"] = {"dbPath": self.dbpath}
        if self.storage_engine is not None:
            out["storage"]["engine"] = self.storage_engine
        process: dict[str, Any] = {}
        if self.fork:
            process.update(fork=True)  # (a keyword: the string "fork" is the seam test's sign)
        if self.pid_file is not None:
            process["pidFilePath"] = self.pid_file
        if self.timezone_info is not None:
            process["timeZoneInfo"] = self.timezone_info
        if process:
            out["processManagement"] = process
        security: dict[str, Any] = {}
        if self.auth:
            security["authorization"] = "enabled"
        if not self.scripting:
            security["javascriptEnabled"] = False
        if security:
            out["security"] = security
        if self.repl_set is not None:
            replication: dict[str, Any] = {"replSet": self.repl_set}
            if self.oplog_size_mb != DEFAULT_OPLOG_SIZE_MB:
                replication["oplogSizeMB"] = self.oplog_size_mb
            if self.repl_set_host is not None:
                replication["replSetHost"] = self.repl_set_host  # ebbdb's own
            out["replication"] = replication
        if self.parameters:
            out["setParameter"] = {k: str(v) for k, v in self.parameters.items()}
        system_log: dict[str, Any] = {}
        if self.logpath is not None:
            system_log["destination"] = "file"
            if self.logappend:
                system_log["logAppend"] = True
            system_log["path"] = self.logpath
        if self.log_rotate != "rename":
            system_log["logRotate"] = self.log_rotate
        if self.quiet:
            system_log["quiet"] = True
        if self.verbosity:
            system_log["verbosity"] = self.verbosity
        if system_log:
            out["systemLog"] = system_log
        return out


def socket_uri_host(path: str) -> str:
    """A Unix domain socket's path as a connection string's host: percent-encoded, as drivers
    read it (`/tmp/ebbdb-27017.sock` is `%2Ftmp%2Febbdb-27017.sock`)."""
    from urllib.parse import quote

    return quote(path, safe="")


def _ranged(
    name: str, convert: Callable[[str], Any], low: float, high: float, refusal: str
) -> Callable[[str], Any]:
    """An argparse type: `convert`, then refuse a value outside `low..high` with `refusal`."""

    def parse(text: str) -> Any:
        value = convert(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{refusal}, got {value}")
        return value

    parse.__name__ = name  # argparse names the type in "invalid <name> value: 'x'"
    return parse


_port = _ranged("port", int, 0, 65535, "port must be between 0 and 65535")
_positive = _ranged("count", int, 1, 2**31 - 1, "must be at least 1")
_fraction = _ranged("fraction", float, 0, 1, "must be between 0 and 1")
_oplog_size = _ranged("size", int, 1, MAX_OPLOG_SIZE_MB, "must be at least 1 (megabytes)")


def _file_mode(text: str) -> int:
    try:
        return parse_file_mode(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{FILE_MODE_EXPECTED}, got {text}") from None


_file_mode.__name__ = "mode"


def _set_name(text: str) -> str:
    """--replSet NAME. A seed list (`rs0/host:port,...`) is a legacy spelling of the same option:
    the name is the part before the slash. An empty name is no replica set, as with mongod (so a
    Compose file can pass `--replSet=${VARIABLE:-}`)."""
    name = text.partition("/")[0]
    if "/" in text and not name:
        raise argparse.ArgumentTypeError("the replica set name must not be empty")
    return name


def _host(text: str) -> str:
    if not text.strip():
        return ""  # the default host
    try:
        parse_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


_host.__name__ = "host"


class _Verbosity(argparse.Action):
    """-v, -vv, ... -vvvvv (each v one level), and --verbose."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        text = values if isinstance(values, str) else ""
        if text.strip("v"):
            parser.error(f"{option_string}: expected only v's (as in -vvv), got {text!r}")
        level = (namespace.verbosity or 0) + 1 + len(text)
        namespace.verbosity = min(level, MAX_VERBOSITY)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ebbdb",
        description="ebbdb: a MongoDB-compatible database server on LMDB.",
    )
    # Defaults are None so that a flag given can be told from one left out: a flag overrides
    # the config file, the config file overrides the defaults.
    p.add_argument(
        "-f",
        "--config",
        metavar="FILE",
        help="read options from a mongod.conf YAML file (net, security, storage, systemLog, "
        "processManagement, operationProfiling, replication, setParameter); flags override it",
    )
    p.add_argument(
        "--port",
        type=_port,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free port)",
    )
    p.add_argument(
        "--bind_ip",
        help="comma-separated addresses to listen on (default 127.0.0.1); an entry with a "
        "'/' is the path of a Unix domain socket to listen on as well",
    )
    p.add_argument(
        "--bind_ip_all",
        action="store_true",
        default=None,
        help="listen on all IPv4 addresses (and all IPv6 ones with --ipv6), as mongod does",
    )
    p.add_argument(
        "--ipv6", action="store_true", default=None, help="with --bind_ip_all, listen on :: too"
    )
    p.add_argument(
        "--nounixsocket",
        action="store_true",
        default=None,
        help="do not listen on the Unix domain socket (POSIX only; there is none on Windows)",
    )
    p.add_argument(
        "--unixSocketPrefix",
        metavar="DIR",
        help=f"the directory of the Unix domain socket DIR/ebbdb-<port>.sock (default "
        f"{DEFAULT_SOCKET_PREFIX})",
    )
    p.add_argument(
        "--filePermissions",
        type=_file_mode,
        metavar="MODE",
        help=f"the Unix domain socket file's permissions (default {DEFAULT_SOCKET_MODE:04o})",
    )
    p.add_argument(
        "--maxConns",
        type=_positive,
        metavar="N",
        help=f"close connections past N open ones (default {DEFAULT_MAX_CONNECTIONS:,})",
    )
    p.add_argument(
        "--tlsMode",
        choices=TLS_MODES,
        help="disabled (the default); allowTLS or preferTLS take TLS and plain connections; "
        "requireTLS takes TLS connections only",
    )
    p.add_argument(
        "--tlsCertificateKeyFile",
        metavar="FILE",
        help="PEM file with the server's certificate and its private key",
    )
    p.add_argument(
        "--tlsCertificateKeyFilePassword",
        metavar="PASSWORD",
        help="the password of an encrypted private key in --tlsCertificateKeyFile",
    )
    p.add_argument(
        "--tlsCAFile",
        metavar="FILE",
        help="PEM file of the certificate authorities that client certificates must chain "
        "to; with it, clients must present a certificate",
    )
    p.add_argument(
        "--tlsAllowConnectionsWithoutCertificates",
        action="store_true",
        default=None,
        help="with --tlsCAFile, clients without a certificate are accepted too",
    )
    p.add_argument(
        "--tlsAllowInvalidCertificates",
        action="store_true",
        default=None,
        help="accept client certificates that do not verify against --tlsCAFile",
    )
    p.add_argument(
        "--auth",
        action="store_true",
        default=None,
        help="require clients to log in (SCRAM-SHA-256 or SCRAM-SHA-1) and check every command "
        "against the user's roles",
    )
    p.add_argument(
        "--fork",
        action="store_true",
        default=None,
        help="run in the background once listening (POSIX; needs --logpath): the command "
        "exits 0 when the server is ready, or with the server's status if it cannot start",
    )
    p.add_argument(
        "--pidfilepath",
        metavar="FILE",
        help="write the server's process id to FILE (removed again at a clean exit)",
    )
    p.add_argument(
        "--timeZoneInfo",
        metavar="DIR",
        help="the time zone database (a zoneinfo directory such as /usr/share/zoneinfo) that "
        "time zone names are looked up in",
    )
    p.add_argument(
        "--noscripting",
        action="store_true",
        default=None,
        help="turn server-side JavaScript off ($where, $function, $accumulator, mapReduce)",
    )
    p.add_argument(
        "--replSet",
        type=_set_name,
        metavar="NAME",
        help="run as a one-member replica set of this name (initiated at start, primary at "
        "once): sessions' transactions, retryable writes, change streams",
    )
    p.add_argument(
        "--oplogSize",
        type=_oplog_size,
        metavar="MB",
        help=f"with --replSet, the capped size of local.oplog.rs (default "
        f"{DEFAULT_OPLOG_SIZE_MB} MB)",
    )
    p.add_argument(
        "--replSetHost",
        type=_host,
        metavar="HOST:PORT",
        help="with --replSet, the address the member is known by, which clients reconnect to "
        "after discovery (default: the first --bind_ip address and the port listened on); for "
        "a port published by Docker, the address and port clients reach it at",
    )
    p.add_argument(
        "--dbpath",
        help=f"data directory, created if missing (its parent must exist; default "
        f"{DEFAULT_DBPATH})",
    )
    p.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep the data in a temporary directory that is removed when the server stops "
        "(not with --dbpath)",
    )
    p.add_argument(
        "--setParameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a server parameter (repeatable)",
    )
    p.add_argument(
        "--quiet", action="store_true", default=None, help="log less (no connection events)"
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        nargs="?",
        const="",
        action=_Verbosity,
        help="log more: -v logs failed commands and every operation, -vv to -vvvvv "
        "lower debug levels",
    )
    p.add_argument(
        "--logFormat",
        choices=LOG_FORMATS,
        help="text (readable, the default) or json (mongod's structured lines)",
    )
    p.add_argument(
        "--logpath",
        metavar="FILE",
        help="log to FILE instead of stderr; an existing FILE is first renamed to "
        "FILE.<UTC time> unless --logappend is given",
    )
    p.add_argument(
        "--logappend",
        action="store_true",
        default=None,
        help="append to an existing --logpath file",
    )
    p.add_argument(
        "--slowms",
        type=int,
        metavar="MS",
        help=f"log operations slower than MS milliseconds (default {DEFAULT_SLOWMS})",
    )
    p.add_argument(
        "--slowOpSampleRate",
        type=_fraction,
        metavar="RATE",
        help="the share of slow operations logged and profiled (default 1.0)",
    )
    p.add_argument(
        "--profile",
        type=int,
        choices=(0, 1, 2),
        help="every database's profiling level at start: 0 off, 1 slow operations, 2 all",
    )
    p.add_argument(
        "--syncdelay",
        metavar="SECONDS",
        help="sync data to disk at least this often (mongod's; the journalCommitInterval "
        "parameter, 100 ms by default, is the usual bound)",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"ebbdb {EBBDB_VERSION} (MongoDB {MONGODB_VERSION} compatible)",
    )
    return p


def parse_args(argv: list[str], environ: Mapping[str, str] | None = None) -> Config:
    """Parse a command line (without the program name), reading --config first, and the `mongo`
    image's root user variables from `environ` (default: the process's). Exits with status 2 on
    bad input, the config file's included."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    opts: dict[str, Any] = {}
    file_params: list[str] = []
    warnings: tuple[str, ...] = ()
    if ns.config is not None:
        try:
            settings = read_config(ns.config)
        except ConfigFileError as exc:
            parser.error(str(exc))
        opts = settings.options
        file_params = settings.set_parameters
        warnings = settings.warnings

    def pick(flag: Any, path: str, default: Any) -> Any:
        if flag is not None:
            return flag
        return opts.get(path, default)

    pairs = list(ns.setParameter)
    if ns.syncdelay is not None:
        pairs.append(f"syncdelay={ns.syncdelay}")
    try:
        from_file = parse_startup(file_params)
    except ValueError as exc:
        parser.error(f"config file {ns.config}: setParameter: {exc}")
    try:
        params = {**from_file, **parse_startup(pairs)}  # a flag wins over the file
    except ValueError as exc:
        parser.error(str(exc))
    bind_ip_all = bool(pick(ns.bind_ip_all, "net.bindIpAll", False))
    ipv6 = bool(pick(ns.ipv6, "net.ipv6", False))
    if bind_ip_all:
        # mongod's rule: 0.0.0.0, and :: only with --ipv6 (a host without IPv6 still starts).
        bind: tuple[str, ...] = ("0.0.0.0", "::") if ipv6 else ("0.0.0.0",)
    else:
        bind_ip = pick(ns.bind_ip, "net.bindIp", "127.0.0.1")
        bind = tuple(part.strip() for part in bind_ip.split(",") if part.strip())
        if not bind:
            parser.error("--bind_ip needs at least one address")
        if all(is_socket_path(a) for a in bind):
            parser.error(
                "--bind_ip: ebbdb needs an IP address to listen on besides socket paths, "
                "for example 127.0.0.1"
            )
    logpath = pick(ns.logpath, "systemLog.path", None)
    if logpath is not None and not logpath:
        parser.error("--logpath needs a file name")
    fork = bool(pick(ns.fork, "processManagement.fork", False))
    if fork and logpath is None:
        parser.error("--fork has to be used with --logpath")  # mongod's rule (and message)
    if fork and not portability.can_fork():
        parser.error("--fork: this system cannot fork (on Windows, run ebbdb as a service)")
    dbpath = pick(ns.dbpath, "storage.dbPath", None)
    if ns.ephemeral and dbpath is not None:
        given = "--dbpath" if ns.dbpath is not None else f"storage.dbPath in {ns.config}"
        parser.error(f"--ephemeral keeps its data in a temporary directory: drop {given}")
    tls = TLSSettings(
        mode=pick(ns.tlsMode, "net.tls.mode", "disabled"),
        certificate_key_file=pick(ns.tlsCertificateKeyFile, "net.tls.certificateKeyFile", None),
        certificate_key_file_password=pick(
            ns.tlsCertificateKeyFilePassword, "net.tls.certificateKeyFilePassword", None
        ),
        ca_file=pick(ns.tlsCAFile, "net.tls.CAFile", None),
        allow_connections_without_certificates=bool(
            pick(
                ns.tlsAllowConnectionsWithoutCertificates,
                "net.tls.allowConnectionsWithoutCertificates",
                False,
            )
        ),
        allow_invalid_certificates=bool(
            pick(ns.tlsAllowInvalidCertificates, "net.tls.allowInvalidCertificates", False)
        ),
    )
    problem = tls.check()
    if problem is not None:
        parser.error(problem)
    try:
        root_user = root_user_from(os.environ if environ is None else environ)
    except ValueError as exc:
        parser.error(str(exc))
    auth = pick(ns.auth, "security.authorization", "disabled") in (True, "enabled")
    # Without --replSet, --oplogSize and --replSetHost are accepted and unused (as mongod does
    # with --oplogSize).
    repl_set = pick(ns.replSet, "replication.replSetName", None) or None
    repl_set_host = pick(ns.replSetHost, "replication.replSetHost", None) or None
    profile = ns.profile
    if profile is None:
        profile = PROFILE_MODES.get(opts.get("operationProfiling.mode", "off"), 0)
    return Config(
        port=pick(ns.port, "net.port", DEFAULT_PORT),
        bind_ip=bind,
        dbpath=dbpath if dbpath is not None else DEFAULT_DBPATH,
        parameters=params,
        quiet=bool(pick(ns.quiet, "systemLog.quiet", False)),
        argv=("ebbdb", *argv),
        logpath=logpath,
        logappend=bool(pick(ns.logappend, "systemLog.logAppend", False)),
        ephemeral=ns.ephemeral,
        verbosity=pick(ns.verbosity, "systemLog.verbosity", 0),
        log_format=ns.logFormat or "text",
        max_connections=pick(ns.maxConns, "net.maxIncomingConnections", DEFAULT_MAX_CONNECTIONS),
        slowms=pick(ns.slowms, "operationProfiling.slowOpThresholdMs", DEFAULT_SLOWMS),
        sample_rate=pick(ns.slowOpSampleRate, "operationProfiling.slowOpSampleRate", 1.0),
        profile=profile,
        config_file=ns.config,
        bind_ip_all=bind_ip_all,
        ipv6=ipv6,
        tls=tls,
        auth=auth or root_user is not None,
        root_user=root_user,
        repl_set=repl_set,
        oplog_size_mb=pick(ns.oplogSize, "replication.oplogSizeMB", DEFAULT_OPLOG_SIZE_MB),
        repl_set_host=repl_set_host,
        unix_socket=not ns.nounixsocket and opts.get("net.unixDomainSocket.enabled", True),
        unix_socket_prefix=pick(
            ns.unixSocketPrefix, "net.unixDomainSocket.pathPrefix", DEFAULT_SOCKET_PREFIX
        ),
        unix_socket_mode=pick(
            ns.filePermissions, "net.unixDomainSocket.filePermissions", DEFAULT_SOCKET_MODE
        ),
        scripting=not ns.noscripting and opts.get("security.javascriptEnabled", True),
        fork=fork,
        pid_file=pick(ns.pidfilepath, "processManagement.pidFilePath", None),
        timezone_info=pick(ns.timeZoneInfo, "processManagement.timeZoneInfo", None),
        log_rotate=opts.get("systemLog.logRotate", "rename"),
        storage_engine=opts.get("storage.engine"),
        warnings=warnings,
    )
