"""The custom reward function a job names must exist before any GPU work.

verl 0.9.1 loads ``reward.custom_reward_function.path`` / ``.name`` (``verl.trainer.ppo.reward.get_custom_reward_fn``
→ ``verl.utils.import_utils.load_extern_object``) once the trainer builds its reward manager, after Ray, the actor
and vLLM have started: a missing file is a ``FileNotFoundError`` there, a misspelt name an ``AttributeError``. Here,
in a selecting job's driver checks, without running the file: a ``pkg://`` module must be findable
(``importlib.util.find_spec``), a file path must exist (``file://`` stripped, relative to the driver's working
directory as verl resolves it), and the name must be defined at the top level of the module's source (a function,
class, assignment or import, in any branch; a module with ``from … import *`` or a module ``__getattr__`` is not
judged).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
from typing import Any, Optional

from .values import OffGRPOConfigError
from .values import config_value as _get

SECTION = "reward.custom_reward_function"
#: verl 0.9.1's ``verl.utils.import_utils`` prefixes
PKG_PREFIX, FILE_PREFIX = "pkg://", "file://"


def check_custom_reward_function(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a custom reward function verl would fail to load."""
    path = _get(config, f"{SECTION}.path")
    if not isinstance(path, str) or not path:
        return
    name = _get(config, f"{SECTION}.name")
    if not isinstance(name, str) or not name:
        raise OffGRPOConfigError(f"{SECTION}.path={path} needs {SECTION}.name: the function verl calls in it.")
    source = _source_file(path)
    names = _top_level_names(source) if source else None
    if names is not None and name not in names:
        close = difflib.get_close_matches(name, sorted(names), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise OffGRPOConfigError(f"{SECTION}.name={name}: {path} defines no {name}{hint}; verl would stop at its "
                                 "first reward, after the workers started.")


def _source_file(path: str) -> Optional[str]:
    """The module's source file, or None where there is none to read (a compiled or namespace module)."""
    if path.startswith(PKG_PREFIX):
        module = path[len(PKG_PREFIX):].replace("/", ".")
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise OffGRPOConfigError(f"{SECTION}.path={path}: no module {module} is importable here; verl would "
                                     "stop loading it after the workers started.")
        origin = spec.origin
        return origin if origin and origin.endswith(".py") and os.path.isfile(origin) else None
    file = path[len(FILE_PREFIX):] if path.startswith(FILE_PREFIX) else path
    if not os.path.exists(file):
        raise OffGRPOConfigError(f"{SECTION}.path={path}: no such file (from {os.getcwd()}); verl would stop "
                                 "loading it after the workers started.")
    return file if os.path.isfile(file) else None


def _top_level_names(source: str) -> Optional[set[str]]:
    """The names a module's source defines at its top level, or None where they cannot be told without running it."""
    try:
        with open(source, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=source)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    names: set[str] = set()
    statements = list(tree.body)
    while statements:  # the module's statements, and those inside its if/try/with/loops (a name in any branch)
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                statements.extend(child for child in getattr(node, field, ()) if isinstance(child, ast.AST))
    return None if "__getattr__" in names else names


__all__ = ["check_custom_reward_function"]
