"""The patches of verl (verl_offgrpo/patches/): declared, scoped to jobs that select the plugin, guarded,
switchable off, and cheap at ``import verl``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import verl

import verl_offgrpo
from verl_offgrpo import patches
from verl_offgrpo.patches import JOB_ENV, PatchError, PatchWarning, empty_update, selection

from _background import module_jobs
from _cases import slow_after
from _overrides import BASE, shipped_config, verl_config
from _overrides import validate_as_main_ppo as _validate

REPO = Path(__file__).resolve().parents[1]


def python_job(code: str, **env) -> dict:
    """``subprocess.run``'s arguments for ``python -c code`` in a process that is no selecting job's."""
    full_env = {k: v for k, v in os.environ.items() if k not in (JOB_ENV, patches.DISABLE_ENV)}
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return dict(args=[sys.executable, "-W", "ignore", "-c", code], timeout=600, env=full_env, cwd=REPO)


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(capture_output=True, text=True, **python_job(code, **env))


#: ``python -m verl_offgrpo check``, then ``check -v``, in one interpreter (one import of verl, ~15 s): each
#: run's stdout, then a line with its exit code
CHECK_TWICE = """
import runpy, sys
for argv in (["check"], ["check", "-v"]):
    sys.argv = ["verl_offgrpo", *argv]
    try:
        runpy.run_module("verl_offgrpo", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        print(f"=== exit {done.code}", flush=True)
"""


def check_job() -> dict:
    """``python -m verl_offgrpo check`` and ``check -v`` (:data:`CHECK_TWICE`), in a process that is no selecting
    job's."""
    env = {k: v for k, v in os.environ.items() if k not in (JOB_ENV, patches.DISABLE_ENV)}
    return dict(args=[sys.executable, "-W", "ignore", "-c", CHECK_TWICE], timeout=600, env=env, cwd=REPO)


IMPORT_VERL = """
import os, sys
import verl
mods = sorted(m for m in sys.modules if m == "verl" or m.startswith("verl."))
print("MODS", len(mods), ",".join(mods))
if os.environ.get("VERL_USE_EXTERNAL_PLUGINS") != "none":
    assert "verl.trainer.ppo.core_algos" not in sys.modules
    from verl.workers.utils.losses import ppo_loss  # a worker's first import of the losses
    from verl.trainer.ppo import core_algos
    assert core_algos.get_policy_loss_fn("off_grpo").__module__ == "verl_offgrpo.policy_loss"
    assert core_algos.get_adv_estimator_fn("off_grpo").__module__ == "verl_offgrpo.advantage"
    import verl.trainer.main_ppo
    from verl.utils.config import validate_config
    assert validate_config.__off_grpo_wrapped__
    print("REGISTERED")
"""

BROKEN_ENTRY_POINT = """
import verl_offgrpo.patches as p
def broken():
    raise ImportError("simulated broken install")
p.install_all = broken
import verl
print("VERL_IMPORTED")
"""

PREFLIGHT_V0 = """
import sys
sys.path.insert(0, "tests")
import verl
from _overrides import shipped_config
from verl_offgrpo import patches
config = shipped_config("trainer.use_v1=false", "algorithm.off_grpo.rollout_schedule=per_step")
before = {m for m in sys.modules if m.startswith("verl.trainer.ppo.v1")}
print("PROBLEMS", patches.preflight(config=config))
print("V1_IMPORTED", sorted({m for m in sys.modules if m.startswith("verl.trainer.ppo.v1")} - before))
"""

#: the subprocesses of the default run's tests, run in the background from the session's start (``_background``)
BACKGROUND_JOBS = {
    "import_plain": ("test_import_verl_loads_no_verl_module_for_the_plugin_and_registers_on_first_use",
                     lambda _: python_job(IMPORT_VERL, VERL_USE_EXTERNAL_PLUGINS="none")),
    "import_ours": ("test_import_verl_loads_no_verl_module_for_the_plugin_and_registers_on_first_use",
                    lambda _: python_job(IMPORT_VERL)),
    "broken_entry_point": ("test_an_entry_point_that_fails_to_load_says_so_on_stderr",
                           lambda _: python_job(BROKEN_ENTRY_POINT)),
    "preflight_v0": ("test_a_v0_jobs_preflight_imports_none_of_verls_v1_trainer", lambda _: python_job(PREFLIGHT_V0)),
    "check": (("test_check_says_its_verdict_in_a_few_lines",
               "test_check_v_lists_every_patch_with_its_target_and_whether_it_is_live"), lambda _: check_job()),
}


@pytest.fixture(scope="module")
def procs(request):
    return module_jobs(request)


@pytest.fixture(autouse=True)
def _no_job_marker(monkeypatch):
    monkeypatch.delenv(JOB_ENV, raising=False)
    monkeypatch.delenv(patches.DISABLE_ENV, raising=False)


# ----------------------------------------------------------------------------- declarations
def test_every_patch_declares_its_verl_targets_versions_and_scope():
    modules = patches.patch_modules()
    assert [m.__name__ for m in modules] == list(patches.PATCH_MODULES)
    for module in modules:
        assert module.TARGETS and all(t.startswith("verl.") for t in module.TARGETS), module.__name__
        assert module.VERL_VERSIONS == ">=0.9.1,<0.10" and module.WHEN
        assert callable(module.live) and callable(module.install)
        for target in getattr(module, "preflight_targets", lambda: module.TARGETS)():
            assert patches.target_problem(target) is None  # present in the installed verl
    assert patches.preflight() == []


#: code outside verl_offgrpo/patches/ allowed to store onto another library's object: (file, target)
ALLOWED_FOREIGN_STORES = {
    # one vLLMHttpServer object's _resolve_sleep_level, at run time, in its own actor (its VERL_INTERNALS)
    ("sync/vllm_sleep.py", "server._resolve_sleep_level"),
}


def foreign_stores(source: str) -> list[str]:
    """Statements of ``source`` that write onto another library's objects: an attribute or item store on
    anything reached from a name imported from verl, vllm, torch, ray, hydra or omegaconf (``core_algos.X = …``,
    ``verl.utils.config.f = …``, ``tracking.Tracking.log = …``, ``core_algos.REG["x"] = …``) or from a name
    ending in ``_cls`` (a class handed over at run time); a store of a private
    attribute on any object but ``self``/``cls`` (``server._x = …``), unless it is the plugin's own
    namespaced mark (``_off_grpo_*``); ``setattr`` on anything but ``self``/``cls`` with a name that is not
    such a mark (a module constant ending in ``_ATTR`` whose value is ``"_off_grpo_…"`` counts as one)."""
    import ast

    tree = ast.parse(source)
    external = ("verl", "vllm", "torch", "ray", "hydra", "omegaconf")
    imported, marks = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in external}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in external:
            imported |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and str(node.value.value).startswith("_off_grpo"):
            marks |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for sub in ast.walk(target):
                if not (isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, ast.Store)):
                    continue
                root = sub.value
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                base = root.id if isinstance(root, ast.Name) else None
                attr = getattr(sub, "attr", "")
                private = attr.startswith("_") and not attr.startswith("_off_grpo") and base not in ("self", "cls")
                if base in imported or private or (base or "").endswith("_cls"):
                    found.append(ast.unparse(sub))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
            obj, name = node.args[0], node.args[1] if len(node.args) > 1 else None
            own = isinstance(obj, ast.Name) and obj.id in ("self", "cls")
            mark = (isinstance(name, ast.Constant) and str(name.value).startswith("_off_grpo")) or (
                isinstance(name, ast.Name) and name.id in marks)
            if not (own or mark):
                found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize(
    "source, found",
    [
        ("from verl.trainer.ppo import core_algos\ncore_algos.X = 1", ["core_algos.X"]),
        ("import verl.utils.config as c\nc.validate_config = f", ["c.validate_config"]),
        ("def f(server):\n    server._resolve_sleep_level = g", ["server._resolve_sleep_level"]),
        ("def f(w):\n    setattr(w, 'update_weights', g)", ["setattr(w, 'update_weights', g)"]),
        ("A = '_off_grpo_x'\ndef f(w):\n    setattr(w, A, 1)\n    w._off_grpo_y = 2", []),
        ("class C:\n    def f(self):\n        self._x = 1\n        setattr(self, 'y', 2)", []),
        ("def f(obj):\n    obj.public = 1", []),
        ("import verl.utils.config\nverl.utils.config.validate_config = f", ["verl.utils.config.validate_config"]),
        ("from verl.utils import tracking\ntracking.Tracking.log = f", ["tracking.Tracking.log"]),
        ("def f(engine_cls):\n    engine_cls.train_batch = g", ["engine_cls.train_batch"]),
        ("from verl.trainer.ppo import core_algos\ncore_algos.REG['x'] = f", ["core_algos.REG['x']"]),
        ("def f(d):\n    d['k'] = 1\n    d.x.y = 2", []),
    ],
)
def test_the_foreign_store_scan_finds_what_it_must(source, found):
    assert foreign_stores(source) == found


