"""Helper processes that run math-verify checks for non-main threads, killable on timeout.

Protocol: one JSON object per line. The helper (``python -m verl_offgrpo.rewards._helper_main``, which
runs :func:`serve` with math-verify's checker) writes
``{"ready": true}`` once math-verify is imported, then answers each request line with one line:

* ``{"op": "verify", "solution", "ground_truth", "timeout"}`` -> ``{"score": float}``
* ``{"op": "sleep", "seconds"}`` -> ``{"slept": seconds}`` (a check of the kill path, used by tests)
* anything that fails -> ``{"error": str}``

It exits when its stdin closes (its parent is gone). Each helper serves one request at a time;
:class:`WorkerPool` lends helpers to threads and kills one that does not answer in time.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time

#: Extra seconds the caller waits beyond the check's own timeout before killing the helper.
TIMEOUT_GRACE_S = 5.0
#: Seconds a new helper may take to start (python + sympy import).
STARTUP_TIMEOUT_S = 120.0
#: Helpers per process; override with the environment variable of this name.
POOL_SIZE_ENV = "VERL_OFFGRPO_REWARD_WORKERS"
DEFAULT_POOL_SIZE = 4
#: The helper process's main module.
HELPER_MODULE = "verl_offgrpo.rewards._helper_main"


class HelperStartError(RuntimeError):
    """A helper could not start (math-verify missing, no python, start-up timeout): every check would
    fail the same way, so this is raised to the caller instead of scoring 0."""


class _Helper:
    """One helper process and the pipes to it."""

    def __init__(self) -> None:
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", HELPER_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                bufsize=0,
            )
        except OSError as err:
            raise HelperStartError(f"math-verify helper failed to start: {err!r}") from err
        try:
            reply = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        except (TimeoutError, RuntimeError, OSError, ValueError) as err:
            self.kill()
            raise HelperStartError(f"math-verify helper failed to start: {err!r}") from err
        except BaseException:
            self.kill()
            raise
        if not reply.get("ready"):
            self.kill()
            raise HelperStartError(f"math-verify helper failed to start: {reply}")

    def _read_line(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("math-verify helper did not answer in time")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"math-verify helper exited (code {self.proc.poll()})")
            buf += chunk
        return json.loads(buf)

    def request(self, msg: dict, timeout: float) -> dict:
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        return self._read_line(time.monotonic() + timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()


class WorkerPool:
    """At most ``size`` helpers, started on demand and reused; thread-safe."""

    def __init__(self, size: int) -> None:
        self._slots = threading.BoundedSemaphore(size)
        self._idle: queue.LifoQueue[_Helper] = queue.LifoQueue()

    def _idle_or_new(self) -> _Helper:
        """An idle helper that is still alive (one killed while idle, e.g. for memory, is dropped), or a new one."""
        while True:
            try:
                helper = self._idle.get_nowait()
            except queue.Empty:
                return _Helper()
            if helper.proc.poll() is None:
                return helper
            helper.kill()

    def call(self, msg: dict, timeout: float) -> dict:
        """Send ``msg`` to an idle helper; raise ``TimeoutError`` (helper killed) after ``timeout`` s, and
        ``RuntimeError`` or ``OSError`` if the helper dies during the request."""
        with self._slots:
            helper = self._idle_or_new()
            try:
                reply = helper.request(msg, timeout)
            except BaseException:
                helper.kill()
                raise
            self._idle.put(helper)
            return reply

    def close(self) -> None:
        """Stop the idle helpers."""
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def pool_size(environ=os.environ) -> int:
    """``$VERL_OFFGRPO_REWARD_WORKERS`` (default 4); :class:`HelperStartError` for a value that is not an integer
    >= 1 (no check could run: loud, never a reward of 0 or a wait that never ends)."""
    written = environ.get(POOL_SIZE_ENV)
    if written is None:
        return DEFAULT_POOL_SIZE
    try:
        size = int(written.strip())
    except ValueError:
        size = 0
    if size < 1:
        raise HelperStartError(f"{POOL_SIZE_ENV}={written!r} must be an integer >= 1 (the math-verify helper "
                               f"processes a reward process runs at once; unset: {DEFAULT_POOL_SIZE}).")
    return size


def get_pool() -> WorkerPool:
    """The process-wide pool (size :func:`pool_size`)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = WorkerPool(pool_size())
            atexit.register(_pool.close)
        return _pool


def serve(verify) -> None:
    """Helper main loop: requests on stdin, replies on the original stdout.

    ``verify(solution, ground_truth, timeout) -> float`` scores one check in this (main) thread.
    """
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the protocol
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            msg = json.loads(line)
            if msg["op"] == "verify":
                reply = {"score": verify(msg["solution"], msg["ground_truth"], float(msg["timeout"]))}
            elif msg["op"] == "sleep":
                time.sleep(float(msg["seconds"]))
                reply = {"slept": msg["seconds"]}
            else:
                reply = {"error": f"unknown op {msg['op']!r}"}
        except Exception as e:  # noqa: BLE001 - reported to the caller, which scores 0.0
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
