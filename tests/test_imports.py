"""The package's modules import each other without cycles (function-level imports included)."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "verl_offgrpo"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            # the deepest module of ours that the target names (a.b.func -> a.b)
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


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