def test_all_code_that_replaces_verl_attributes_lives_in_the_patches_package():
    """Outside verl_offgrpo/patches/ no code writes onto verl's (or vllm's, torch's …) modules, classes or
    objects, except :data:`ALLOWED_FOREIGN_STORES` (each also named in its module's ``VERL_INTERNALS``) and
    the plugin's own ``_off_grpo_*`` marks."""
    offenders = []
    for path in sorted((REPO / "verl_offgrpo").rglob("*.py")):
        rel = path.relative_to(REPO / "verl_offgrpo").as_posix()
        if rel.startswith("patches/"):
            continue
        offenders += [(rel, store) for store in foreign_stores(path.read_text()) if (rel, store) not in ALLOWED_FOREIGN_STORES]
    assert offenders == []


def test_preflight_checks_the_verl_internals_that_code_outside_the_patches_relies_on(monkeypatch):
    """A module of ``INTERNALS_MODULES`` whose ``VERL_INTERNALS`` names a missing verl attribute stops a
    selecting job before Ray (one line), like a missing patch target; a module whose package is not
    installed is left unchecked."""
    reach = type(sys)("fake_reach")
    reach.VERL_INTERNALS = ("verl.utils.config.validate_config", "verl.utils.config._no_such_internal")
    monkeypatch.setitem(sys.modules, "fake_reach", reach)
    monkeypatch.setattr(patches, "INTERNALS_MODULES", (("fake_reach", "pytest", None),
                                                        ("fake_unchecked", "no_such_package", None)))
    problems = patches.preflight()
    assert problems == [f"verl-offgrpo: verl attribute relied on by fake_reach verl.utils.config._no_such_internal "
                        f"is missing from verl {verl.__version__} (AttributeError: module 'verl.utils.config' has no "
                        "attribute '_no_such_internal')"]
    with pytest.raises(PatchError, match="^verl-offgrpo: verl attribute relied on by fake_reach verl.utils.config._no"):
        _validate(shipped_config())


@pytest.mark.parametrize("module", ["verl_offgrpo.sync.lagged_manager", "verl_offgrpo.ref_reset.trainer",
                                    "verl_offgrpo.worker_group"])
def test_the_worker_group_reaches_of_the_lag_and_the_reference_reset_are_declared_and_checked(module):
    """The lag and the reset reach verl's members (the manager's base class, the reset's worker classes) outside any
    patch, and both verl's worker-group handles through one module: declared in ``VERL_INTERNALS``, checked for every
    trainer, and all present in the installed verl."""
    import importlib

    assert (module, "ray", None) in patches.INTERNALS_MODULES
    declared = importlib.import_module(module).VERL_INTERNALS
    handles = "verl.single_controller.ray.base.RayWorkerGroup.workers"
    assert (handles in declared) == (module == "verl_offgrpo.worker_group")  # read in one place
    assert [patches.target_problem(name) for name in declared] == [None] * len(declared)
    assert patches.verl_internals("v0")[0][module] == declared == patches.verl_internals("v1")[0][module]


def test_the_driver_side_verl_reaches_are_declared_present_and_checked():
    """The validate_config wrap builds verl's RolloutConfig in the driver (``patches.rollout_config``): its verl names are
    declared, present in the installed verl and checked by preflight for every trainer; compose's one reach (the frame
    of verl's own validate_config) is present too."""
    from verl_offgrpo.cli import compose
    from verl_offgrpo.patches import rollout_config

    assert ("verl_offgrpo.patches.rollout_config", "verl", None) in patches.INTERNALS_MODULES
    declared = rollout_config.VERL_INTERNALS + compose.VERL_INTERNALS
    assert [patches.target_problem(name) for name in declared] == [None] * len(declared)
    assert patches.verl_internals("v0")[0]["verl_offgrpo.patches.rollout_config"] == rollout_config.VERL_INTERNALS


def test_a_v0_jobs_preflight_imports_none_of_verls_v1_trainer(procs):
    """In a fresh process, a v0 job's preflight (its patch targets, verl internals and ``VERL_USES``) passes and imports
    no module of verl's V1 trainer (which needs TransferQueue) that composing its config had not."""
    out = procs["preflight_v0"]
    assert out.returncode == 0, out.stderr[-3000:]
    assert "PROBLEMS []" in out.stdout.splitlines() and "V1_IMPORTED []" in out.stdout.splitlines(), out.stdout[-2000:] + out.stderr[-2000:]


