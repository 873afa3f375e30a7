"""How long the event loop waits while the TTL monitor purges: runs a server in this process (its
own temporary data directory), loads N documents that are all expired, and during one TTL pass
measures how late a 1 ms timer on the server's own loop fires, with a storage read each time.
That is the delay the purge adds to every other client, without the client's and the machine's
scheduling noise that bench/ttl.py also sees.

    python bench/ttl_loop.py [--n 60000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import tempfile
import time
from pathlib import Path

import bson

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run from a checkout, installed or not

from ebbdb.server.app import App  # noqa: E402
from ebbdb.server.config import Config  # noqa: E402
from ebbdb.storage.indexes.specs import parse_index_spec  # noqa: E402


async def run(n: int, path: str) -> None:
    app = App(Config(port=0, dbpath=path, quiet=True, parameters={"ttlMonitorEnabled": False}))
    await app.start()
    try:
        now = app.clock.now_ms()
        stamp = datetime.datetime.now(datetime.UTC)
        for start in range(0, n, 10_000):
            docs = [bson.encode({"t": stamp, "x": i}) for i in range(start, min(n, start + 10_000))]
            await app.services.gateway.write(app.engine.insert, "bench", "ttl", docs, True, now)
        spec = parse_index_spec({"key": {"t": 1}, "expireAfterSeconds": 10})
        await app.services.gateway.write(app.engine.create_indexes, "bench", "ttl", [spec])
        late: list[float] = []
        done = False

        async def probe() -> None:
            coll = app.engine.collection("bench", "ttl")
            assert coll is not None
            while not done:
                t0 = time.perf_counter()
                await asyncio.sleep(0.001)
                late.append(time.perf_counter() - t0 - 0.001)
                with app.engine.read() as r:
                    r.stats(coll)

        task = asyncio.create_task(probe())
        t0 = time.perf_counter()
        result = await app.services.ttl_monitor.run_pass(now + 20_000)
        elapsed = time.perf_counter() - t0
        done = True
        await task
        late.sort()
        print(
            f"purged {result.total:,} documents in {elapsed:.2f} s ({result.total / elapsed:,.0f} docs/s)"
        )
        print(
            f"loop lateness during the pass: max {late[-1] * 1000:.2f} ms, "
            f"p99 {late[int(len(late) * 0.99)] * 1000:.2f} ms, "
            f"p50 {late[len(late) // 2] * 1000:.2f} ms over {len(late):,} probes"
        )
    finally:
        await app.stop()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=60_000, help="expired documents to purge")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as path:
        asyncio.run(run(args.n, path))


if __name__ == "__main__":
    main()
