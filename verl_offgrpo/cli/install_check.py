"""``check``: whether the plugin is usable in this install, with proof — verl loaded it, its registrations
and patches are in place, the verl attributes it relies on exist, the packages the config needs are there —
for the shipped yaml plus overrides (which are then also validated as ``compose`` validates them). By default
the report is the verdict and any problems; ``check -v`` lists everything it checked."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback
from typing import Any

from .compose import NOT_CHECKABLE_HERE, TRANSFER_QUEUE_MISSING, compose, validate
from .paths import CONFIG_NAME, config_dir

#: verl's switch for its ``verl.plugins`` entry points (verl 0.9.1 ``verl/__init__.py``)
PLUGINS_POLICY_ENV = "VERL_USE_EXTERNAL_PLUGINS"


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _prove(target: str) -> str | None:
    """Import ``target`` (its module's import runs the plugin's post-import hooks); None if it is
    there, else why not."""
    from verl_offgrpo.patches import missing_package, resolve

    try:
        resolve(target)
    except Exception as err:  # noqa: BLE001 - reported, not raised
        return missing_package(err) or f"{type(err).__name__}: {err}"
    return None


@dataclasses.dataclass
class _Findings:
    """What :func:`check` found, in the order it reports it; ``problems`` make it exit 1."""

    overrides: list[str]
    config_path: str | None = None  # your own yaml (compose's --config-path/--config-name), else the shipped one
    config_name: str | None = None
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    entry_points: list[Any] = dataclasses.field(default_factory=list)
    plugin: Any = None  # the verl_offgrpo.plugin module, if verl imported it
    import_failed: bool = False  # verl was let load the plugin (not turned off, not left out) but did not
    verl_version: str = "?"
    config: Any = None
    config_code: int = 0
    config_error: str | None = None
    use_v1: bool = False
    mode: Any = None
    registrations: dict[str, bool | None] = dataclasses.field(default_factory=dict)
    tq_version: str | None = None
    vllm_version: str | None = None
    patch_rows: list[tuple] = dataclasses.field(default_factory=list)  # (targets, live, {target: why}, when)
    internals: dict[str, Any] = dataclasses.field(default_factory=dict)
    internal_rows: dict[str, list[tuple[str, str | None]]] = dataclasses.field(default_factory=dict)
    #: patches.verl_uses(): (module, verl function, names it must use, the names it no longer uses / None: no code)
    uses_rows: list[tuple[str, str, tuple[str, ...], list[str] | None]] = dataclasses.field(default_factory=list)
    packages: dict[str, str] = dataclasses.field(default_factory=dict)


def _find_plugin_loaded(found: _Findings) -> None:
    """The entry point, the switch, verl's import of the plugin (it loads the ``verl.plugins`` entry points) and
    the verl version the patches were written for."""
    from importlib.metadata import entry_points

    from verl_offgrpo import patches

    found.entry_points = [ep for ep in entry_points(group="verl.plugins") if ep.value.startswith("verl_offgrpo")]
    if not found.entry_points:
        found.problems.append("no 'verl.plugins' entry point for verl_offgrpo: is the package pip-installed?")
    if patches.disabled():
        found.problems.append(f"the plugin is turned off: {patches.DISABLE_ENV}={os.environ.get(patches.DISABLE_ENV)}")
    import verl

    found.verl_version = getattr(verl, "__version__", "?")
    found.plugin = sys.modules.get("verl_offgrpo.plugin")
    if not patches.disabled() and not getattr(found.plugin, "ACTIVE", False):
        left_out = plugins_policy_leaves_out([ep.name for ep in found.entry_points])
        found.import_failed = left_out is None
        found.problems.append(f"verl did not load the plugin: {left_out}" if left_out else
                              "verl did not load the plugin (its import failed: see below)")
    version_problem = patches.version_problem()
    if version_problem:
        found.problems.append(version_problem)


def plugins_policy_leaves_out(names: list[str]) -> str | None:
    """Where verl's ``VERL_USE_EXTERNAL_PLUGINS`` (verl 0.9.1 ``verl/__init__.py``: ``auto`` loads every
    ``verl.plugins`` entry point, ``none`` none, else the named ones) skips the plugin's entry points ``names``: the
    line saying so; else None."""
    value = os.environ.get(PLUGINS_POLICY_ENV)
    policy = ("auto" if value is None else value).strip().lower()  # set but empty: verl loads none
    if policy == "auto" or not names:
        return None
    allowed = set() if policy == "none" else {name.strip() for name in policy.split(",") if name.strip()}
    if allowed & set(names):
        return None
    return (f"{PLUGINS_POLICY_ENV}={value} leaves its entry point {names[0]!r} out (unset it, or list {names[0]} "
            "there)")


def _find_config(found: _Findings) -> None:
    """The shipped yaml + overrides, validated as compose validates it when there are overrides (its exit code
    and one-line error); the trainer it runs."""
    source = {"config_path": found.config_path, "config_name": found.config_name}
    if found.overrides or found.config_path:
        found.config_code, found.config_error, found.config = validate(list(found.overrides), **source)
    else:
        try:
            found.config = compose([])
        except Exception as err:  # noqa: BLE001
            found.config = None
            found.problems.append(f"cannot compose the shipped config: {type(err).__name__}: {err}")
    found.use_v1 = bool(found.config is not None and found.config.trainer.get("use_v1", True))
    found.mode = found.config.trainer.v1.get("trainer_mode") if found.use_v1 else None


def _find_registrations(found: _Findings) -> None:
    """Import the registries (their post-import hooks run) and look the plugin's names up; the V1 trainer mode
    needs the TransferQueue package."""
    from verl.trainer.ppo import core_algos

    from verl_offgrpo import ESTIMATOR_NAMES, LOSS_NAMES, TRAINER_MODE

    from verl_offgrpo.config.names import foreign_owner

    found.registrations = {}
    for what, registry, names in (("advantage estimator", core_algos.ADV_ESTIMATOR_REGISTRY, ESTIMATOR_NAMES),
                                  ("policy loss", core_algos.POLICY_LOSS_REGISTRY, LOSS_NAMES)):
        for name in names:
            found.registrations[f"{what} {name}"] = registry.get(name) is not None
            if owner := foreign_owner(registry, name):
                found.problems.append(f"{what} {name} is registered by {owner}, not by verl-offgrpo (another "
                                      "package uses the name)")
    has_tq = importlib.util.find_spec("transfer_queue") is not None
    found.tq_version = (_dist_version("TransferQueue") or "installed") if has_tq else None
    if not has_tq:
        found.registrations[f"V1 trainer mode {TRAINER_MODE}"] = None
        if found.use_v1:
            found.problems.append(TRANSFER_QUEUE_MISSING)
    else:
        try:
            from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
        except ImportError as err:
            from verl_offgrpo.patches import import_failure

            found.registrations[f"V1 trainer mode {TRAINER_MODE}"] = None
            found.problems.append(f"verl's V1 trainer {import_failure(err)}")
        else:
            found.registrations[f"V1 trainer mode {TRAINER_MODE}"] = TRAINER_MODE in TRAINER_REGISTRY
    for name, ok in found.registrations.items():
        if ok is False:
            found.problems.append(f"{name} is not registered with verl")


def _find_patches(found: _Findings) -> None:
    """Import each patch target (proof that it exists and that the hooks ran), then read whether it is live."""
    from verl_offgrpo import patches

    for module in patches.patch_modules():
        checked = tuple(getattr(module, "preflight_targets", lambda: module.TARGETS)())
        missing = {target: _prove(target) for target in module.TARGETS}
        for target, why in missing.items():
            if why is not None and target in checked:
                found.problems.append(f"patch target {target} is missing or cannot be imported: {why}")
        live = module.live()
        found.patch_rows.append((module.TARGETS, live, missing, module.WHEN))
    for targets, live, missing, _ in found.patch_rows:
        if targets[0].endswith("validate_config") and not live and not patches.disabled():
            found.problems.append("verl.utils.config.validate_config does not run the off_grpo checks in this process")
        if targets[0].endswith("train_batch") and not live and missing[targets[0]] is None and not patches.disabled():
            found.problems.append("verl's BaseEngine.train_batch was imported here without the plugin's wrap")


def _find_internals(found: _Findings) -> None:
    """verl attributes that code outside the patches relies on at run time (patches.INTERNALS_MODULES)."""
    from verl_offgrpo import patches

    found.internals, import_problems = patches.verl_internals()
    found.problems.extend(import_problems)
    found.packages = {name: package for name, package, _ in patches.INTERNALS_MODULES}
    for name, targets in found.internals.items():
        found.internal_rows[name] = [(target, _prove(target)) for target in targets or ()]
        for target, why in found.internal_rows[name]:
            if why is not None:
                found.problems.append(f"verl attribute {target}, relied on by {name}, is missing: {why}")
    found.uses_rows = patches.verl_uses()
    found.problems.extend(line.removeprefix("verl-offgrpo: ") for line in patches.uses_problems(rows=found.uses_rows))


def _find_vllm(found: _Findings) -> None:
    found.vllm_version = _dist_version("vllm")
    if found.vllm_version is None:
        found.notes.append("vLLM is not installed: enough for this check and the CPU tests; training needs "
                           "pip install 'verl-offgrpo[gpu]' (in a checkout of the repository: pip install -e '.[gpu]')")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _counts(found: _Findings) -> str:
    """What the check looked at, counted, for the short report's line that points to ``check -v``."""
    targets = sum(len(targets) for targets, *_ in found.patch_rows)
    internals = sum(len(rows) for rows in found.internal_rows.values())
    return (f"{_plural(len(found.registrations), 'registration')}, {_plural(targets, 'patch target')}, "
            f"{_plural(internals, 'verl attribute')} and {_plural(len(found.uses_rows), 'use')} inside verl's code checked")


