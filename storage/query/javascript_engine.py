"""The embedded JavaScript engine (V8 through the `mini-racer` package, the `ebbdb[js]` extra):
one context per user of it (a $where, a $function, an $accumulator, a mapReduce), never shared
between operations, each call bounded in time and memory and interruptible.

Imported only at the first JavaScript an operation runs (server start-up never loads V8). The API
here is synchronous, as storage's is: mini-racer runs the JavaScript on V8's threads and reports
to a thread of its own per context; the caller (a reader thread, the writer, a slicer) waits on a
future in short slices, and between two slices checks its operation's token: a killOp or an
expired maxTimeMS terminates the call (mini-racer cancels the task, which terminates V8's
execution), and so does the per-call limit, mongod's internalQueryJavaScriptFnTimeoutMillis."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import queue
import re
import threading
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from py_mini_racer import (
    DEFAULT_V8_FLAGS,
    JSEvalException,
    JSOOMException,
    JSParseException,
    init_mini_racer,
)
from py_mini_racer._mini_racer import _make_context

from ebbdb.storage.core import interrupt
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.javascript_prelude import PRELUDE
from ebbdb.storage.query.javascript_values import from_js, to_js

#: mongod's internalQueryJavaScriptFnTimeoutMillis: the longest one call may run.
CALL_TIMEOUT_SECONDS = 60.0
#: mongod's jsHeapLimitMB default (1100 MB is its cap; 100 MB is where V8 stays cheap here).
HEAP_LIMIT_BYTES = 256 * 1024 * 1024
#: How often a waiting caller looks at its operation's token.
_POLL_SECONDS = 0.005

# V8 started with its memory protection keys off. On a CPU with them (x86-64 with PKU: recent
# Xeon and EPYC) V8 guards its tables with a key whose rights are per thread: the thread that
# started V8 and the threads it starts later have them, no other. Every user of JavaScript here
# is a thread started before V8 (a reader, the writer, a slicer), so a second context made while
# another is alive crashed the whole server (SIGSEGV in V8's isolate set-up). The flag exists in
# every platform's build of mini-racer 0.14 and changes nothing where the CPU has no keys.
init_mini_racer(
    flags=(*DEFAULT_V8_FLAGS, "--no-memory-protection-keys"), ignore_duplicate_init=True
)


class Runtime:
    """One JavaScript context: the prelude, the user's `scope` variables, the functions
    defined in it (by number), and calls into them. Close it when done (or let it be
    collected)."""

    def __init__(self, scope: Mapping[str, Any] | None = None) -> None:
        self._maker: AbstractContextManager[Any] | None = None
        self._cancelled = False  # a call was terminated (close waits for V8's report of it)
        self._maker, self._ctx = _new_context()
        self._ctx.set_hard_memory_limit(HEAP_LIMIT_BYTES)
        self._functions: dict[str, int] = {}
        self._run(PRELUDE)
        if scope:
            self._run(f"__ebb.scope({json.dumps(to_js(dict(scope)))})")

    def close(self) -> None:
        """Free the context, on the closing thread (never on the caller's: a runtime is often
        closed by the garbage collector, on whatever thread it runs, V8's callbacks' included)."""
        maker, self._maker = self._maker, None
        if maker is not None:
            _closing().put((maker, self._ctx if self._cancelled else None))

    def __del__(self) -> None:
        self.close()

    def define(self, source: str) -> int:
        """A function from `source` (a definition, an expression or statements, as mongod takes
        them); its number for `call`. The same source is compiled once."""
        fn = self._functions.get(source)
        if fn is None:
            fn = int(self._run(f"__ebb.define({json.dumps(source)})"))
            self._functions[source] = fn
        return fn

    def call(self, fn: int, args: list[Any], this: Any = None) -> Any:
        """`fn` applied to `args` with `this` (None: the global object; a document is also the
        global `obj`); its value converted back to BSON's types."""
        return from_js(self._run(f"__ebb.call({fn},{json.dumps(to_js([this, args]))})"))

    def test(self, fn: int, doc: Any) -> bool:
        """JavaScript's truth of `fn` called on `doc` (as `this` and the global `obj`)."""
        return bool(self._run(f"__ebb.test({fn},{json.dumps(to_js([doc, []]))})"))

    def calls(self, fn: int, batch: list[tuple[Any, list[Any]]]) -> list[Any]:
        """Many calls of `fn` in one trip into V8: (this, args) each; their values."""
        return from_js(self._run(f"__ebb.calls({fn},{json.dumps(to_js(batch))})"))  # type: ignore[no-any-return]

    def map(self, fn: int, docs: list[Any]) -> list[list[list[Any]]]:
        """A map function run on each of `docs`: per document, the [key, value] pairs emitted."""
        return from_js(self._run(f"__ebb.map({fn},{json.dumps(to_js(docs))})"))  # type: ignore[no-any-return]

    def fold(self, fn: int, state: Any, args: list[list[Any]]) -> Any:
        """state = fn(state, *a) for each `a` of `args`, in one trip into V8."""
        return from_js(self._run(f"__ebb.fold({fn},{json.dumps(to_js([state, args]))})"))

    def _start(self, code: str) -> concurrent.futures.Future[Any]:
        """`code` evaluated on the context's thread; its outcome (or cancellation) as a future,
        whose `cancel_call` terminates the evaluation."""
        ctx = self._ctx
        loop = ctx.event_loop
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        tasks: list[Any] = []

        def start() -> None:  # on the context's own thread
            task = loop.create_task(ctx.eval_cancelable(code))
            tasks.append(task)
            task.add_done_callback(lambda t: _settle(t, future))

        def cancel() -> None:
            # Scheduled after `start` (the loop runs callbacks in order): terminates V8's
            # execution of the call.
            self._cancelled = True
            loop.call_soon_threadsafe(lambda: [t.cancel() for t in tasks])

        loop.call_soon_threadsafe(start)
        future.cancel_call = cancel  # type: ignore[attr-defined]
        return future

    def _run(self, code: str) -> Any:
        future = self._start(code)
        token = interrupt.current.get()
        limit = time.monotonic() + CALL_TIMEOUT_SECONDS
        try:
            while True:
                try:
                    return future.result(_POLL_SECONDS)
                except concurrent.futures.TimeoutError:
                    pass
                if token.killed is not None:
                    raise interrupt.Interrupted(token.killed)
                now = time.monotonic()
                if token.deadline is not None and now >= token.deadline:
                    raise interrupt.Interrupted("MaxTimeMSExpired")
                if now >= limit:
                    # mongod's deadline monitor kills the scope: no operation asked for it.
                    raise QueryError("Interrupted", "JavaScript execution interrupted")
        except JSOOMException:
            raise QueryError("JSInterpreterFailure", "Out of memory") from None
        except JSParseException as exc:
            raise _script_error(str(exc)) from None
        except JSEvalException as exc:
            raise _script_error(str(exc)) from None
        finally:
            if not future.done():
                future.cancel_call()  # type: ignore[attr-defined]


