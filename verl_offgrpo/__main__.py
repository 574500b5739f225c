"""``python -m verl_offgrpo``: self-check, the shipped config's location, a dry composition.

    python -m verl_offgrpo check [overrides]     # registrations, patches (live?), versions; exit 1 if missing;
                                                 # with overrides, also compose's validation (its exit codes)
    python -m verl_offgrpo config-dir            # directory of off_grpo_trainer.yaml (for --config-path)
    python -m verl_offgrpo compose [overrides]   # compose + validate the full training config, print it;
                                                 # notes data/model paths that do not exist here

Exit codes: 0 fine; 1 the plugin is not usable here (not loaded, a patch or package missing); 2 the
plugin's checks reject the config; 3 a mandatory ``???`` value is still unset; 4 hydra cannot compose
the config or verl's ``validate_config`` rejects it; 64 a usage error (an unknown flag: ``compose`` and
``check`` take hydra overrides only).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import importlib.util
import os
import re
import sys
import traceback

CONFIG_NAME = "off_grpo_trainer"


def config_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "config")


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _prove(target: str) -> str | None:
    """Import ``target`` (its module's import runs the plugin's post-import hooks); None if it is
    there, else why not."""
    from verl_offgrpo.patches import resolve

    try:
        resolve(target)
    except Exception as err:  # noqa: BLE001 - reported, not raised
        return f"{type(err).__name__}: {err}"
    return None


def check(overrides: list[str] | None = None) -> int:
    """Import verl (which loads the ``verl.plugins`` entry points) and report, with proof, what the
    plugin registered and patched in this process, for the shipped config plus ``overrides``.

    Exit 1 when the plugin is disabled or not loaded, verl is outside the patches' range, a patch
    target or registration is missing, or the config needs something that is not installed (the V1
    trainer mode needs the TransferQueue package). Given ``overrides``, the config is also validated as
    :func:`dry_run` validates it (:func:`validate`): a config it rejects fails the check with its one-line
    error, last, and its exit code (2, 3 or 4); without them it is not (the shipped yaml alone has ``???``
    values)."""
    from importlib.metadata import entry_points

    from verl_offgrpo import ESTIMATOR_NAMES, LOSS_NAMES, TRAINER_MODE, __version__
    from verl_offgrpo import patches
    from verl_offgrpo.patches.selection import config_selects

    problems: list[str] = []
    notes: list[str] = []
    eps = [ep for ep in entry_points(group="verl.plugins") if ep.value.startswith("verl_offgrpo")]
    if not eps:
        problems.append("no 'verl.plugins' entry point for verl_offgrpo: is the package pip-installed?")
    if patches.disabled():
        problems.append(f"the plugin is turned off: {patches.DISABLE_ENV}={os.environ.get(patches.DISABLE_ENV)}")
    import verl

    plugin = sys.modules.get("verl_offgrpo.plugin")
    if not patches.disabled() and not getattr(plugin, "ACTIVE", False):
        problems.append("verl did not load the plugin (VERL_USE_EXTERNAL_PLUGINS leaves it out, or its import "
                        "failed: see below)")
    version_problem = patches.version_problem()
    if version_problem:
        problems.append(version_problem)

    config_code, config_error = 0, None
    if overrides:  # compose's validation: its exit code and one-line error
        config_code, config_error, config = validate(list(overrides))
    else:
        try:
            config = compose([])
        except Exception as err:  # noqa: BLE001
            config = None
            problems.append(f"cannot compose the shipped config: {type(err).__name__}: {err}")
    use_v1 = bool(config is not None and config.trainer.get("use_v1", True))
    mode = config.trainer.v1.get("trainer_mode") if use_v1 else None

    # registrations: import the registries (their post-import hooks run) and look the names up
    from verl.trainer.ppo import core_algos

    registrations = {
        **{f"advantage estimator {name}": core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not None
           for name in ESTIMATOR_NAMES},
        **{f"policy loss {name}": name in core_algos.POLICY_LOSS_REGISTRY for name in LOSS_NAMES},
    }
    has_tq = importlib.util.find_spec("transfer_queue") is not None
    tq_version = (_dist_version("TransferQueue") or "installed") if has_tq else None
    if not has_tq:
        registrations[f"V1 trainer mode {TRAINER_MODE}"] = None
        if use_v1:
            problems.append(
                "the config runs verl's V1 trainer (trainer.use_v1=true, the default), which needs the TransferQueue "
                "package: pip install 'TransferQueue>=0.1.10', or run the v0 trainer (README: trainer.use_v1=false "
                "+actor_rollout_ref.rollout.checkpoint_manager_class=...)"
            )
    else:
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

        registrations[f"V1 trainer mode {TRAINER_MODE}"] = TRAINER_MODE in TRAINER_REGISTRY
    for name, ok in registrations.items():
        if ok is False:
            problems.append(f"{name} is not registered with verl")

    # patches: import each target (proof that it exists and that the hooks ran), then read it
    rows = []
    for module in patches.patch_modules():
        checked = tuple(getattr(module, "preflight_targets", lambda: module.TARGETS)())
        missing = {target: _prove(target) for target in module.TARGETS}
        for target, why in missing.items():
            if why is not None and target in checked:
                problems.append(f"patch target {target} is missing: {why}")
        live = module.live()
        rows.append((module.TARGETS, live, missing, module.WHEN))
    for targets, live, missing, _ in rows:
        if targets[0].endswith("validate_config") and not live and not patches.disabled():
            problems.append("verl.utils.config.validate_config does not run the off_grpo checks in this process")
        if targets[0].endswith("train_batch") and not live and missing[targets[0]] is None and not patches.disabled():
            problems.append("verl's BaseEngine.train_batch was imported here without the plugin's wrap")

    # verl attributes that code outside the patches relies on at run time (patches.INTERNALS_MODULES)
    internals, import_problems = patches.verl_internals()
    problems.extend(import_problems)
    packages = {name: package for name, package, _ in patches.INTERNALS_MODULES}
    internal_rows = {}
    for name, targets in internals.items():
        internal_rows[name] = [(target, _prove(target)) for target in targets or ()]
        for target, why in internal_rows[name]:
            if why is not None:
                problems.append(f"verl attribute {target}, relied on by {name}, is missing: {why}")

    vllm_version = _dist_version("vllm")
    if vllm_version is None:
        notes.append("vLLM is not installed: enough for this check and the CPU tests; training needs "
                     "pip install -e '.[gpu]'")
    failed = bool(problems or config_code)
    status = "FAILED" if failed else "OK"
    out = sys.stderr if failed else sys.stdout
    print(f"verl-offgrpo {__version__} check {status}", file=out)
    print(f"  verl {getattr(verl, '__version__', '?')} (patches written for verl{patches.VERL_VERSIONS}); "
          f"vLLM {vllm_version or 'not installed'}; TransferQueue {tq_version or 'not installed'}", file=out)
    if eps:
        print(f"  entry point: {eps[0].name} = {eps[0].value}; switch off with {patches.DISABLE_ENV}=1", file=out)
    if config is not None:
        print(f"  config: {CONFIG_NAME}.yaml{' + ' + ' '.join(overrides) if overrides else ''} — selects the plugin: "
              f"{'yes' if config_selects(config) else 'no'}; trainer: "
              f"{'V1 ' + str(mode) if use_v1 else 'v0 (use_v1=false)'}; "
              + ("validated as compose validates it: " + ("passed" if not config_code else "FAILED (last line)")
                 if overrides else "not validated (`check <overrides>` validates them as compose does)"), file=out)
    print("  registrations:", file=out)
    for name, ok in registrations.items():
        state = {True: "registered", False: "MISSING", None: "not available (no TransferQueue)"}[ok]
        print(f"    {name}: {state}", file=out)
    print("  patches (target: live in this process; where it acts):", file=out)
    for targets, live, missing, when in rows:
        for target in targets:
            why = missing[target]
            state = "live" if live else "not live"
            if why is not None:
                state += f"; target not importable here ({why})"
            print(f"    {target}: {state}", file=out)
        print(f"      {when}", file=out)
    print("  verl internals relied on at run time (attribute: present in this verl?):", file=out)
    for name, rows_of_module in internal_rows.items():
        if internals[name] is None:
            print(f"    {name}: not checked here (needs {packages[name]})", file=out)
            continue
        print(f"    {name}:", file=out)
        for target, why in rows_of_module:
            print(f"      {target}: {'present' if why is None else 'MISSING (' + why + ')'}", file=out)
    for note in notes:
        print(f"  note: {note}", file=out)
    print(f"  config file: {os.path.join(config_dir(), CONFIG_NAME + '.yaml')}", file=out)
    if problems:
        print("problems:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        if not patches.disabled() and not getattr(plugin, "ACTIVE", False):
            print("Importing verl_offgrpo.plugin directly to show the error verl hides:", file=sys.stderr)
            try:
                importlib.import_module("verl_offgrpo.plugin")
            except Exception:  # noqa: BLE001 - the point is to show it
                traceback.print_exc()
    if config_error is not None and (config_code != 1 or not problems):  # 1: the problems above say why
        print(config_error, file=sys.stderr)
    return 1 if problems else config_code


def compose(overrides: list[str]):
    """The full training config main_ppo would get from the shipped yaml plus ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return hydra_compose(config_name=CONFIG_NAME, overrides=list(overrides))


