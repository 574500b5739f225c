"""The package's modules import each other without cycles (function-level imports included), also not
through verl's import of its registries."""

import ast
import os
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "verl_offgrpo"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_names(path: Path, top_level_only: bool = False) -> list[str]:
    """Absolute names of what ``path`` imports (``a.b`` and ``a.b.func`` for ``from a.b import func``),
    anywhere in its body or only at module level."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found += [f"{base}.{alias.name}" for alias in node.names] + [base]
    return found


def _ours(target: str, modules) -> str:
    """The deepest module of ours that ``target`` names (a.b.func -> a.b), or ''."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body."""
    found = {_ours(target, modules) for target in _import_names(path)}
    return found - {"", _module_name(path)}


def test_no_import_cycles():
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {name: _imports(path, set(files)) for name, path in files.items()}
    # a package's __init__ re-exporting its own submodules is not a cycle of the submodule with it
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], cycles


def test_config_modules_import_nothing_heavy():
    """The driver-side check reads only the composed config: no verl, torch or plugin module outside the
    config package."""
    modules = {_module_name(p) for p in PKG.rglob("*.py")}
    config_modules = {_module_name(p) for p in (PKG / "config").glob("*.py")}
    for path in (PKG / "config").glob("*.py"):
        imported = _imports(path, modules)
        assert imported <= {"verl_offgrpo"} | config_modules, (path.name, imported)
        text = path.read_text()
        assert "import torch" not in text and "from verl." not in text and "import verl" not in text, path.name


def test_registered_modules_do_not_import_verl_at_load():
    """``plugin.register_algorithms`` runs inside verl's import of ``core_algos`` and imports the
    estimator and loss modules: if one of them (or a plugin module it loads) imported verl at module level,
    importing it first would start verl's import half-way through its own, and the registration would meet
    a half-initialised module (the names then stay unregistered; an ImportError in a selecting job)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    todo = ["verl_offgrpo.advantage", "verl_offgrpo.policy_loss", "verl_offgrpo.rec_loss"]
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for target in _import_names(files[name], top_level_only=True):
            assert not (target == "verl" or target.startswith("verl.")), (name, target)
            if _ours(target, files):
                todo.append(_ours(target, files))
    assert "verl_offgrpo.groups" in seen and "verl_offgrpo.patches.empty_update" in seen  # the walk went deep


LOSS_MODULE_FIRST = ("import verl_offgrpo.rec_loss\nfrom verl.trainer.ppo import core_algos as c\n"
                     "print(sorted(n for n in ('off_grpo', 'red_drop') if n in c.ADV_ESTIMATOR_REGISTRY),"
                     " sorted(n for n in ('off_grpo', 'rec') if n in c.POLICY_LOSS_REGISTRY))")
#: the fresh interpreter of the last test, run in the background from the session's start (``_background``)
BACKGROUND_JOBS = {
    "loss_module_first": ("test_importing_a_loss_module_first_still_registers_everything",
                          lambda _: dict(args=[sys.executable, "-c", LOSS_MODULE_FIRST], timeout=240,
                                         env={**os.environ, "VERL_OFFGRPO_JOB": "1"})),
}


@pytest.fixture(scope="module")
def procs(request):
    from _background import module_jobs

    return module_jobs(request)


def test_importing_a_loss_module_first_still_registers_everything(procs):
    """The symptom: ``import verl_offgrpo.rec_loss`` (it loads ``policy_loss``) before verl, in a job that
    selects the plugin, then verl's registries hold every plugin name."""
    proc = procs["loss_module_first"]  # LOSS_MODULE_FIRST
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "['off_grpo', 'red_drop'] ['off_grpo', 'rec']"
    assert "verl-offgrpo" not in proc.stderr