def _report(found: _Findings, verbose: bool = False) -> None:
    """The report: on stdout when the check passes, else on stderr. The verdict, the versions, the config and
    the notes; then, with ``verbose``, each registration, patch and verl internal the check looked at, else one
    line counting them (``check -v`` lists them); then, always in full, the problems (and the plugin's import
    error verl hides) and the config's one-line error, last."""
    from verl_offgrpo import __version__, patches
    from verl_offgrpo.patches.selection import config_selects

    failed = bool(found.problems or found.config_code)
    unchecked = found.config_code == NOT_CHECKABLE_HERE and not found.problems  # verl's checks need another machine
    status = "OFF" if patches.disabled() else "INCOMPLETE" if unchecked else "FAILED" if failed else "OK"
    out = sys.stderr if failed else sys.stdout
    overrides, config, eps = found.overrides, found.config, found.entry_points
    # a config that fails on an install that passed: the headline says which (a skim would read the install failed)
    only_config = status == "FAILED" and not found.problems
    print(f"verl-offgrpo {__version__} check {status}"
          + (": the config (last line); the install passed" if only_config else ""), file=out)
    print(f"  verl {found.verl_version} (patches written for verl{patches.VERL_VERSIONS}); "
          f"vLLM {found.vllm_version or 'not installed'}; TransferQueue {found.tq_version or 'not installed'}", file=out)
    if verbose and eps:
        print(f"  entry point: {eps[0].name} = {eps[0].value}; switch off with {patches.DISABLE_ENV}=1", file=out)
    if config is not None:
        given = ""
        if overrides:
            given = " + " + (" ".join(overrides) if verbose else _plural(len(overrides), "override"))
        yaml = (os.path.join(found.config_path, found.config_name) if found.config_path else CONFIG_NAME) + ".yaml"
        print(f"  config: {yaml}{given} — selects the plugin: "
              f"{'yes' if config_selects(config) else 'no'}; trainer: "
              f"{'V1 ' + str(found.mode) if found.use_v1 else 'v0 (use_v1=false)'}; "
              + ("validated as compose validates it: " + ("passed" if not found.config_code else
                                                         "not finished here (last line)" if unchecked
                                                         else "FAILED (last line)")
                 if overrides or found.config_path
                 else "not validated (`check <overrides>` validates them as compose does)"), file=out)
    for note in found.notes:
        print(f"  note: {note}", file=out)
    if verbose:
        _report_details(found, out)
    else:
        print(f"  {_counts(found)}: `python -m verl_offgrpo check -v` lists each", file=out)
    if found.problems:
        print("problems:", file=sys.stderr)
        for problem in found.problems:
            print(f"  - {problem}", file=sys.stderr)
        if found.import_failed:
            print("Importing verl_offgrpo.plugin directly to show the error verl hides:", file=sys.stderr)
            try:
                importlib.import_module("verl_offgrpo.plugin")
            except Exception:  # noqa: BLE001 - the point is to show it
                traceback.print_exc()
    if found.config_error is not None and (found.config_code != 1 or not found.problems):  # 1: the problems say why
        print(found.config_error, file=sys.stderr)