def missing_values(config) -> list[str]:
    """The mandatory values (``???``) still unset in ``config``, outside sections switched off
    (a node with ``enable: false``, e.g. ``reward.reward_model`` when no reward model is used)."""
    from omegaconf import OmegaConf

    def switched_off(key: str) -> bool:
        parts = key.split(".")
        for depth in range(1, len(parts)):
            node = OmegaConf.select(config, ".".join(parts[:depth]), throw_on_missing=False)
            if OmegaConf.is_dict(node) and node.get("enable", None) is False:
                return True
        return False

    return sorted(key for key in OmegaConf.missing_keys(config) if not switched_off(key))


#: the config keys whose paths verl reads at start-up: data files (a string or a list) and the model
DATA_PATH_KEYS = ("data.train_files", "data.val_files")
MODEL_PATH_KEY = "actor_rollout_ref.model.path"
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # hdfs://, s3://, gs://, ...: not checked here
_HUB_ID = re.compile(r"^[A-Za-z0-9_][\w.-]*(/[A-Za-z0-9_][\w.-]*)?$")  # "gpt2", "Qwen/Qwen2.5-0.5B-Instruct"


def local_path_notes(config, hints: dict[str, str] | None = None) -> list[str]:
    """One ``note:`` line per local path of ``config`` that does not exist on this machine: the data files
    (``data.train_files``/``val_files``, a string or a list) and the model (``actor_rollout_ref.model.path``).

    Remote paths (``scheme://``) are not checked. verl passes a model path that is not ``hdfs://`` to
    transformers unchanged (``verl.utils.fs.copy_to_local``), which takes a name that is not a local directory
    as a Hugging Face hub id: such a model path is noted as that, not as missing. ``hints`` maps a path to
    what its note adds in parentheses (the recipes say which data_prep script makes their files)."""
    from omegaconf import OmegaConf

    hints = hints or {}
    notes = []

    def paths(key):
        value = OmegaConf.select(config, key, default=None, throw_on_missing=False)
        if value is None:
            return []
        return [str(p) for p in value] if OmegaConf.is_list(value) or isinstance(value, (list, tuple)) else [str(value)]

    for key in DATA_PATH_KEYS:
        for path in paths(key):
            found = glob.glob(path) if glob.has_magic(path) else os.path.exists(path)  # datasets expands globs
            if not _REMOTE.match(path) and not found:
                hint = f" ({hints[path]})" if path in hints else ""
                notes.append(f"note: {key}={path} does not exist here{hint}")
    for path in paths(MODEL_PATH_KEY):
        if _REMOTE.match(path) or os.path.isdir(path):
            continue
        if _HUB_ID.match(path) and ".." not in path and not os.path.exists(path):
            notes.append(f"note: {MODEL_PATH_KEY}={path} is not a local directory; verl will try the Hugging Face "
                         "hub (transformers takes it as a hub id: the local HF cache, else a download)")
        else:
            notes.append(f"note: {MODEL_PATH_KEY}={path} does not exist here" if not os.path.exists(path)
                         else f"note: {MODEL_PATH_KEY}={path} is not a directory")
    return notes


