"""Runaway regular-expression attempts, matched in a helper process.

The `pcre2` binding holds Python's interpreter for the whole of a match, and an attempt that runs
to MongoDB's limit (200,000 backtracks) takes about 9 ms: on a reader thread, that is 9 ms in
which the event loop cannot answer anyone. So the matcher tries each string under a short limit
first, and the few attempts that reach it are sent here: a helper process runs the same binding
(the same PCRE2 release, so the same answer) on the pattern's full source while the asking
thread waits on a pipe, with the interpreter released.

The helper is started on the first such attempt (a runaway pattern is rare; most servers never
start it), serves one attempt at a time, and exits when its pipe closes, which is also what
happens if the server dies. If it cannot be started or dies, `Helper.finds` answers None and the
caller matches in process, as before: the answer is the same, only the interpreter is held.

This file is also the helper's program (`python runaway.py`): it imports nothing of ebbdb, only
the binding, so it runs as a script by path whatever the server's import path is.
"""

from __future__ import annotations

import functools
import logging
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO, Any

_LENGTH = struct.Struct("<I")
#: Patterns the helper keeps compiled.
_CACHED_PATTERNS = 256

log = logging.getLogger("ebbdb.regex")


class Helper:
    """The parent's side: one helper process, one attempt at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.started = 0  # helpers started so far (a restart after one died counts)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The helper process, once started (None before, or after it died)."""
        return self._proc

    def finds(self, source: str, flags: int, text: str) -> bool | None:
        """Whether the pattern (`source`, the binding's `flags`) finds a match in `text` under
        its own limits (an exceeded limit is no match); None if the helper could not answer."""
        request = pickle.dumps((source, flags, text), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:  # waiting here releases the interpreter too
            proc = self._running()
            if proc is None:
                return None
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(_LENGTH.pack(len(request)) + request)
                proc.stdin.flush()
                answer = proc.stdout.read(1)
            except OSError:
                answer = b""
            if answer not in (b"0", b"1"):
                log.warning("the regex helper process ended; starting another on next use")
                self._stop(proc)
                return None
            return answer == b"1"

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._stop(self._proc)

    def _running(self) -> subprocess.Popen[bytes] | None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        # Here, not at the top: the helper's program (this file run by path) imports no ebbdb.
        from ebbdb.storage.core import portability

        try:
            proc = subprocess.Popen(
                [sys.executable, "-P", __file__],  # -P: not this folder first on its path
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                **portability.own_session(),  # a terminal's Ctrl+C is the server's to handle
            )
        except OSError as exc:
            log.warning("the regex helper process could not be started: %s", exc)
            self._proc = None
            return None
        self._proc = proc
        self.started += 1
        return proc

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = None
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        proc.kill()
        proc.wait()


# -- the helper's program ------------------------------------------------------------------------


def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    import pcre2  # the helper's only dependency

    @functools.lru_cache(maxsize=_CACHED_PATTERNS)
    def compiled(source: str, flags: int) -> Any:
        return pcre2.compile(source, flags, jit=False)

    while True:
        head = requests.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return  # the server closed the pipe (or died)
        (length,) = _LENGTH.unpack(head)
        source, flags, text = pickle.loads(requests.read(length))
        try:
            found = compiled(source, flags).search(text) is not None
        except pcre2.LibraryError:
            found = False  # a limit reached: no match, as MongoDB's matcher counts it
        answers.write(b"1" if found else b"0")
        answers.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