_closer: queue.SimpleQueue[tuple[AbstractContextManager[Any], Any]] | None = None
_closer_lock = threading.Lock()


def _closing() -> queue.SimpleQueue[tuple[AbstractContextManager[Any], Any]]:
    """The queue of contexts to free, and the thread that frees them (started at first use)."""
    global _closer
    with _closer_lock:
        if _closer is None:
            _closer = queue.SimpleQueue()
            threading.Thread(
                target=_close_loop, args=(_closer,), name="ebbdb-js-close", daemon=True
            ).start()
        return _closer


def _close_loop(jobs: queue.SimpleQueue[tuple[AbstractContextManager[Any], Any]]) -> None:
    while True:
        maker, cancelled_ctx = jobs.get()
        with contextlib.suppress(Exception):
            if cancelled_ctx is not None:
                # V8 reports a terminated call after its cancellation: wait for that report (a
                # trivial evaluation queued behind it) before the context's thread stops.
                loop = cancelled_ctx.event_loop
                done: concurrent.futures.Future[Any] = concurrent.futures.Future()

                def flush(ctx: Any = cancelled_ctx, done: Any = done) -> None:
                    task = ctx.event_loop.create_task(ctx.eval_cancelable("0"))
                    task.add_done_callback(lambda t: _settle(t, done))

                loop.call_soon_threadsafe(flush)
                with contextlib.suppress(Exception):
                    done.result(1.0)
            maker.__exit__(None, None, None)


def _new_context() -> tuple[AbstractContextManager[Any], Any]:
    """A mini-racer context (its pinned 0.14 API) with a result thread of its own: made on a
    thread where no event loop runs, or mini-racer would take the caller's (the server's, when
    a $where is parsed on it) and the caller, waiting, would never see its results."""
    made: list[Any] = []

    def make() -> None:
        try:
            maker = _make_context()
            made.append((maker, maker.__enter__()))
        except BaseException as exc:  # handed to the caller
            made.append(exc)

    thread = threading.Thread(target=make, name="ebbdb-js-start")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]  # type: ignore[no-any-return]


def _settle(task: Any, future: concurrent.futures.Future[Any]) -> None:
    """A finished evaluation's outcome, handed to the waiting caller."""
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())
    else:
        future.set_result(task.result())


def _script_error(text: str) -> QueryError:
    """A JavaScript failure as mongod reports one (JSInterpreterFailure): the thrown value's
    text, then where it was thrown; an error mongod raises in its own code (the prelude's
    Native) keeps that code."""
    native = _NATIVE.search(text)
    if native is not None:
        return QueryError(f"Location{native.group(1)}", native.group(2))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "Error"
    first = _SOURCE_PREFIX.sub("", first.removeprefix("Uncaught "))
    # Where it was thrown, as mongod's stack shows it ("@:line:column"), in the user's code.
    frames = [_POSITION.findall(line) for line in lines[1:] if line.startswith("at ")][:1]
    where = "".join(f"@:{found[-1]}\n" for found in frames if found)
    return QueryError("JSInterpreterFailure", f"{first} :\n{where}")


#: The prelude's Native errors (mongod's own, not JavaScript's): code and message.
_NATIVE = re.compile(r"EbbdbNative(\d+): ([^\n]*)")
#: A position in a V8 stack frame.
_POSITION = re.compile(r"<anonymous>:(\d+:\d+)\)?$")
#: How mini-racer prefixes a thrown value that is not an Error: its source position.
_SOURCE_PREFIX = re.compile(r"^(<anonymous>|undefined):\d+: ")


__all__ = ["CALL_TIMEOUT_SECONDS", "HEAP_LIMIT_BYTES", "Runtime"]