def _knob_hint(message: str) -> str:
    """" (did you mean <knob>?)" when hydra could not override a misspelt plugin knob, else ""."""
    from verl_offgrpo.config import OffGRPOConfig, RECConfig
    from verl_offgrpo.config.off_grpo import PREFIX
    from verl_offgrpo.config.rec import PREFIX as REC_PREFIX
    from verl_offgrpo.config.values import did_you_mean

    found = re.search(r"Could not override '([^']+)'", message)
    if not found:
        return ""
    for prefix, cls in ((PREFIX, OffGRPOConfig), (REC_PREFIX, RECConfig)):
        if knob := did_you_mean(found.group(1), prefix, cls):
            return f" (did you mean {knob}?)"
    return ""


@contextlib.contextmanager
def _plugin_info_on_stderr():
    """The plugin's info lines (what ``final_outputs_only=auto`` resolved to, a window's rounds) on stderr, as
    main_ppo's hydra logging shows them; verl's CPU logging setup would drop them here."""
    import logging

    plugin = logging.getLogger("verl_offgrpo")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    previous = plugin.level, plugin.propagate
    plugin.addHandler(handler)
    plugin.setLevel(logging.INFO)
    plugin.propagate = False  # once, whatever the root logger does
    try:
        yield
    finally:
        plugin.removeHandler(handler)
        plugin.setLevel(previous[0])
        plugin.propagate = previous[1]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _raised_in_verls_checks(err: BaseException) -> bool:
    """Whether ``err`` was raised inside verl's own ``validate_config`` (its frame in ``verl/utils/config.py``
    is on the traceback), not in the plugin's checks that run before it (a plugin bug, even one raised in a
    verl helper they call)."""
    import verl.utils.config as verl_config

    theirs = os.path.abspath(verl_config.__file__)
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "validate_config" and os.path.abspath(code.co_filename) == theirs:
            return True
        tb = tb.tb_next
    return False


