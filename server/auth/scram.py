"""SCRAM-SHA-1 and SCRAM-SHA-256 as MongoDB speaks them: stored credentials derived from a password
(salted keys only), and the server's side of one conversation, on the `scramp` library.

MongoDB's quirks live here: SCRAM-SHA-1 hashes the hex MD5 digest of "user:mongo:password" (the
client does the same), SCRAM-SHA-256 the SASLprep'd password itself; MongoDB's default iteration
counts and salt lengths. scramp is imported by the first login or new credentials, not at start."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from typing import Any

SHA1 = "SCRAM-SHA-1"
SHA256 = "SCRAM-SHA-256"
MECHANISMS = (SHA1, SHA256)
#: MongoDB's scramIterationCount and scramSHA256IterationCount defaults.
ITERATIONS = {SHA1: 10_000, SHA256: 15_000}
#: The salt lengths MongoDB uses: the hash's size less four bytes.
SALT_BYTES = {SHA1: 16, SHA256: 28}


class ScramError(Exception):
    """The conversation failed; `message` is for the log, never for the client."""


class MechanismError(Exception):
    """The user has no credentials for the mechanism asked for (MongoDB's MechanismUnavailable)."""


def mongo_digest(user: str, password: str) -> str:
    """MongoDB's SCRAM-SHA-1 password: the hex MD5 of "user:mongo:password" (the legacy
    MONGODB-CR digest, which both sides hash instead of the password)."""
    return hashlib.md5(f"{user}:mongo:{password}".encode()).hexdigest()


def make_credentials(
    user: str, password: str, mechanisms: tuple[str, ...], digested: bool = False
) -> dict[str, Any]:
    """The `credentials` subdocument of a user in admin.system.users: per mechanism the iteration
    count, the salt, the stored key and the server key (base64), never the password. With
    `digested`, `password` is already the SCRAM-SHA-1 digest (createUser's digestPassword: false).
    Runs PBKDF2 for tens of milliseconds: call it off the event loop. Raises ValueError for a
    password SASLprep refuses."""
    import scramp

    out: dict[str, Any] = {}
    for mech in mechanisms:
        secret = password
        if mech == SHA1 and not digested:
            secret = mongo_digest(user, password)
        try:
            salt, stored, server, count = scramp.ScramMechanism(mech).make_auth_info(
                secret, ITERATIONS[mech], os.urandom(SALT_BYTES[mech])
            )
        except scramp.ScramException as exc:
            raise ValueError(str(exc)) from exc
        out[mech] = {
            "iterationCount": count,
            "salt": _b64(salt),
            "storedKey": _b64(stored),
            "serverKey": _b64(server),
        }
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class StoredKeys:
    """One mechanism's stored credentials, decoded."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def of(cls, doc: Any) -> StoredKeys:
        return cls(
            base64.b64decode(doc["salt"]),
            base64.b64decode(doc["storedKey"]),
            base64.b64decode(doc["serverKey"]),
            int(doc["iterationCount"]),
        )


def client_user(payload: bytes) -> str:
    """The user name a client-first message names (`n=...`, with SCRAM's =2C and =3D undone).
    Raises ScramError for a message that names none."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScramError("the client-first message is not UTF-8") from exc
    for part in text.split(",")[2:]:
        if part.startswith("n="):
            return part[2:].replace("=2C", ",").replace("=3D", "=")
    raise ScramError("the client-first message names no user")


class Conversation:
    """The server's side of one SCRAM conversation: `start` takes the client-first message and
    the user's stored keys and answers the server-first message; `finish` takes the client-final
    message, checks the proof and answers the server-final message. Raises ScramError."""

    def __init__(self, mechanism: str, keys: StoredKeys) -> None:
        import scramp

        self.mechanism = mechanism
        self._keys = keys
        self._server = scramp.ScramMechanism(mechanism).make_server(self._lookup)
        self.finished = False
        #: The client asked (options.skipEmptyExchange) to be done with the server-final message.
        self.skip_empty = False

    def _lookup(self, _user: str) -> tuple[bytes, bytes, bytes, int]:
        k = self._keys
        return k.salt, k.stored_key, k.server_key, k.iterations

    def start(self, payload: bytes) -> bytes:
        import scramp

        try:
            self._server.set_client_first(payload.decode("utf-8"))
            return self._server.get_server_first().encode("utf-8")  # type: ignore[no-any-return]
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise ScramError(str(exc)) from exc

    def finish(self, payload: bytes) -> bytes:
        import scramp

        try:
            self._server.set_client_final(payload.decode("utf-8"))
            final = self._server.get_server_final()
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise ScramError(str(exc)) from exc
        self.finished = True
        return final.encode("utf-8")  # type: ignore[no-any-return]
