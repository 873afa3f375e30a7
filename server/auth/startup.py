"""At start: the root user the `mongo` image's variables ask for, created if missing, and mongod's
warning when the server listens beyond this machine without access control. SCRAM is loaded
only for a root user to create."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ebbdb.server.config import Config
from ebbdb.server.gateway import Gateway
from ebbdb.server.log import log_event

if TYPE_CHECKING:
    from ebbdb.server.auth.users import UserStore

log = logging.getLogger("ebbdb.control")

#: mongod's startup warning when access control is off.
ACCESS_CONTROL_WARNING_ID = 22120
ACCESS_CONTROL_WARNING = (
    "Access control is not enabled for the database. Read and write access to data and "
    "configuration is unrestricted"
)


async def prepare(config: Config, store: UserStore, gateway: Gateway) -> None:
    """Create the configured root user if missing; warn about an open server."""
    root = config.root_user
    if root is not None and await store.get(gateway, root.name, "admin") is None:
        from ebbdb.server.auth.scram import MECHANISMS, make_credentials
        from ebbdb.server.auth.users import User

        credentials = await gateway.read(make_credentials, root.name, root.password, MECHANISMS)
        await store.insert(gateway, User.new(root.name, "admin", (("root", "admin"),), credentials))
        log.info("created the root user %s@admin (MONGO_INITDB_ROOT_USERNAME)", root.name)
    if not config.auth and any(not _is_loopback(host) for host in config.bind_ip):
        log_event(
            log,
            logging.WARNING,
            ACCESS_CONTROL_WARNING_ID,
            ACCESS_CONTROL_WARNING,
            {"bindIp": ",".join(config.bind_ip)},
            ctx="initandlisten",
            text=f"{ACCESS_CONTROL_WARNING} (listening on {', '.join(config.bind_ip)}; start "
            "with --auth and create users to require a login)",
        )


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "127.0.0.1", "::1"):
        return True  # the default addresses, known without the ipaddress module
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name or an interface: reachable from elsewhere