def validate(overrides: list[str]):
    """Compose the shipped yaml + ``overrides`` and validate it exactly as main_ppo's driver does, without Ray
    or a GPU: ``(exit code, the one-line error or None, the composed config or None)``; the codes as
    :func:`dry_run`'s. The plugin's info lines and verl's banner go to stderr on the way."""
    import verl  # noqa: F401  (loads the plugin)
    import verl.utils.config as verl_config
    from hydra.errors import HydraException
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from verl_offgrpo.config import OffGRPOConfigError
    from verl_offgrpo.patches import PatchError
    from verl_offgrpo.patches import validate_config as validate_config_patch

    try:
        config = compose(overrides)
    except (HydraException, OmegaConfBaseException) as err:
        return 4, f"config error (hydra): {_one_line(err)}{_knob_hint(str(err))}", None
    if not validate_config_patch.live():
        return 1, ("verl did not load the verl-offgrpo plugin, so its checks would not run here or in main_ppo; "
                   "`python -m verl_offgrpo check` shows why."), config
    try:
        with contextlib.redirect_stdout(sys.stderr), _plugin_info_on_stderr():  # stdout is the yaml
            verl_config.validate_config(
                config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
            )
    except OffGRPOConfigError as err:
        return 2, f"off_grpo config error: {err}", config
    except PatchError as err:  # the installed verl does not take the plugin's patches: not the config's fault
        return 1, f"verl-offgrpo cannot run here: {_one_line(err)} (`python -m verl_offgrpo check` lists them)", config
    except MissingMandatoryValue:  # verl read a ??? value: said below
        if not missing_values(config):
            raise
    except Exception as err:  # verl's own validate_config rejects the config, or the plugin's checks have a bug
        if not _raised_in_verls_checks(err):
            raise  # a bug in the plugin's checks (a bare ValueError too, not a config error of verl's): its traceback
        if isinstance(err, (AssertionError, ValueError, HydraException)):  # verl's checks of the config
            # verl's dataclass checks reach here wrapped in hydra's InstantiationException: say the cause
            cause = err.__cause__ if isinstance(err, HydraException) and err.__cause__ is not None else err
            return 4, f"config error (verl's validate_config): {_one_line(cause) or type(cause).__name__}", config
        # anything else verl's checks raise (a key its branch needs is not in the config, ...)
        return 4, f"config error (verl's validate_config): {type(err).__name__}: {_one_line(err)}", config
    missing = missing_values(config)
    if missing:
        return 3, (f"incomplete config: main_ppo needs these mandatory values, still ??? here: {', '.join(missing)} "
                   "(e.g. actor_rollout_ref.rollout.name=vllm)"), config
    return 0, None, config


def dry_run(overrides: list[str], path_hints: dict[str, str] | None = None) -> int:
    """Compose and validate exactly as main_ppo's driver does (:func:`validate`), without Ray or a GPU, and
    print the config; then note, on stderr, the data/model paths that do not exist here
    (:func:`local_path_notes`, with ``path_hints``; exit code unchanged).

    Exit 2 for a config the plugin rejects, 3 if a mandatory value (``???``, e.g. ``rollout.name``) is
    still unset, 4 for a config hydra cannot compose (a typo in a key, bad override syntax) or verl's own
    ``validate_config`` rejects (any exception it raises); one line each, no traceback. Exit 1 if verl
    did not load the plugin (``VERL_USE_EXTERNAL_PLUGINS`` leaves it out, the package is not pip-installed,
    or its import failed, which verl logs only at DEBUG): verl's own ``validate_config`` would then pass
    without the off_grpo checks, and main_ppo would not know them; also 1 if the installed verl does not
    take the plugin's patches.
    """
    from omegaconf import OmegaConf

    code, error, config = validate(overrides)
    if code:
        print(error, file=sys.stderr)
        return code
    print(OmegaConf.to_yaml(config))
    print("# composed and validated: verl's validate_config + off_grpo checks passed", file=sys.stderr)
    for note in local_path_notes(config, path_hints):
        print(note, file=sys.stderr)
    return 0


