"""A test module's subprocesses, started together in the background when the module starts.

Each subprocess of these tests is a fresh interpreter that imports verl (~5 s of CPU). Run one after the
other inside their tests they kept the second core of a 2-core CI machine idle; started together when
the module's first test runs, they overlap with each other and with the module's in-process tests.

A job is ``name -> (test, spec)``: ``spec()`` is called in the main thread when the job starts (so it
sees the environment as it is then, never a test's monkeypatched one) and returns the keyword arguments
of :func:`subprocess.run` (``args`` included; output is captured as text). Only the jobs whose test
this session runs start with the module; ``procs[name]`` waits for a job's result (starting it if it
has not started).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Callable


class Background:
    def __init__(self, jobs: dict[str, tuple[str, Callable[[], dict]]]):
        self.jobs = jobs
        self.futures = {}
        self.pool = ThreadPoolExecutor(max(len(jobs), 1))

    def start(self, names) -> None:
        for name in names:
            if name not in self.futures:
                kwargs = self.jobs[name][1]()
                self.futures[name] = self.pool.submit(subprocess.run, capture_output=True, text=True, **kwargs)

    def __getitem__(self, name: str) -> subprocess.CompletedProcess:
        self.start([name])
        return self.futures[name].result()

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def started_for(request, jobs) -> Background:
    """A module-scoped fixture's :class:`Background` with the jobs of the tests this session runs from
    the requesting module started (test names without parameters)."""
    selected = {item.originalname for item in request.session.items if item.path == request.path}
    procs = Background(jobs)
    procs.start(name for name, (test, _) in jobs.items() if test in selected)
    return procs