def test_preflight_of_a_job_checks_only_what_its_trainer_uses(monkeypatch):
    """A v0 job does not need the V1 trainer mode's module (nor import verl's V1 trainer), and a V1 job in
    the plugin's mode does not need the v0-only patch targets; without a config (``check``) both count."""
    from verl_offgrpo.patches import tracking_merge

    monkeypatch.setitem(sys.modules, "verl_offgrpo.sync.trainer_v1", None)  # cannot be imported
    monkeypatch.setattr(tracking_merge, "TARGETS", ("verl.utils.tracking.Tracking._no_such_log",))
    v0, v1 = shipped_config("trainer.use_v1=false"), shipped_config()
    assert patches.trainer_of(v0) == "v0" and patches.trainer_of(v1) == "v1" and patches.trainer_of(None) is None

    def names(problems):
        return ["trainer_v1" if "sync.trainer_v1" in p else "tracking" if "_no_such_log" in p else p for p in problems]

    assert names(patches.preflight(config=v0)) == ["tracking"]
    assert names(patches.preflight(config=v1)) == ["trainer_v1"]
    assert sorted(names(patches.preflight())) == ["tracking", "trainer_v1"]


def test_the_vllm_server_members_the_sleep_override_relies_on_are_in_verls_source():
    """vllm is not installed here, so preflight cannot import verl's server module: read its source instead."""
    import ast

    from verl_offgrpo.sync import vllm_sleep

    module, _, cls_name = vllm_sleep.SERVER_CLASS.rpartition(".")
    path = Path(verl.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    members = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    declared = vllm_sleep.SERVER_MEMBERS + vllm_sleep.OTHER_SERVER_MEMBERS
    assert vllm_sleep.VERL_INTERNALS == tuple(f"{vllm_sleep.SERVER_CLASS}.{m}" for m in declared)
    assert set(declared) <= members
    assert ("verl_offgrpo.sync.vllm_sleep", "vllm", None) in patches.INTERNALS_MODULES


def _source_names(function_node) -> set[str]:
    """What :func:`verl_offgrpo.patches.names_used` finds in a function, read off its source (vllm is not installed
    here, so verl's server module cannot be imported): names, attributes, parameters, identifier-like strings."""
    import ast

    body = function_node.body[1:] if ast.get_docstring(function_node) else function_node.body
    found = {a.arg for a in ast.walk(function_node.args) if isinstance(a, ast.arg)}
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            found.add(node.value)
    return found


def test_verls_vllm_server_still_calls_what_the_sleep_override_shadows():
    """``_sleep_hybrid`` and ``release_kv_cache`` of verl's server sleep at ``_resolve_sleep_level()`` (else shadowing
    it would change nothing and α would be discarded at level 2) and ``wake_up`` takes ``tags``: read off verl's
    source, as preflight reads the code where vllm is installed."""
    import ast

    from verl_offgrpo.sync import vllm_sleep

    module, _, cls_name = vllm_sleep.SERVER_CLASS.rpartition(".")
    path = Path(verl.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert [(t.rpartition(".")[2], names) for t, names in vllm_sleep.VERL_USES] == [
        ("_sleep_hybrid", ("_resolve_sleep_level",)), ("release_kv_cache", ("_resolve_sleep_level",)),
        ("wake_up", ("tags",))]
    for target, names in vllm_sleep.VERL_USES:
        assert set(names) <= _source_names(methods[target.rpartition(".")[2]]), target
    assert "_resolve_sleep_level" not in _source_names(methods["sleep"])  # the reading can tell a method that does not


def test_preflight_refuses_a_verl_function_that_no_longer_uses_what_the_plugin_relies_on(monkeypatch):
    """``VERL_USES``: a function that still exists but no longer calls the member the plugin shadows (a mention in
    its docstring does not count) stops a selecting job before Ray, one line; one that uses the name in any way its code
    can (a key read by name, in a constant tuple, a keyword argument, a parameter, a closure's variable) passes; a
    member with no code to read (a property) is a line too, not a pass."""

    class Server:
        async def sleeps(self):  # verl's server methods are coroutines
            """Sleeps at self._resolve_sleep_level()."""
            return await self.level()

        async def wakes(self, tags=None):
            return tags

        def reads(self, cfg):
            return [cfg.get("bypass_mode") for _ in range(1)]

        def passes(self, cfg):
            return cfg.update(bypass_mode=True), [cfg[k] for k in ("use_kl", "rollout_is")]

        def closes(self):
            pending_sync = {}
            return lambda: pending_sync

        @property
        def level(self):
            return 2

    reach = type(sys)("fake_uses")
    reach.Server, reach.VERL_INTERNALS = Server, ()
    reach.VERL_USES = (("fake_uses.Server.sleeps", ("_resolve_sleep_level",)), ("fake_uses.Server.wakes", ("tags",)),
                       ("fake_uses.Server.reads", ("bypass_mode",)), ("fake_uses.Server.passes", ("bypass_mode",
                                                                                                 "rollout_is")),
                       ("fake_uses.Server.closes", ("pending_sync",)), ("fake_uses.Server.level", ("_level",)))
    monkeypatch.setitem(sys.modules, "fake_uses", reach)
    monkeypatch.setattr(patches, "INTERNALS_MODULES", (("fake_uses", "pytest", None),))
    line = (f"verl-offgrpo: verl {verl.__version__}'s fake_uses.Server.sleeps no longer uses _resolve_sleep_level, "
            "which fake_uses relies on (written for verl>=0.9.1,<0.10)")
    unreadable = (f"verl-offgrpo: verl {verl.__version__}'s fake_uses.Server.level has no code to read for _level, "
                  "which fake_uses relies on (written for verl>=0.9.1,<0.10)")
    assert patches.preflight() == [line, unreadable]
    with pytest.raises(PatchError, match=f"^{re.escape(line)} \\(and 1 more\\)$"):
        _validate(shipped_config())


#: every ``VERL_USES`` that resolves without vllm: module → (verl function's last name, the trainer whose job needs it)
CPU_USES = {"verl_offgrpo.sync.trainer_v1": [("_consume_sync_metrics", "v1")],
            "verl_offgrpo.sync.old_log_prob_skip": [("_compute_old_log_prob", "v1"), ("_compute_advantage", "v1")],
            "verl_offgrpo.patches.empty_update": [("train_batch", None)],
            "verl_offgrpo.patches.v0_advantage_metrics": [("fit", "v0")]}


@pytest.mark.parametrize("module, member, trainer", [(m, f, t) for m, pairs in CPU_USES.items() for f, t in pairs])
def test_each_verl_function_the_plugin_relies_on_inside_is_checked_for_its_trainers_jobs(monkeypatch, module, member,
                                                                                       trainer):
    """The installed verl's functions use what the plugin relies on (the V1 mode's metrics reach verl's logger through
    ``_pending_sync_metrics``, ``skip_old_log_prob`` works through ``bypass_mode``, the empty-update wrap replaces
    ``optimizer_step``, the v0 metrics wrap is the ``compute_advantage`` that ``fit`` calls); a verl function that
    stops is one preflight line for a job of the trainer that needs it, and none for the other."""
    import importlib

    declared = importlib.import_module(module).VERL_USES
    assert [t.rpartition(".")[2] for t, _ in declared] == [f for f, _ in CPU_USES[module]]
    assert patches.uses_problems() == []
    target, names = next((t, n) for t, n in declared if t.endswith("." + member))
    owner = patches.resolve(target.rpartition(".")[0])
    original = patches.resolve(target)

    def stub(*args, **kwargs):  # verl's function, no longer using those names
        return original

    monkeypatch.setattr(owner, member, stub)
    line = (f"verl-offgrpo: verl {verl.__version__}'s {target} no longer uses {', '.join(names)}, which {module} "
            "relies on (written for verl>=0.9.1,<0.10)")
    assert patches.uses_problems() == [line]
    assert patches.uses_problems(trainer) == [line]
    other = {"v0": "v1", "v1": "v0", None: None}[trainer]
    if other:
        assert patches.uses_problems(other) == []


def test_the_v1_trainer_modes_reliance_on_verls_trainer_is_declared_and_checked():
    """Every private member of verl's trainer that ``OffGRPOSyncTrainer`` overrides is in its
    ``VERL_INTERNALS``, which preflight checks (all present in the installed verl)."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from verl_offgrpo.sync import trainer_v1

    assert ("verl_offgrpo.sync.trainer_v1", "transfer_queue", "v1") in patches.INTERNALS_MODULES
    overridden = {name for name in vars(trainer_v1.OffGRPOSyncTrainer) if hasattr(PPOTrainerSync, name)
                  and name not in ("_abc_impl", "trainer_mode") and not name.startswith("__")}  # trainer_mode: an instance attr
    declared = {name.rpartition(".")[2] for name in trainer_v1.VERL_INTERNALS}
    assert overridden <= declared, overridden - declared
    for name in trainer_v1.VERL_INTERNALS:
        assert patches.target_problem(name) is None


# ----------------------------------------------------------------------------- guards
@pytest.mark.parametrize(("version", "ok"), [("0.9.1", True), ("0.9.7", True), ("0.9.2.dev0", True),
                                             ("0.9.0", False), ("0.10.0", False), ("1.0.0", False)])
def test_verl_version_range(version, ok):
    problem = patches.version_problem(installed=version)
    assert (problem is None) == ok
    if not ok:
        assert "\n" not in problem and f"verl {version} is outside verl>=0.9.1,<0.10" in problem


def test_a_problem_is_an_error_when_selected_and_a_warning_otherwise():
    with pytest.raises(PatchError, match="^boom$"):
        patches.complain("boom", selected=True)
    with pytest.warns(PatchWarning, match="boom"):
        patches.complain("boom", selected=False)


class _NoEngine:
    __name__ = "verl.workers.engine.base"


def test_a_missing_patch_target_warns_in_a_plain_job_and_raises_in_a_selecting_one(monkeypatch):
    with pytest.warns(PatchWarning, match="BaseEngine.train_batch"):
        empty_update._apply(_NoEngine())
    monkeypatch.setenv(JOB_ENV, "1")
    with pytest.raises(PatchError, match="BaseEngine.train_batch"):
        empty_update._apply(_NoEngine())


def test_a_verl_outside_the_range_leaves_the_engine_alone_with_a_warning_or_stops_a_selecting_job(monkeypatch):
    from verl.workers.engine import base as engine_base

    class Engine(engine_base.BaseEngine):
        pass

    fake = type(sys)("fake_engine_base")
    fake.BaseEngine = Engine
    monkeypatch.setattr(verl, "__version__", "0.10.0")
    with pytest.warns(PatchWarning, match="outside verl>=0.9.1,<0.10"):
        empty_update._apply(fake)
    assert Engine.train_batch is engine_base.BaseEngine.train_batch  # nothing installed on the fake
    monkeypatch.setenv(JOB_ENV, "1")
    with pytest.raises(PatchError, match="outside verl>=0.9.1,<0.10"):
        empty_update._apply(fake)
    # the driver stops a selecting config before Ray, with one line
    with pytest.raises(PatchError, match=r"^verl-offgrpo: installed verl 0.10.0 is outside"):
        _validate(shipped_config())


# ----------------------------------------------------------------------------- what selects the plugin
@pytest.mark.parametrize(
    ("overrides", "selects"),
    [
        ([], False),
        (["algorithm.adv_estimator=off_grpo"], True),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo"], True),
        (["+algorithm.off_grpo.sync_period=1"], False),
        (["+algorithm.off_grpo.sync_period=10"], True),
        (["trainer.v1.trainer_mode=off_grpo_sync"], True),
        (["+actor_rollout_ref.rollout.checkpoint_manager_class="
          "verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager"], True),
        (["+algorithm.off_grpo.zero_var_mask=false"], False),
        (["+algorithm.off_grpo.final_outputs_only=false"], False),
        (["+algorithm.off_grpo.final_outputs_only=auto"], False),  # the default: plain verl stays plain
        (["+algorithm.off_grpo.final_outputs_only=true"], True),  # else the knob would be ignored unseen
        (["+algorithm.off_grpo.final_outputs_only=maybe"], True),  # for the plugin's checks to refuse
        (["+algorithm.off_grpo.final_outputs_only=0"], True),  # 0 == False, but not a bool: refused, not ignored
        (["+algorithm.off_grpo.rollout_schedule=auto"], False),  # the default: plain verl stays plain
        (["+algorithm.off_grpo.rollout_schedule=per_step"], False),
        (["+algorithm.off_grpo.rollout_schedule=window"], True),
        (["+algorithm.off_grpo.rollout_schedule=windowed"], True),  # for the plugin's checks to refuse
    ],
)
def test_what_selects_the_plugin(overrides, selects):
    assert selection.config_selects(verl_config(*overrides)) is selects


def test_the_shipped_config_selects_the_plugin():
    assert selection.config_selects(shipped_config())


# ----------------------------------------------------------------------------- validate_config
def test_validate_config_of_a_plain_job_is_verls_alone(monkeypatch, ray_env):
    import verl_offgrpo.config as validation

    def must_not_run(config):
        raise AssertionError("the plugin's checks ran for a plain verl config")

    monkeypatch.setattr(validation, "validate_off_grpo_config", must_not_run)
    # a config the plugin would reject, were it selected: the mask with seq-mean (knobs of a job not using them)
    config = verl_config("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean")
    assert _validate(config) is None
    assert JOB_ENV not in ray_env.get_ppo_ray_runtime_env(config)["env_vars"]


def test_validate_config_of_a_selecting_job_runs_the_plugins_checks_and_marks_its_ray_processes(ray_env):
    from verl_offgrpo.config import OffGRPOConfigError

    with pytest.raises(OffGRPOConfigError):
        _validate(shipped_config("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"))
    assert JOB_ENV not in ray_env.get_ppo_ray_runtime_env()["env_vars"]  # not for a rejected config
    config = shipped_config()
    _validate(config)
    assert ray_env.get_ppo_ray_runtime_env(config)["env_vars"][JOB_ENV] == "1"  # every actor of the job gets it
    from verl_offgrpo.patches import job_env

    assert job_env.live()


def test_a_plain_job_validated_after_a_selecting_one_in_the_same_process_is_not_marked(ray_env):
    """One driver process (a notebook, a sweep script) validating a plugin job and then a plain one: the
    plain job's Ray processes must not inherit the plugin's marks (its patches would go live there)."""
    from verl_offgrpo.config import OffGRPOConfigError
    from verl_offgrpo.patches import FINAL_OUTPUTS_ENV

    _validate(shipped_config("algorithm.off_grpo.final_outputs_only=true"))
    assert ray_env.get_ppo_ray_runtime_env()["env_vars"][FINAL_OUTPUTS_ENV] == "1"
    _validate(verl_config())
    env_vars = ray_env.get_ppo_ray_runtime_env()["env_vars"]
    assert JOB_ENV not in env_vars and FINAL_OUTPUTS_ENV not in env_vars
    _validate(shipped_config())
    with pytest.raises(OffGRPOConfigError):  # a rejected selecting config after a passing one: unmarked too
        _validate(shipped_config("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"))
    assert JOB_ENV not in ray_env.get_ppo_ray_runtime_env()["env_vars"]


def test_a_plain_v0_trainer_after_a_selecting_one_in_the_same_process_logs_as_verl(monkeypatch):
    """One process (a notebook, a driver that builds ``RayPPOTrainer`` itself) runs a v0 job that selects the plugin,
    then a plain one: the lagged manager's wrap of ``compute_advantage`` stays in place, but hands metrics to its sink
    for the selecting trainer's ``config.algorithm`` only. The plain job's verl GRPO with verl's rollout correction
    logs what verl logs (no ``off_grpo/bound/*`` from its IS weights, no guard); the selecting job's calls still do."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer
    from verl.utils import tracking

    from verl_offgrpo.patches import tracking_merge, v0_advantage_metrics

    logged = []
    monkeypatch.setattr(tracking.Tracking, "log", lambda self, data, step, backend=None: logged.append((step, dict(data))))
    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)
    for name, value in (("_SINK", []), ("_GUARDS_VERLS", [False]), ("_ALGORITHM", [None])):
        monkeypatch.setattr(v0_advantage_metrics, name, value)
    monkeypatch.setattr(tracking_merge, "PENDING_METRICS", {})

    def batch():
        return DataProto.from_dict(
            tensors={"token_level_rewards": torch.tensor([[0, 0, 1.0], [0, 0, 0.0], [0, 0, 1.0], [0, 0, 0.0]]),
                     "response_mask": torch.ones(4, 3), "rollout_is_weights": torch.full((4, 3), 1.5)},
            non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})

    selecting = shipped_config("algorithm.adv_estimator=grpo", "trainer.use_v1=false")
    # what the lagged manager's __init__ does for the selecting v0 trainer (its loss, verl's grpo: guarded)
    tracking_merge.apply()
    v0_advantage_metrics.apply(lambda metrics: tracking_merge.PENDING_METRICS.setdefault(1, {}).update(metrics),
                               selecting.algorithm, guards_verls=True)
    plain = verl_config("algorithm.rollout_correction.rollout_is=token")
    ray_trainer.compute_advantage(batch(), adv_estimator="grpo", num_repeat=2, config=plain.algorithm)
    tracking.Tracking.log(object.__new__(tracking.Tracking), data={"critic/score/mean": 0.5}, step=1)
    assert logged == [(1, {"critic/score/mean": 0.5})]
    ray_trainer.compute_advantage(batch(), adv_estimator="grpo", num_repeat=2, config=selecting.algorithm)
    tracking.Tracking.log(object.__new__(tracking.Tracking), data={"critic/score/mean": 0.5}, step=1)
    assert logged[1][1]["off_grpo/bound/mean_abs_log_rprime"] == pytest.approx(np.log(1.5))


MARKS = [
    ({JOB_ENV: "1"}, None, "VERL_OFFGRPO_JOB=1 is set in this driver's environment, .* so this plain verl job's "
                           "workers would run the plugin's patches: unset VERL_OFFGRPO_JOB"),
    ({JOB_ENV: "1", patches.FINAL_OUTPUTS_ENV: "1"}, None, "VERL_OFFGRPO_JOB=1 is set"),
    ({patches.FINAL_OUTPUTS_ENV: "1"}, None, None),  # read only beside VERL_OFFGRPO_JOB=1: inert in a plain job (a warning)
    ({JOB_ENV: "0"}, [], "VERL_OFFGRPO_JOB=0 is set .* so this job's workers would run without the plugin's patches"),
    ({JOB_ENV: "1", patches.FINAL_OUTPUTS_ENV: "1"}, ["algorithm.off_grpo.final_outputs_only=false"],
     "VERL_OFFGRPO_FINAL_OUTPUTS=1 is set .* so vLLM would be asked for final outputs only where this job's final_outputs_only resolves to false"),
    ({patches.FINAL_OUTPUTS_ENV: "0"}, ["algorithm.off_grpo.final_outputs_only=true"],
     "VERL_OFFGRPO_FINAL_OUTPUTS=0 is set .* so vLLM would not be asked for final outputs only where this job's final_outputs_only resolves to true"),
    ({JOB_ENV: "0"}, None, None),  # what the workers read as unmarked: harmless for a plain job
    ({JOB_ENV: "1", patches.FINAL_OUTPUTS_ENV: "1"}, [], None),  # the shipped yaml: final outputs on (V1, vLLM)
]


@pytest.mark.parametrize(("environ", "overrides", "refused"), slow_after(3, MARKS))
def test_a_mark_in_the_drivers_environment_must_be_the_one_the_job_needs(environ, overrides, refused, monkeypatch,
                                                                          ray_env):
    """The driver's environment reaches the job's Ray processes, and verl 0.9.1's get_ppo_ray_runtime_env drops the
    job's own mark where the driver's environment sets one: a mark exported in the shell that disagrees with the
    job (``overrides`` None: verl's GRPO; else the shipped yaml with them) is refused in one line."""
    monkeypatch.delenv(patches.FINAL_OUTPUTS_ENV, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config = verl_config() if overrides is None else shipped_config(*overrides)
    assert not set(environ) & set(ray_env.get_ppo_ray_runtime_env(config)["env_vars"])  # verl keeps the driver's
    if refused is None:
        _validate(config)
        return
    with pytest.raises(PatchError, match=r"^verl-offgrpo: " + refused):
        _validate(config)
    assert JOB_ENV not in ray_env.PPO_RAY_RUNTIME_ENV["env_vars"]  # not marked


@pytest.mark.parametrize("key", slow_after(1, ["trainer.v1.trainer_mode", "+algorithm.off_grpo.sync_period",
                                              "+actor_rollout_ref.rollout.checkpoint_manager_class",
                                              "actor_rollout_ref.actor.policy_loss.loss_mode"]))
def test_a_plain_config_with_an_unresolvable_key_is_left_to_verls_validate_config(key, monkeypatch, ray_env):
    """``key=${oc.env:UNSET}`` in a plain GRPO config: the plugin's selection test cannot read the key, so the job
    gets verl's validate_config alone, with verl's outcome (verl 0.9.1 resolves the loss mode, not the others)."""
    from verl.utils import config as verl_config_module

    monkeypatch.delenv("OFFGRPO_TEST_UNSET", raising=False)
    config = verl_config(key + "=${oc.env:OFFGRPO_TEST_UNSET}")

    def outcome(validate):
        try:
            validate(config=config, use_reference_policy=False, use_critic=False)
        except Exception as err:  # noqa: BLE001 - the outcome compared
            return type(err).__name__
        return "passed"

    verls = outcome(verl_config_module.validate_config.__wrapped__)
    assert verls == ("InterpolationResolutionError" if key.endswith("loss_mode") else "passed")
    assert outcome(verl_config_module.validate_config) == verls
    assert JOB_ENV not in ray_env.get_ppo_ray_runtime_env(config)["env_vars"]


def test_validate_config_imported_from_verl_utils_is_the_plugins_too(ray_env):
    """``from verl.utils import validate_config`` (verl 0.9.1's ``verl/utils/__init__.py`` binds it before the plugin
    loads): the plugin's checks and marks, as through ``verl.utils.config``."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils import validate_config

    from verl_offgrpo.config import OffGRPOConfigError

    def validate(config):
        return validate_config(config=config, use_reference_policy=need_reference_policy(config),
                               use_critic=need_critic(config))

    with pytest.raises(OffGRPOConfigError):
        validate(shipped_config("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"))
    config = shipped_config()
    validate(config)
    assert ray_env.get_ppo_ray_runtime_env(config)["env_vars"][JOB_ENV] == "1"


# ----------------------------------------------------------------------------- the entry point
def test_import_verl_loads_no_verl_module_for_the_plugin_and_registers_on_first_use(procs):
    """The entry point imports none of verl's modules (the same ``verl.*`` modules as plain verl), then
    the names appear when verl's registries are imported, in the order a worker and main_ppo import
    (``IMPORT_VERL``, with and without the plugin)."""
    plain, ours = procs["import_plain"], procs["import_ours"]
    assert plain.returncode == 0 and ours.returncode == 0, (plain.stderr[-2000:], ours.stderr[-2000:])
    line = lambda out: next(x for x in out.splitlines() if x.startswith("MODS"))  # noqa: E731
    assert line(ours.stdout) == line(plain.stdout)
    assert "REGISTERED" in ours.stdout


@pytest.mark.slow
def test_the_switch_turns_the_plugin_off():
    code = """
import sys, verl
from verl.trainer.ppo import core_algos
import verl.utils.config as c
from verl.workers.engine.base import BaseEngine
print("OFF", "off_grpo" in core_algos.ADV_ESTIMATOR_REGISTRY, "off_grpo" in core_algos.POLICY_LOSS_REGISTRY,
      hasattr(c.validate_config, "__wrapped__"), hasattr(BaseEngine.train_batch, "__wrapped__"),
      sum(type(f).__name__ == "_PostImportHook" for f in sys.meta_path))
print("LOADED", *sorted(m for m in sys.modules if m.startswith(("verl_offgrpo", "hydra"))))
"""
    done = run_python(code, VERL_OFFGRPO_DISABLE="1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "OFF False False False False 0" in done.stdout
    # nothing of the plugin's beyond its switch, and nothing plain verl does not load (hydra: not at import verl)
    loaded = next(line for line in done.stdout.splitlines() if line.startswith("LOADED")).split()[1:]
    assert loaded == ["verl_offgrpo", "verl_offgrpo.plugin", "verl_offgrpo.switch"]
    check = subprocess.run([sys.executable, "-m", "verl_offgrpo", "check"], capture_output=True, text=True,
                           timeout=600, env={**os.environ, "VERL_OFFGRPO_DISABLE": "1"}, cwd=REPO)
    assert check.returncode == 1 and "turned off: VERL_OFFGRPO_DISABLE=1" in check.stderr
    # the verdict says so, and the switch's own effects (nothing registered or patched) are no further problems
    assert check.stderr.startswith("verl-offgrpo ") and " check OFF\n" in check.stderr
    problems = check.stderr.split("problems:\n", 1)[1].splitlines()
    assert len(problems) == 1 and problems[0].startswith("  - the plugin is turned off"), problems


def test_an_entry_point_that_fails_to_load_says_so_on_stderr(procs):
    """verl logs a failing plugin at DEBUG only; the entry point prints a warning itself (``BROKEN_ENTRY_POINT``)."""
    done = procs["broken_entry_point"]
    assert done.returncode == 0 and "VERL_IMPORTED" in done.stdout  # verl itself still imports
    assert "WARNING verl-offgrpo: the plugin failed to load (ImportError: simulated broken install)" in done.stderr


@pytest.mark.slow
def test_check_fails_when_the_v1_trainer_the_config_uses_lacks_transfer_queue():
    """``check`` composes the shipped config: its V1 trainer mode needs TransferQueue; the v0 trainer does not."""
    code = """
import sys, importlib.util
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] == "transfer_queue" else real(name, *a)
from verl_offgrpo.cli.main import main
sys.exit(main(["check", *sys.argv[1:]]))
"""
    v1 = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=600,
                        cwd=REPO)
    assert v1.returncode == 1 and "needs the TransferQueue package" in v1.stderr, v1.stderr[-2000:]
    # with overrides check also validates the config (as compose): a runnable v0 one; -v lists the registrations
    v0 = subprocess.run([sys.executable, "-W", "ignore", "-c", code, "-v", *BASE, "actor_rollout_ref.rollout.name=vllm",
                         "trainer.use_v1=false"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert v0.returncode == 0, v0.stderr[-2000:]
    assert "V1 trainer mode off_grpo_sync: not available (no TransferQueue)" in v0.stdout


def _check_runs(done) -> tuple[str, str]:
    """The stdout of :data:`CHECK_TWICE`'s ``check`` and ``check -v``, each of which exited 0."""
    runs = re.split(r"^=== exit (\S+)\n", done.stdout, flags=re.M)
    assert runs[1::2] == ["0", "0"] and runs[-1] == "", (runs, done.stderr[-3000:])
    return runs[0], runs[2]


def test_check_says_its_verdict_in_a_few_lines(procs):
    """``check`` without -v: the verdict, the versions, the config, the notes (here: no vLLM on the CPU) and one
    line that counts what was checked and points to ``check -v``; no per-patch listing."""
    out, verbose = _check_runs(procs["check"])
    lines = out.splitlines()
    assert lines[0] == f"verl-offgrpo {verl_offgrpo.__version__} check OK"
    assert lines[1].startswith(f"  verl {verl.__version__} (patches written for verl>=0.9.1,<0.10); vLLM ")
    assert lines[2].startswith("  config: off_grpo_trainer.yaml — selects the plugin: yes; trainer: V1 off_grpo_sync;")
    notes = [line for line in lines if line.startswith("  note: ")]
    assert lines[3:-1] == notes and len(notes) <= 1
    targets = sum(len(module.TARGETS) for module in patches.patch_modules())
    uses = len(patches.verl_uses())  # CPU: the V1 trainer's three, the two patches' (vLLM's server: not installed)
    assert uses == 5
    assert re.fullmatch(rf"  5 registrations, {targets} patch targets, \d+ verl attributes and {uses} uses inside "
                        r"verl's code checked: `python -m verl_offgrpo check -v` lists each", lines[-1]), lines[-1]
    assert len(lines) <= 5
    assert "patches (" not in out and "registrations:" not in out and "check -v" not in verbose
    assert verbose.splitlines()[:2] == lines[:2] and lines[2] in verbose.splitlines()  # -v: the same head, and more


def test_check_v_lists_every_patch_with_its_target_and_whether_it_is_live(procs):
    _, out = _check_runs(procs["check"])
    assert f"verl {verl.__version__} (patches written for verl>=0.9.1,<0.10); vLLM " in out
    for module in patches.patch_modules():
        for target in module.TARGETS:
            assert f"    {target}: " in out
    assert "verl.utils.config.validate_config: live" in out
    assert "advantage estimator off_grpo: registered" in out and "off_grpo_sync: registered" in out
    assert "advantage estimator red_drop: registered" in out and "policy loss rec: registered" in out
    assert "BucketedWeightSender.__init__: not live" in out  # only in a selecting job's Ray processes
    assert "verl.workers.engine.base.BaseEngine.train_batch: live" in out  # imported by check, then read off
    assert "verl.utils.tracking.Tracking.log: not live" in out  # only once a v0 lagged manager is built
    assert "verl.trainer.ppo.ray_trainer.compute_advantage: not live" in out  # likewise
    assert "applied when" not in out
    assert "verl internals relied on at run time" in out
    assert "    verl_offgrpo.sync.vllm_sleep: not checked here (needs vllm)" in out  # no vllm on the CPU
    assert "      verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync._setup: present" in out
    assert "ReplayBuffer._sync_metadata_from_transfer_queue: present" in out
    assert "  what verl's code must still use (function: names; VERL_USES):" in out
    assert "    verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync._consume_sync_metrics: _pending_sync_metrics: used" in out
    assert "    verl.workers.engine.base.BaseEngine.train_batch: optimizer_step: used" in out
    assert "selects the plugin: yes; trainer: V1 off_grpo_sync" in out


def test_patch_warnings_are_warnings_not_log_lines():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        empty_update._apply(_NoEngine())
    assert [w.category for w in caught] == [PatchWarning]



def test_the_docs_list_every_patch_module_with_its_targets():
    """The patch table of docs/verl-changes.md (linked from README's "What it changes in verl") has a row per
    patch module, naming its verl attribute."""
    assert "(docs/verl-changes.md)" in (REPO / "README.md").read_text()
    page = (REPO / "docs" / "verl-changes.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `") and ".py`" in line}
    for module in patches.patch_modules():
        row = rows.get(module.__name__.rsplit(".", 1)[1] + ".py")
        assert row is not None, module.__name__
        # "BucketedWeight{Sender,Receiver}" names both classes
        row = re.sub(r"(\w*)\{([\w,]+)\}", lambda m: " ".join(m[1] + part for part in m[2].split(",")), row)
        for target in module.TARGETS:
            name = next(part for part in reversed(target.split(".")) if not part.startswith("__"))
            assert re.search(rf"\b{name}\b", row), (module.__name__, target)


def test_the_losses_reach_into_verls_actor_config_is_a_dataclass_field_that_preflight_checks(monkeypatch):
    """``ActorConfig.global_batch_info`` is a field with a default factory (no class attribute): preflight finds it
    among the dataclass's fields, and a verl without it (a renamed field) stops a selecting job in one line."""
    import dataclasses

    from verl.workers.config.actor import ActorConfig

    from verl_offgrpo import policy_loss

    assert ("verl_offgrpo.policy_loss", "verl", None) in patches.INTERNALS_MODULES
    assert not hasattr(ActorConfig, "global_batch_info")  # what a plain getattr would call missing
    assert [patches.target_problem(name) for name in policy_loss.VERL_INTERNALS] == [None]
    assert isinstance(patches.resolve(policy_loss.VERL_INTERNALS[0]), dataclasses.Field)
    renamed = [f for f in dataclasses.fields(ActorConfig) if f.name != "global_batch_info"]
    monkeypatch.setattr(dataclasses, "fields", lambda cls: renamed if cls is ActorConfig else ())
    assert patches.target_problem(policy_loss.VERL_INTERNALS[0], "verl attribute relied on by x") == (
        f"verl-offgrpo: verl attribute relied on by x verl.workers.config.actor.ActorConfig.global_batch_info is "
        f"missing from verl {verl.__version__} (AttributeError: type object 'ActorConfig' has no attribute "
        "'global_batch_info')")


def test_the_docs_list_every_module_that_reaches_into_verl_outside_the_patches():
    """docs/verl-changes.md's table of reaches outside the patches has a row per module of ``INTERNALS_MODULES``,
    naming every verl attribute of its ``VERL_INTERNALS``."""
    import importlib

    page = (REPO / "docs" / "verl-changes.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `") and ".py`" in line}
    for name, _package, _trainer in patches.INTERNALS_MODULES:
        path = name.removeprefix("verl_offgrpo.").replace(".", "/") + ".py"
        row = rows.get(path)
        assert row is not None, path
        for target in importlib.import_module(name).VERL_INTERNALS:  # none imports vllm at import time
            attr = next(part for part in reversed(target.split(".")) if not part.startswith("__"))
            assert re.search(rf"(?<!\w){re.escape(attr)}\b", row), (path, target)


def test_the_lagged_managers_reliance_on_verls_manager_is_declared():
    """Every member of verl's ``CheckpointEngineManager`` that ``LaggedCheckpointManager`` overrides is in its
    ``VERL_INTERNALS``, which preflight checks."""
    from verl.checkpoint_engine.base import CheckpointEngineManager

    from verl_offgrpo.sync import lagged_manager

    overridden = {name for name in vars(lagged_manager.LaggedCheckpointManager)
                  if hasattr(CheckpointEngineManager, name) and (name == "__init__" or not name.startswith("__"))}
    declared = {name.rpartition(".")[2] for name in lagged_manager.VERL_INTERNALS}
    assert overridden <= declared, overridden - declared


def test_a_package_missing_from_the_environment_is_named_with_its_install_command(tmp_path, monkeypatch):
    """A bare ``pip install verl`` lacks packages its V1 trainer imports (verl lists them in its verl-core
    extra): the problem line names the package, not a verl mismatch; a failure inside verl keeps the version."""
    missing = ModuleNotFoundError("No module named 'cachetools'", name="cachetools")
    assert patches.import_failure(missing) == (
        "cannot be imported: the package 'cachetools' is not installed (pip install cachetools; verl lists it in "
        "its verl-core extra, which verl[vllm] installs)")
    own = ModuleNotFoundError("No module named 'verl.trainer.gone'", name="verl.trainer.gone")
    assert patches.missing_package(own) is None
    assert patches.import_failure(own).startswith(f"cannot be imported with verl {verl.__version__} (ModuleNotFoundError")
    assert patches.missing_package(ImportError("cannot import name 'x'", name="cachetools")) is None
    # a submodule missing from an installed package is a version mismatch, not an install to do
    assert patches.missing_package(ModuleNotFoundError("No module named 'json.nope'", name="json.nope")) is None
    # the distribution's name where it is not the import's
    assert patches.missing_package(ModuleNotFoundError("", name="transfer_queue")).startswith(
        "the package 'TransferQueue' is not installed (pip install TransferQueue; verl lists it in its verl-core")
    # a patch target whose module imports a package that is not installed (and that verl-core does not list)
    (tmp_path / "needs_absent_pkg.py").write_text("import absent_pkg_for_test.sub\nTHING = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert patches.target_problem("needs_absent_pkg.THING") == (
        "verl-offgrpo: patch target needs_absent_pkg.THING cannot be imported: the package 'absent_pkg_for_test' is "
        "not installed (pip install absent_pkg_for_test)")


def test_check_reports_a_v1_trainer_that_cannot_be_imported_as_a_problem_line(monkeypatch):
    """``check`` lists the failed import among its problems (exit 1) instead of dying with a traceback."""
    from verl_offgrpo.cli import install_check

    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.v1.trainer_base", None)
    found = install_check._Findings(overrides=[], use_v1=True)
    install_check._find_registrations(found)
    assert found.registrations["V1 trainer mode off_grpo_sync"] is None
    assert [p for p in found.problems if p.startswith("verl's V1 trainer cannot be imported with verl ")], found.problems


@pytest.mark.slow
def test_compose_turned_off_in_a_fresh_process():
    import subprocess
    import sys

    from _overrides import BASE

    verl_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    done = subprocess.run([sys.executable, "-m", "verl_offgrpo", "compose", "--config-path", verl_dir, "--config-name",
                           "ppo_trainer", *BASE, "algorithm.adv_estimator=grpo"], capture_output=True, text=True,
                          env={**os.environ, "VERL_OFFGRPO_DISABLE": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "# composed and validated: verl's validate_config passed (verl-offgrpo turned off: VERL_OFFGRPO_DISABLE=1)" \
        in done.stderr


def test_a_plain_v0_trainer_whose_algorithm_equals_the_selecting_ones_logs_as_verl(monkeypatch):
    """Two v0 jobs in one process that differ only outside ``algorithm`` (an A/B of the loss: verl's yaml with
    rollout_is=token and an untruncated r', one with ``loss_mode=off_grpo``, which selects the plugin, one with
    verl's vanilla loss, which does not): the plain trainer's ``compute_advantage`` calls must stay verl's alone, as
    with a differing algorithm section (:func:`test_a_plain_v0_trainer_after_a_selecting_one_in_the_same_process_logs_as_verl`)."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from verl_offgrpo.patches import v0_advantage_metrics

    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)
    for name, value in (("_SINK", []), ("_GUARDS_VERLS", [False]), ("_ALGORITHM", [None])):
        monkeypatch.setattr(v0_advantage_metrics, name, value)
    common = ("algorithm.adv_estimator=grpo", "trainer.use_v1=false", "algorithm.rollout_correction.rollout_is=token",
              "algorithm.rollout_correction.rollout_is_threshold=inf")
    selecting = verl_config(*common, "actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo")
    plain = verl_config(*common)
    assert selection.config_selects(selecting) and not selection.config_selects(plain)
    got = []
    v0_advantage_metrics.apply(got.append, selecting.algorithm, guards_verls=True)
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor([[0, 0, 1.0], [0, 0, 0.0], [0, 0, 1.0], [0, 0, 0.0]]),
                 "response_mask": torch.ones(4, 3), "rollout_is_weights": torch.full((4, 3), 1.5)},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    ray_trainer.compute_advantage(batch, adv_estimator="grpo", num_repeat=2, config=plain.algorithm)
    assert got == []
