"""Every place where verl-offgrpo replaces something inside verl, and the guards around them.

The rest of the package talks to verl through its public extension points (``register_adv_est``,
``register_policy_loss``, ``register_trainer``, a checkpoint-manager class named in the config).
The modules here replace verl attributes; each one declares

* ``TARGETS``: the dotted names of the verl attributes it replaces,
* ``VERL_VERSIONS``: the verl versions it was written against (:data:`VERL_VERSIONS`),
* ``WHEN``: in which processes, and for which jobs, it acts,
* ``live()``: whether it is in place in this process, read off the target itself.

A job *selects* the plugin (:func:`.selection.config_selects`) when its config names one of the
plugin's estimators (``off_grpo``, ``red_drop``) or policy losses (``off_grpo``, ``rec``), a
``sync_period`` other than 1, ``rollout_schedule`` other than ``per_step`` or ``auto``, ``final_outputs_only`` true,
the ``off_grpo_sync`` V1 trainer mode or the lagged checkpoint manager. A job that selects nothing runs verl's code unchanged: a patch either is
not installed, or passes every call straight to verl's original.

Code that must reach into verl at run time, where no import-time patch can (an override on one
server object, a subclass of verl's V1 trainer), stays in its own module and names the verl attributes it relies on in
``VERL_INTERNALS``; :data:`INTERNALS_MODULES` lists those modules, and :func:`preflight` checks their
names as it checks the patches' targets. Where a patch or such code relies on how a verl function works inside (it
calls a member the plugin shadows, reads an attribute or config key the plugin sets), the module also declares
``VERL_USES``: ``(function, names)`` pairs, and :func:`preflight` checks that each function's code still uses
each name (:func:`names_used`), so that a verl that stopped calling the shadowed member fails at start-up
instead of quietly running its own.

A verl version outside :data:`VERL_VERSIONS`, or a patch target that is missing, is an error
(:class:`PatchError`, one line) when the plugin is selected and a :class:`PatchWarning` otherwise.

``VERL_OFFGRPO_DISABLE=1`` (:data:`DISABLE_ENV`) turns the plugin off: its ``verl.plugins`` entry point
then registers nothing and patches nothing.

This package imports nothing from verl at import time.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
import warnings

from hydra.errors import CompactHydraException

from verl_offgrpo.switch import DISABLE_ENV, JOB_ENV, disabled, job_selected  # noqa: F401 (re-exported)
from verl_offgrpo.switch import truthy as _truthy  # noqa: F401 (the patches read their own switches alike)

#: The verl versions the patches were written against (PEP 440 specifier).
VERL_VERSIONS = ">=0.9.1,<0.10"

#: Set to "1" beside :data:`JOB_ENV` when the job's config sets ``algorithm.off_grpo.final_outputs_only``
#: (:mod:`.job_env`); the vLLM server actors read it (:mod:`.final_outputs`).
FINAL_OUTPUTS_ENV = "VERL_OFFGRPO_FINAL_OUTPUTS"

#: The patch modules, in the order ``python -m verl_offgrpo check`` lists them.
PATCH_MODULES = (
    "verl_offgrpo.patches.validate_config",
    "verl_offgrpo.patches.job_env",
    "verl_offgrpo.patches.empty_update",
    "verl_offgrpo.patches.ipc_socket",
    "verl_offgrpo.patches.served_weights_worker",
    "verl_offgrpo.patches.rpc_results",
    "verl_offgrpo.patches.final_outputs",
    "verl_offgrpo.patches.chunked_logprobs",
    "verl_offgrpo.patches.tracking_merge",
    "verl_offgrpo.patches.v0_advantage_metrics",
)

#: Modules outside this package that reach into verl at run time, where no import-time patch can; each
#: names the verl attributes it relies on (written for :data:`VERL_VERSIONS`) in ``VERL_INTERNALS``.
#: ``(module, package, trainer)``: checked only where ``package`` is installed (verl's modules they name
#: import it) and, for a job's config, only if it runs that trainer (None: any; :func:`trainer_of`).
INTERNALS_MODULES = (
    ("verl_offgrpo.sync.vllm_sleep", "vllm", None),  # one vLLMHttpServer object's _resolve_sleep_level
    # a subclass of verl's V1 sync trainer (private members): the plugin's V1 trainer mode only
    ("verl_offgrpo.sync.trainer_v1", "transfer_queue", "v1"),
    # the bypass-mode flag that verl's V1 trainer reads per call (skip_old_log_prob)
    ("verl_offgrpo.sync.old_log_prob_skip", "transfer_queue", "v1"),
    # the lagged checkpoint manager (both trainers) and the reference reset (both trainers): the verl members they use
    ("verl_offgrpo.sync.lagged_manager", "ray", None),
    ("verl_offgrpo.ref_reset.trainer", "ray", None),
    ("verl_offgrpo.worker_group", "ray", None),  # the actor worker group's Ray handles, for both of the above
    # verl's RolloutConfig, built in the driver by the validate_config wrap (its workers build it after Ray started)
    ("verl_offgrpo.patches.rollout_config", "verl", None),
    # the mini-batch's token count in verl's actor config, which the plugin's losses read and, without loss tokens, set
    ("verl_offgrpo.policy_loss", "verl", None),
    # the CLI's compose: the frame of verl's own validate_config
    ("verl_offgrpo.cli.compose", "verl", None),
)


class PatchError(RuntimeError, CompactHydraException):
    """A patch the selected configuration needs cannot be applied to the installed verl (one line in
    ``main_ppo``'s output, like :class:`~verl_offgrpo.config.OffGRPOConfigError`)."""


class PatchWarning(UserWarning):
    """A patch cannot be applied; harmless while no job selects the plugin."""


def first_rank() -> bool:
    """Whether this process is rank 0 of torch.distributed, or not in a process group: where a patch's console
    line is printed once for all the job's workers."""
    import torch

    return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0


def verl_version() -> str | None:
    module = sys.modules.get("verl")
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import version as dist_version

        return dist_version("verl")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return None


def version_problem(versions: str = VERL_VERSIONS, installed: str | None = None) -> str | None:
    """One line if the installed verl is outside ``versions``, else None."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    installed = installed if installed is not None else verl_version()
    if installed is None:
        return f"verl-offgrpo: cannot tell the installed verl version; its patches were written for verl{versions}"
    try:
        ok = SpecifierSet(versions).contains(Version(installed), True)  # True: dev and rc versions count too
    except InvalidVersion:
        ok = False
    if ok:
        return None
    return (
        f"verl-offgrpo: installed verl {installed} is outside verl{versions}, the versions its patches were "
        f"written for; install a verl in that range or VERL_OFFGRPO_DISABLE=1"
    )


def resolve(target: str):
    """The object named by the dotted ``target``: import its longest importable module prefix, then
    getattr the rest; a field of a dataclass that only its instances hold (``default_factory``) resolves to its
    :class:`dataclasses.Field`. Raises ``AttributeError``/``ImportError`` if it is not there."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is not None and not name.startswith(err.name) and err.name != name:
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in parts[cut:]:
            obj = _attribute_or_field(obj, attr)
        return obj
    raise ImportError(f"no module of {target!r} can be imported")


def _attribute_or_field(obj, attr: str):
    """``getattr(obj, attr)``, or the dataclass field ``attr`` of the class ``obj`` that has no class attribute."""
    try:
        return getattr(obj, attr)
    except AttributeError:
        fields = {f.name: f for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
        if attr in fields:
            return fields[attr]
        raise


def target_problem(target: str, what: str = "patch target") -> str | None:
    """One line if ``target`` cannot be found in the installed verl, else None."""
    try:
        resolve(target)
    except Exception as err:  # noqa: BLE001 - ImportError, AttributeError, or a module that fails to import
        missing = missing_package(err)
        if missing:
            return f"verl-offgrpo: {what} {target} cannot be imported: {missing}"
        return f"verl-offgrpo: {what} {target} is missing from verl {verl_version()} ({type(err).__name__}: {err})"
    return None


def trainer_of(config) -> str | None:
    """Which of the plugin's trainers a job's config runs: ``"v0"`` (``trainer.use_v1=false``), ``"v1"`` (the
    V1 trainer in the plugin's mode ``off_grpo_sync``), ``"other"`` (another V1 mode), or None without a
    config (every trainer: ``python -m verl_offgrpo check``)."""
    if config is None:
        return None
    from verl_offgrpo import TRAINER_MODE
    from verl_offgrpo.config.readers import uses_v1, v1_mode  # the start-up checks' own reading

    if not uses_v1(config):
        return "v0"
    return "v1" if v1_mode(config) == TRAINER_MODE else "other"


def _for_trainer(needs: str | None, trainer: str | None) -> bool:
    return needs is None or trainer is None or needs == trainer


def verl_internals(trainer: str | None = None) -> tuple[dict[str, tuple[str, ...] | None], list[str]]:
    """The ``VERL_INTERNALS`` of each module of :data:`INTERNALS_MODULES` (None where its package is not
    installed or the module serves another trainer than ``trainer``: not checked here), and one problem
    line for each module that cannot be imported."""
    names, problems = {}, []
    for name, package, needs in INTERNALS_MODULES:
        names[name] = None
        if not _for_trainer(needs, trainer) or importlib.util.find_spec(package) is None:
            continue
        try:
            names[name] = tuple(importlib.import_module(name).VERL_INTERNALS)
        except Exception as err:  # noqa: BLE001 - a problem of the installed verl, reported as such
            problems.append(f"verl-offgrpo: {name} {import_failure(err)}")
    return names, problems


def names_used(function) -> frozenset[str] | None:
    """The identifiers (globals and attributes read or written, local, parameter and closure names, keyword-argument
    names) and the string constants spelled like one (a key: ``"bypass_mode"``, also inside a constant tuple or set;
    a docstring is prose, not one) in ``function``'s code (unwrapped) and in the code it nests (comprehensions, inner
    functions); None where it has no code to read (a property, a ``functools.partial``, a C function)."""
    top = getattr(inspect.unwrap(function), "__code__", None)
    if top is None:
        return None
    codes, names = [top], set()
    while codes:
        code = codes.pop()
        names.update(code.co_names, code.co_varnames, code.co_cellvars, code.co_freevars)
        consts = list(code.co_consts)
        while consts:
            const = consts.pop()
            if isinstance(const, str) and const.isidentifier():
                names.add(const)
            elif isinstance(const, (tuple, frozenset)):
                consts.extend(const)
            elif inspect.iscode(const):
                codes.append(const)
    return frozenset(names)


def verl_uses(trainer: str | None = None) -> list[tuple[str, str, tuple[str, ...], list[str] | None]]:
    """``(module, verl function, names, gone)`` for each ``(function, names)`` pair of a patch module's or an
    :data:`INTERNALS_MODULES` module's ``VERL_USES`` that this ``trainer``'s jobs rely on and the installed verl has:
    ``gone`` the names its code no longer uses, None where it has no code to read (functions missing altogether, and
    modules that cannot be imported, are :func:`preflight`'s other lines)."""
    modules = [(name, "verl", None) for name in PATCH_MODULES] + list(INTERNALS_MODULES)
    rows = []
    for name, package, needs in modules:
        if not _for_trainer(needs, trainer) or importlib.util.find_spec(package) is None:
            continue  # before the import: a v0 job does not import the V1 trainer's modules
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - verl_internals reports the failed import
            continue
        if not _for_trainer(getattr(module, "TRAINER", None), trainer):  # a patch module's own trainer
            continue
        for target, used in getattr(module, "VERL_USES", ()):
            try:
                found = names_used(resolve(target))
            except Exception:  # noqa: BLE001 - a missing function: verl_internals' line (it is in VERL_INTERNALS too)
                continue
            rows.append((name, target, tuple(used), None if found is None else [n for n in used if n not in found]))
    return rows


def uses_problems(trainer: str | None = None, rows: list[tuple] | None = None) -> list[str]:
    """One line for each :func:`verl_uses` row whose verl function no longer uses a name, or has no code to read
    (``rows``: :func:`verl_uses`'s, where the caller has them already)."""
    problems = []
    for name, target, used, gone in verl_uses(trainer) if rows is None else rows:
        if gone is None or gone:
            what = "has no code to read for" if gone is None else "no longer uses"
            problems.append(f"verl-offgrpo: verl {verl_version()}'s {target} {what} {', '.join(gone or used)}, which "
                            f"{name} relies on (written for verl{VERL_VERSIONS})")
    return problems


#: import name → distribution name, where they differ, of packages verl's trainers import
_DISTRIBUTIONS = {"transfer_queue": "TransferQueue", "zmq": "pyzmq", "yaml": "pyyaml"}
#: packages verl 0.9.1's trainers import but list only in its ``verl-core`` extra (which ``verl[vllm]`` brings)
_VERL_CORE_ONLY = frozenset({"transfer_queue", "zmq", "msgspec", "cachetools", "fastapi", "uvicorn", "codetiming",
                             "mathruler", "qwen_vl_utils", "torchcodec", "nvtx"})


def missing_package(err: Exception) -> str | None:
    """``"the package 'x' is not installed (pip install x...)"`` if ``err`` is the import of a top-level package
    missing from this environment, else None (a missing submodule of an installed package, or a failure of verl's
    own modules, is a mismatch of versions, not an install to do)."""
    name = getattr(err, "name", None) or ""
    top = name.partition(".")[0]
    if not isinstance(err, ModuleNotFoundError) or not top or top in ("verl", "verl_offgrpo"):
        return None
    if name != top and importlib.util.find_spec(top) is not None:
        return None
    dist = _DISTRIBUTIONS.get(top, top)
    extra = "; verl lists it in its verl-core extra, which verl[vllm] installs" if top in _VERL_CORE_ONLY else ""
    return f"the package '{dist}' is not installed (pip install {dist}{extra})"


def import_failure(err: Exception) -> str:
    """Why an import failed, as the end of one line (:func:`missing_package`, or the error with verl's version)."""
    missing = missing_package(err)
    if missing:
        return f"cannot be imported: {missing}"
    return f"cannot be imported with verl {verl_version()} ({type(err).__name__}: {err})"


def complain(message: str, selected: bool) -> None:
    """:class:`PatchError` if the plugin is selected, a :class:`PatchWarning` otherwise (never a log line)."""
    if selected:
        raise PatchError(message)
    warnings.warn(message, PatchWarning, stacklevel=3)


def targets_where_vllm(targets: tuple[str, ...]) -> tuple[str, ...]:
    """A patch's ``preflight_targets`` whose verl module imports vllm: checked only where vllm is installed (a job
    without vllm never imports the module)."""
    return targets if importlib.util.find_spec("vllm") is not None else ()


def loaded_class(module_name: str, class_name: str):
    """``module_name.class_name`` if that module is imported in this process (a patch's ``live()`` reads it), else None."""
    module = sys.modules.get(module_name)
    return getattr(module, class_name, None) if module is not None else None


def hook_for_job(fullname: str, ready_attr: str, callback) -> None:
    """For a patch of a selecting job's processes: the installed verl must be in :data:`VERL_VERSIONS` (else
    :class:`PatchError`), then ``callback(module)`` once ``fullname`` is imported (:func:`.post_import.on_import`)."""
    problem = version_problem(VERL_VERSIONS)
    if problem is not None:
        complain(problem, True)
    from verl_offgrpo.patches.post_import import on_import

    on_import(fullname, ready_attr, callback)


def patch_modules() -> list:
    """The patch modules (cheap to import: none imports verl at import time)."""
    return [importlib.import_module(name) for name in PATCH_MODULES]


def preflight(versions: str = VERL_VERSIONS, config=None) -> list[str]:
    """What a selected job needs from verl and does not find: the version range, every patch target and
    every name of :data:`INTERNALS_MODULES` (this imports their verl modules; those that need vllm are only
    checked where vllm is installed). Given the job's ``config``, only what its trainer uses (a patch
    module's ``TRAINER``, an internals module's trainer; :func:`trainer_of`). Empty when everything is there."""
    trainer = trainer_of(config)
    problems = []
    version = version_problem(versions)
    if version:
        problems.append(version)
    for module in patch_modules():
        if not _for_trainer(getattr(module, "TRAINER", None), trainer):
            continue
        for target in getattr(module, "preflight_targets", lambda: module.TARGETS)():
            problem = target_problem(target)
            if problem:
                problems.append(problem)
    internals, import_problems = verl_internals(trainer)
    problems.extend(import_problems)
    for name, targets in internals.items():
        for target in targets or ():
            problem = target_problem(target, f"verl attribute relied on by {name}")
            if problem:
                problems.append(problem)
    problems.extend(uses_problems(trainer))
    return problems


def install_all() -> None:
    """Called by the entry point (:mod:`verl_offgrpo.plugin`) while ``verl/__init__`` runs: each patch
    module installs itself, or a post-import hook, or nothing (see each module's ``WHEN``)."""
    for module in patch_modules():
        module.install()
