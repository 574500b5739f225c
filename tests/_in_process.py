"""``python -m module ...`` or ``python script.py ...`` run in the tests' own process (test_recipes.py,
test_data_prep.py): a fresh interpreter costs ~0.8 s (data_prep: pyarrow and pandas) to ~15 s (verl) of
imports that this process has done already.

:func:`run_main` runs the command's code as the interpreter runs it, ``runpy`` with ``__name__ ==
"__main__"``: ``sys.argv`` as the program sees it, ``sys.path[0]`` the script's folder (``-m``: the current
folder), stdout and stderr captured, the exit code of its ``SystemExit`` (0 at the end, 1 and the traceback on
stderr for an uncaught exception, as the interpreter says them); a script's sibling modules that it imported
by their bare names are imported afresh in the next run. What a fresh interpreter would do differently (its
imports' own output, state that other tests left in imported modules) is what the tests that keep a
subprocess check."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys
import traceback
import warnings


def run_main(argv: list[str]) -> subprocess.CompletedProcess:
    """``python *argv`` in this process: what ``subprocess.run([sys.executable, *argv], capture_output=True,
    text=True)`` would return."""
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        first, program = os.getcwd(), [module, *args]  # runpy puts the module's path first, as python -m does

        def run():
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = argv[0], argv[1:]
        first, program = os.path.dirname(os.path.abspath(script)), [script, *args]

        def run():
            runpy.run_path(script, run_name="__main__")
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_path, saved_modules = sys.argv, list(sys.path), set(sys.modules)
    try:
        sys.argv, sys.path[:0] = program, [first]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            # runpy's note that the module was imported already (main_ppo): it runs the code afresh as __main__
            warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                                    category=RuntimeWarning)
            try:
                run()
                code = 0
            except SystemExit as done:
                code = done.code
                if code is None:
                    code = 0
                elif not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
            except BaseException:  # noqa: BLE001 - what the interpreter prints for it
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if argv[0] != "-m":  # the script's siblings, imported by their bare names (data_prep's _common)
            for name in set(sys.modules) - saved_modules:
                where = getattr(sys.modules[name], "__file__", None) or ""
                if "." not in name and os.path.dirname(os.path.abspath(where)) == first:
                    del sys.modules[name]
    return subprocess.CompletedProcess([sys.executable, *argv], code, out.getvalue(), err.getvalue())