def _report_details(found: _Findings, out) -> None:
    """``check -v``'s listing: each registration, each patch target (live here?) with where it acts, each verl
    attribute relied on at run time (present?), and the config file."""
    print("  registrations:", file=out)
    for name, ok in found.registrations.items():
        state = {True: "registered", False: "MISSING", None: "not available (no TransferQueue)"}[ok]
        print(f"    {name}: {state}", file=out)
    print("  patches (target: live in this process; where it acts):", file=out)
    for targets, live, missing, when in found.patch_rows:
        for target in targets:
            why = missing[target]
            state = "live" if live else "not live"
            if why is not None:
                state += f"; target not importable here ({why})"
            print(f"    {target}: {state}", file=out)
        print(f"      {when}", file=out)
    print("  verl internals relied on at run time (attribute: present in this verl?):", file=out)
    for name, rows_of_module in found.internal_rows.items():
        if found.internals[name] is None:
            print(f"    {name}: not checked here (needs {found.packages[name]})", file=out)
            continue
        print(f"    {name}:", file=out)
        for target, why in rows_of_module:
            print(f"      {target}: {'present' if why is None else 'MISSING (' + why + ')'}", file=out)
    print("  what verl's code must still use (function: names; VERL_USES):", file=out)
    for _module, target, used, gone in found.uses_rows:
        state = "no code to read" if gone is None else f"NO LONGER USES {', '.join(gone)}" if gone else "used"
        print(f"    {target}: {', '.join(used)}: {state}", file=out)
    print(f"  config file: {os.path.join(config_dir(), CONFIG_NAME + '.yaml')}", file=out)


