"""A full disk through a real client: a `python -m ebbdb` process runs under a file-size limit
(RLIMIT_FSIZE, so no root and no special file system), is filled until writes fail, and must
answer MongoDB's OutOfDiskSpace (14031) for writes, keep answering reads, let deletes and drops
free space that new writes then use, keep every acknowledged document, and restart cleanly."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from tests.e2e.test_portability import server_env as portability_env

ROOT = Path(__file__).resolve().parents[2]
#: Every file the server writes stays under this size (the data file is the one that grows).
FILE_LIMIT = 24 << 20
OUT_OF_DISK_SPACE = 14031
BLOB = 8000
_LISTENING = re.compile(rb"listening on 127\.0\.0\.1:(\d+)")

Client = MongoClient[dict[str, Any]]


def _limit_files() -> None:
    """In the child before exec: cap file sizes; writes past the cap fail with EFBIG (the
    server ignores SIGXFSZ itself, as must this child until it has started)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


class LimitedServer:
    def __init__(self, dbpath: Path, log: Path, env: dict[str, str] | None = None) -> None:
        # The server's log goes to `log` (under the limit too); its startup line to a pipe.
        argv = [sys.executable, "-m", "ebbdb", "--port=0", f"--dbpath={dbpath}"]
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=ROOT,
                preexec_fn=_limit_files,
                env=env,
            )
        assert self.proc.stdout is not None
        match = _LISTENING.search(self.proc.stdout.readline())
        assert match is not None, log.read_text()
        self.client: Client = MongoClient(
            f"mongodb://127.0.0.1:{int(match.group(1))}/?directConnection=true",
            serverSelectionTimeoutMS=10_000,
        )

    def stop(self) -> int:
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield tmp_path / "db", tmp_path / "server.log"


def _fill(client: Client) -> tuple[list[int], OperationFailure]:
    """Insert batches until the disk refuses one; returns the acknowledged _ids and the error."""
    coll = client.full.docs
    acked: list[int] = []
    for batch in range(10_000):
        docs = [{"_id": batch * 50 + i, "k": batch, "blob": b"x" * BLOB} for i in range(50)]
        try:
            coll.insert_many(docs)
        except BulkWriteError as exc:
            # An ordered insert stops at the first refused document; those before it are in.
            acked += [d["_id"] for d in docs[: exc.details["nInserted"]]]
            return acked, exc
        acked += [d["_id"] for d in docs]
    raise AssertionError("the file-size limit was never reached")


@pytest.mark.parametrize("mode", ["posix", "hidden"])
def test_writes_to_a_full_disk(paths: tuple[Path, Path], mode: str) -> None:
    """Also with posix_fallocate hidden (tests/e2e/test_portability.py): the headroom is then
    zeros written past the data file's end, and the limit must show there just the same."""
    dbpath, log = paths
    env = portability_env(mode)
    srv = LimitedServer(dbpath, log, env)
    try:
        client = srv.client
        client.full.create_collection("other")
        client.full.other.insert_many([{"_id": i, "blob": b"y" * BLOB} for i in range(200)])
        acked, exc = _fill(client)
        assert len(acked) > 1000
        error = exc.details["writeErrors"][0]
        assert error["code"] == OUT_OF_DISK_SPACE
        assert error["errmsg"] == f"File too large: {dbpath / 'data.mdb'}"

        coll = client.full.docs
        # Writes that need space: MongoDB's code and codeName, whatever the command.
        with pytest.raises(WriteError) as one:
            coll.insert_one({"_id": "late", "blob": b"z" * BLOB})
        assert one.value.code == OUT_OF_DISK_SPACE
        with pytest.raises(OperationFailure) as indexed:
            coll.create_index("k")
        assert (indexed.value.code, indexed.value.details["codeName"]) == (
            OUT_OF_DISK_SPACE,
            "OutOfDiskSpace",
        )
        with pytest.raises(WriteError) as updated:
            coll.update_one({"_id": acked[0]}, {"$set": {"more": b"m" * BLOB}})
        assert updated.value.code == OUT_OF_DISK_SPACE

        # Reads go on, and every acknowledged document is there.
        assert coll.count_documents({}) == len(acked)
        assert coll.find_one({"_id": acked[-1]}, {"blob": 0}) == {
            "_id": acked[-1],
            "k": acked[-1] // 50,
        }
        assert client.full.command("ping")["ok"] == 1.0

        # Deletes and drops work and free pages inside the file; new writes use them.
        assert client.full.other.drop() is None
        half = acked[len(acked) // 2]
        deleted = coll.delete_many({"_id": {"$lt": half}}).deleted_count
        assert deleted == len(acked) // 2
        kept = [i for i in acked if i >= half]
        # A write bigger than what is free stops at the first document that does not fit: an
        # insert_many commits in slices (as mongod's yields), so those before it stay; the slice
        # that failed is undone. Once they are deleted again, the next writes succeed.
        with pytest.raises(BulkWriteError) as big:
            coll.insert_many([{"_id": f"big{i}", "blob": b"b" * (1 << 20)} for i in range(30)])
        fitted = big.value.details["nInserted"]
        assert fitted < 30
        assert big.value.details["writeErrors"][0]["code"] == OUT_OF_DISK_SPACE
        assert big.value.details["writeErrors"][0]["index"] == fitted
        bigs = [f"big{i}" for i in range(fitted)]
        assert coll.delete_many({"_id": {"$in": bigs}}).deleted_count == fitted
        coll.insert_many([{"_id": f"again{i}", "blob": b"w" * BLOB} for i in range(100)])
        coll.create_index("k")
        assert coll.count_documents({}) == len(kept) + 100
        assert client.full.command("validate", "docs")["valid"] is True
        assert srv.stop() == 0
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()

    # A restart finds everything that was acknowledged and not deleted.
    srv = LimitedServer(dbpath, log, env)
    try:
        coll = srv.client.full.docs
        ids = {d["_id"] for d in coll.find({}, {"_id": 1})}
        assert ids == set(kept) | {f"again{i}" for i in range(100)}
        assert srv.client.full.command("validate", "docs", full=True)["valid"] is True
        assert srv.client.full.list_collection_names() == ["docs"]
        assert srv.stop() == 0
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
    assert "Traceback" not in log.read_text()
    assert "Error in sitecustomize" not in log.read_text()  # the hiding took
