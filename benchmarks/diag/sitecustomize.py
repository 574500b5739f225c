"""Stack dumps on demand for every Python process of a benchmark run (diagnosis of hangs).

Put this folder on ``PYTHONPATH`` and set ``OFFGRPO_STACK_DUMP_DIR``: every Python process started
with that environment (the driver, Ray's TaskRunner and workers, vLLM's servers and engine cores)
starts a daemon thread that waits for the file ``$OFFGRPO_STACK_DUMP_DIR/DUMP``. When it appears, the
process writes ``<pid>.txt`` there: its command line, every thread's Python stack and the stack of
every asyncio task of every event loop it has (a coroutine stuck on an ``await`` is invisible in the
thread stacks). Nothing happens without the variable; no signals are sent to anyone.
"""

import os

_DIR = os.environ.get("OFFGRPO_STACK_DUMP_DIR")


def _dump(path: str) -> None:
    import asyncio
    import gc
    import sys
    import traceback

    with open(path, "w") as fh:
        fh.write(" ".join(sys.argv)[:800] + "\n\n")
        names = {t.ident: t.name for t in __import__("threading").enumerate()}
        for ident, frame in sys._current_frames().items():
            fh.write(f"--- thread {names.get(ident, ident)}\n")
            fh.write("".join(traceback.format_stack(frame)))
        for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]:
            try:
                tasks = list(asyncio.all_tasks(loop))
            except Exception as err:  # noqa: BLE001 - best effort from a foreign thread
                fh.write(f"--- loop {loop!r}: {err!r}\n")
                continue
            fh.write(f"--- loop {loop!r}: {len(tasks)} tasks\n")
            for task in tasks:
                fh.write(f"task {task.get_name()} {task.get_coro()!r}\n")
                for frame in task.get_stack(limit=30):
                    fh.write("".join(traceback.format_stack(frame, limit=1)))


def _watch(directory: str) -> None:
    import time

    trigger = os.path.join(directory, "DUMP")
    done = 0.0
    while True:
        time.sleep(1.0)
        try:
            mtime = os.stat(trigger).st_mtime
        except OSError:
            continue
        if mtime > done:
            done = mtime
            try:
                _dump(os.path.join(directory, f"{os.getpid()}.txt"))
            except Exception:  # noqa: BLE001 - diagnosis must never break the run
                pass


if _DIR:
    import threading

    threading.Thread(target=_watch, args=(_DIR,), name="offgrpo-stack-dump", daemon=True).start()

# two jobs on one GPU: vLLM's device-wide sleep assertion (diag/shared_gpu_sleep.py; acts only where its ENV is 1)
import shared_gpu_sleep  # noqa: E402

shared_gpu_sleep.install()
