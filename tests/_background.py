"""The test modules' subprocesses, run one at a time in the background from the session's start.

Each subprocess of these tests is a fresh interpreter that imports verl (~5-10 s of CPU). Run inside
their tests they kept the second core of a 2-core CI machine idle while the test waited; started when
their module started, they still ran at the module's pace. Here every module that declares
``BACKGROUND_JOBS`` hands them to one session-wide queue before the first test runs: a background thread
runs them one after the other, in the order of the modules, on the core the in-process tests leave
idle, so they are mostly done when their tests ask.

A module's ``BACKGROUND_JOBS`` is ``name -> (tests, spec)``: ``tests`` a test name (without parameters)
or a tuple of test names, with or without parameters (``test_x[a]``), whose selection starts the job;
``spec(tmp_path_factory)`` returns the keyword arguments of :func:`subprocess.run` (``args`` included;
output is captured as text). Every ``spec`` is called in the main thread at the session's start (so it
sees the environment as it is then, never a test's monkeypatched one). ``module_jobs(request)[name]``
waits for a job's result, starting it at once, beside the queue, if the queue has not reached it.
"""

from __future__ import annotations

import subprocess
import threading
from concurrent.futures import Future
from typing import Callable

#: the session's queue (:func:`start_session`), None before it starts
_SESSION: "JobQueue | None" = None


class JobQueue:
    """Jobs ``key -> subprocess.run kwargs`` run one at a time by a background thread in the order
    added; :meth:`result` runs a job the thread has not reached yet at once in its own thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kwargs: dict = {}
        self.order: list = []
        self.futures: dict = {}
        self.threads: list = []

    def add(self, key, kwargs: dict) -> None:
        with self.lock:
            if key not in self.kwargs:
                self.kwargs[key] = kwargs
                self.order.append(key)

    def _claim(self, key) -> Future | None:
        """The new future of ``key`` if no one has started it (caller holds the lock)."""
        if key in self.futures:
            return None
        self.futures[key] = future = Future()
        return future

    def _run(self, key, future: Future) -> None:
        try:
            future.set_result(subprocess.run(capture_output=True, text=True, **self.kwargs[key]))
        except BaseException as err:  # noqa: BLE001 - handed to the test that waits for it
            future.set_exception(err)

    def _drain(self) -> None:
        while True:
            with self.lock:
                todo = next(((k, f) for k in self.order if (f := self._claim(k)) is not None), None)
            if todo is None:
                return
            self._run(*todo)

    def start(self) -> None:
        thread = threading.Thread(target=self._drain, name="background-jobs", daemon=True)
        self.threads.append(thread)
        thread.start()

    def result(self, key) -> subprocess.CompletedProcess:
        with self.lock:
            future = self._claim(key)
        if future is not None:  # not reached by the queue yet: now, beside it
            thread = threading.Thread(target=self._run, args=(key, future), daemon=True)
            self.threads.append(thread)
            thread.start()
        return self.futures[key].result()

    def close(self) -> None:
        with self.lock:
            self.order.clear()  # what the queue has not reached is not needed
        for thread in self.threads:
            thread.join()


def _selected(module_items, tests) -> bool:
    tests = (tests,) if isinstance(tests, str) else tuple(tests)
    return any(item.originalname in tests or item.name in tests for item in module_items)


def start_session(session, tmp_path_factory) -> JobQueue:
    """The session's queue with the jobs of its selected tests, in module order, started."""
    global _SESSION
    queue = JobQueue()
    by_module: dict = {}
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, "BACKGROUND_JOBS"):
            by_module.setdefault(module, []).append(item)
    for module, items in by_module.items():
        for name, (tests, spec) in module.BACKGROUND_JOBS.items():
            if _selected(items, tests):
                queue.add((module.__name__, name), spec(tmp_path_factory))
    queue.start()
    _SESSION = queue
    return queue


class ModuleJobs:
    """A module's view of the session's queue: ``jobs[name]`` is the result of its job ``name``."""

    def __init__(self, module, tmp_path_factory):
        self.module, self.factory = module, tmp_path_factory

    def __getitem__(self, name: str) -> subprocess.CompletedProcess:
        key = (self.module.__name__, name)
        queue = _SESSION
        if queue is None or key not in queue.kwargs:  # not declared at the session's start: run it now
            _, spec = self.module.BACKGROUND_JOBS[name]
            return subprocess.run(capture_output=True, text=True, **spec(self.factory))
        return queue.result(key)


def module_jobs(request) -> ModuleJobs:
    """The requesting module's jobs (for its module-scoped fixture)."""
    return ModuleJobs(request.module, request.getfixturevalue("tmp_path_factory"))


JobSpec = Callable[..., dict]