#: exit code of a usage error (BSD sysexits' EX_USAGE): argparse's own 2 is the plugin's checks' code here
EX_USAGE = 64
_OVERRIDES_ONLY = ("hydra overrides only (key=value), not hydra's flags (--cfg, --config-name, ...); hydra's "
                   "composition without the checks is main_ppo's --cfg job: python -m verl.trainer.main_ppo "
                   "--config-path \"$(python -m verl_offgrpo config-dir)\" --config-name off_grpo_trainer "
                   "<overrides> --cfg job")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on exit code :data:`EX_USAGE`, not 2 (the plugin's checks' code)."""

    def error(self, message):
        if "unrecognized arguments: " in message:
            flags = [arg for arg in message.split("unrecognized arguments: ", 1)[1].split() if arg.startswith("-")]
            message += ("; compose and check take " + _OVERRIDES_ONLY if flags
                        else "; put the overrides before compose's --path-hint options")
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


#: verl's import-time noise this CLI drops (main_ppo's own output keeps it): the optional training engines
#: that are not installed, and the platform lines of a machine without an accelerator (a dry run is for one)
_QUIET_WARNINGS = (r"\w+ engine is not available: ", r"verl\.workers\.engine\Z")
#: verl's note that a non-GAE estimator runs without a critic: always true for the plugin's estimators
_QUIET_CRITIC_NOTE = r"Disabled critic as algorithm\.adv_estimator != gae"
_QUIET_PLATFORM = ("verl.plugin.platform.platform_manager",
                   ("No supported accelerator detected", "Platform '%s' (%s) is registered but not available"))


def _quiet_verl_imports() -> None:
    """Filters for :data:`_QUIET_WARNINGS`, :data:`_QUIET_CRITIC_NOTE` and :data:`_QUIET_PLATFORM`, set before
    verl is imported; nothing else of verl's or the plugin's output is hidden."""
    import logging
    import warnings

    message, module = _QUIET_WARNINGS
    warnings.filterwarnings("ignore", message=message, category=UserWarning, module=module)
    warnings.filterwarnings("ignore", message=_QUIET_CRITIC_NOTE, category=UserWarning)
    name, prefixes = _QUIET_PLATFORM
    logging.getLogger(name).addFilter(lambda record: not str(record.msg).startswith(prefixes))


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m verl_offgrpo", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser(
        "check", help="the plugin's registrations, patches and versions; exit 1 if the plugin is not usable or the "
        "config needs a package that is missing; with overrides, also compose's validation of the shipped yaml + "
        "overrides (compose's one-line error and exit code 2/3/4; no yaml)",
        description="Self-check: the plugin's registrations, patches and versions, for the shipped yaml (+ overrides); "
        "exit 1 if the plugin is not usable here or the config needs a package that is missing. Given overrides, "
        "check also validates the config exactly as compose does (same one-line error, same exit code 2/3/4; the "
        "yaml is not printed); without overrides the config is not validated (the shipped yaml alone is not "
        "runnable). Takes " + _OVERRIDES_ONLY)
    p_check.add_argument("overrides", nargs="*", help="hydra overrides of the shipped yaml, as for compose/main_ppo")
    sub.add_parser("config-dir", help="print the directory of the shipped yaml")
    p_compose = sub.add_parser(
        "compose", help="compose + validate the training config (no GPU), print it",
        description="Compose the shipped yaml + overrides and validate it as main_ppo's driver does, without Ray or "
        "a GPU: exit 0 and the yaml on stdout, or one line on stderr: 1 the plugin is not usable here, 2 the "
        "plugin's checks, 3 a ??? value still unset, 4 hydra or verl's validate_config; 64 a usage error. "
        + "Takes " + _OVERRIDES_ONLY)
    p_compose.add_argument("--path-hint", action="append", default=[], nargs=2, metavar=("PATH", "TEXT"),
                           help="what the note about PATH says in parentheses if PATH does not exist here "
                           "(the recipes: how to make their data); repeatable")
    p_compose.add_argument("overrides", nargs="*", help="hydra overrides, as for main_ppo (no --cfg/--config-name)")
    args = parser.parse_args(argv)
    if args.command == "config-dir":
        print(config_dir())
        return 0
    _quiet_verl_imports()
    if args.command == "check":
        return check(args.overrides)
    return dry_run(args.overrides, dict(args.path_hint))


if __name__ == "__main__":
    sys.exit(main())