def check(overrides: list[str] | None = None, verbose: bool = False, config_path: str | None = None,
          config_name: str | None = None) -> int:
    """Import verl (which loads the ``verl.plugins`` entry points) and report, with proof, what the
    plugin registered and patched in this process, for the shipped config plus ``overrides``: by default
    the verdict, the versions, the config and a count of what was checked; with ``verbose`` (``check -v``)
    each registration, patch target and verl internal. Problems are printed in full either way.

    Exit 1 when the plugin is disabled or not loaded, verl is outside the patches' range, a patch
    target or registration is missing, or the config needs something that is not installed (the V1
    trainer mode needs the TransferQueue package). Given ``overrides``, the config is also validated as
    :func:`~verl_offgrpo.cli.compose.dry_run` validates it (:func:`~verl_offgrpo.cli.compose.validate`): a
    config it rejects fails the check with its one-line error, last, and its exit code (2, 3, 4, 5 or 6); without
    them it is not (the shipped yaml alone has ``???`` values). ``config_path``/``config_name``: your own yaml, as
    compose takes it (then validated, overrides or not)."""
    from verl_offgrpo import patches

    found = _Findings(overrides=list(overrides or []), config_path=config_path, config_name=config_name)
    for find in (_find_plugin_loaded, _find_config, _find_registrations, _find_patches, _find_internals, _find_vllm):
        find(found)
    if patches.disabled():  # on purpose: what it leaves unregistered and unpatched is what the switch does
        found.problems = [f"the plugin is turned off: {patches.DISABLE_ENV}={os.environ.get(patches.DISABLE_ENV)} "
                          "(verl runs unchanged; `compose` checks a config that does not select the plugin with "
                          "verl's checks alone)"]
    _report(found, verbose)
    return 1 if found.problems else found.config_code
