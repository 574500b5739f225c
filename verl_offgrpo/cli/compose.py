"""``compose``: the shipped yaml + overrides, composed and validated exactly as main_ppo's driver does, without
Ray or a GPU (:func:`validate`), and printed (:func:`dry_run`); each way it can fail is one line and an exit
code: 1 the plugin is not usable here, 2 the plugin's checks, 3 a ``???`` value still unset (said before the
checks run), 4 hydra, verl's own ``validate_config`` or the rollout config verl's workers build (:mod:`verl_offgrpo.patches.rollout_config`), 5 a value that cannot be read (a ``${...}`` that does not
resolve, a section set to null: :mod:`verl_offgrpo.config.readable`), 6 verl's ``validate_config`` needs what this
machine lacks for this config (vLLM installed, the model hub): not a config error; the plugin's checks ran first."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys

from verl_offgrpo.config.missing_values import incomplete, unset_line
from .paths import CONFIG_NAME, config_dir, local_path_notes


def compose(overrides: list[str], config_path: str | None = None, config_name: str | None = None):
    """The full training config main_ppo would get from ``--config-path config_path --config-name config_name``
    (default: the shipped yaml) plus ``overrides``; ``config_path`` absolute (``~`` expanded)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    where = os.path.abspath(os.path.expanduser(config_path)) if config_path else config_dir()
    with initialize_config_dir(config_dir=where, version_base=None):
        return hydra_compose(config_name=config_name or CONFIG_NAME, overrides=list(overrides))


def _override_key(override: str) -> str:
    """The dotted key of a hydra override (``+a.b=1``, ``++a.b=1``, ``~a.b``): ``a.b``."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def _closest_path(config, dotted: str) -> tuple[str | None, str | None]:
    """``(path, section)`` for a dotted key that is not in the composed ``config``: ``path`` the existing key it
    may misspell, each segment not in the config replaced by its closest sibling (difflib), or None where a
    segment has none; ``section``: the plugin's knob section (``algorithm.off_grpo``, ``policy_loss.rec``) that
    the path, as far as it could be followed, leads into, or None."""
    import difflib

    from omegaconf import DictConfig

    from verl_offgrpo.config.off_grpo import PREFIX
    from verl_offgrpo.config.rec import PREFIX as REC_PREFIX

    def section_of(parts: list[str]) -> str | None:
        path = ".".join(parts)
        return next((p for p in (PREFIX, REC_PREFIX) if path == p or path.startswith(p + ".")), None)

    node, found = config, []
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():  # below a value
            return None, section_of(found)
        keys = [str(k) for k in node.keys()]
        if part not in keys:
            close = difflib.get_close_matches(part, keys, n=1)
            if not close:
                return None, section_of(found)
            part = close[0]
        found.append(part)
        node = node._get_node(part)
    return ".".join(found), section_of(found)


#: what a yaml of one's own lists to take the plugin's settings (README, "Check a config without a GPU")
OWN_YAML = ("defaults: [ppo_trainer, off_grpo_settings, _self_] with hydra.searchpath: [pkg://verl.trainer.config, "
            "pkg://verl_offgrpo.config]")


def _own_yaml_hint(message: str) -> str | None:
    """hydra's line for the two ways a yaml of one's own misses the plugin's settings, with what to list instead:
    ``off_grpo_trainer`` in its defaults (a primary config: its searchpath cannot be taken over), or either without
    the plugin's searchpath entry; None for any other error."""
    said = _one_line(message)
    if "off_grpo_trainer" in said and "hydra.searchpath is only supported from the primary config" in said:
        return f"{said} (off_grpo_trainer is a primary config: list its settings instead, {OWN_YAML})"
    if "Could not load 'off_grpo_settings'" in said or "Could not load 'off_grpo_trainer'" in said:
        return f"{said.split(' Config search path:', 1)[0]} (the plugin's settings: {OWN_YAML})"
    return None


#: a ``~`` where a path starts in an override's value: alone, or a list's item (after ``[``, ``,``, a space, a quote)
_TILDE = re.compile(r"""(^|[\[,\s'"])~(?=/|$|[\],\s'"])""")
#: a value that is one path starting with ``~`` (``~`` or ``~/...``, no list, quote or space): its fix is spelt out
_ONE_TILDE_PATH = re.compile(r"""~(/[^\s,\[\]'"]*)?""")


def _tilde_hint(message: str) -> str | None:
    """The one line for hydra's lexer error on a ``~`` in an override's value, or None for any other error. bash
    expands a ``~`` only at a word's start (or after the ``=`` of a shell variable's assignment), so
    ``data.train_files=~/x.parquet`` reaches hydra as typed, whose grammar takes no bare ``~``; and verl reads its data
    and model paths as written (:mod:`verl_offgrpo.config.tilde_path_checks`): the path in full is the fix, spelt out
    for a value that is one path, in general terms for a list."""
    found = re.match(r"LexerNoViableAltException: (.*)", message)
    override = found.group(1).rstrip() if found else ""
    key, _, value = override.partition("=")
    if not value or not _TILDE.search(value):
        return None
    home = os.path.expanduser("~")
    if _ONE_TILDE_PATH.fullmatch(value):
        fix = f"write {key}={home}{value[1:]} (in a shell, {key}=$HOME{value[1:]})"
    else:
        fix = f"write each path in full ({home}/... for ~/..., or $HOME/... in a shell)"
    return f"{override}: hydra takes no bare ~ in a value, and verl reads data and model paths as written: {fix}"


def _override_hint(message: str, overrides: list[str], source: dict | None = None) -> str | None:
    """The one line for hydra's "Could not override '<key>'" (a key not in the config), or None for any other
    error: the existing path the key may misspell, each misspelt segment replaced by the closest existing one
    (``algorithm.offgrpo.red_drop_seed`` → ``algorithm.off_grpo.red_drop_seed``), read off the config composed
    from the overrides before it. For a path (close to) one of the plugin's knobs, hydra's advice to append it with ``+``
    is dropped: the plugin's yaml has every knob, and an appended misspelling would do nothing (or be refused); for a
    plugin knob under another section (``algorithm.sync_period``), its own path."""
    from verl_offgrpo.config.misplaced import home_of
    from verl_offgrpo.config.off_grpo import PREFIX, OffGRPOConfig
    from verl_offgrpo.config.rec import RECConfig

    found = re.search(r"Could not override '([^']+)'", message)
    if not found:
        return None
    key = found.group(1)
    keys = [_override_key(o) for o in overrides]
    try:  # hydra applies the overrides in order: those before the first that failed compose
        config = compose(list(overrides[: keys.index(key)]) if key in keys else [], **(source or {}))
    except Exception:  # noqa: BLE001 - hydra's line as it is
        return None
    hydra_said = _one_line(message)
    first = hydra_said.split(" To append to your config use ", 1)[0]
    path, section = _closest_path(config, key)
    if path == key:  # there after all (hydra refused it for another reason): its own words
        return None
    misspelt = section is not None and path not in (None, section)  # a knob's path with a slip: said below
    if not misspelt and (home := home_of(key)):  # a plugin knob elsewhere: hydra's + puts it where nothing reads it
        from omegaconf import OmegaConf

        name = key.rpartition(".")[2]
        value = next((o.split("=", 1)[1] for o in overrides if "=" in o and _override_key(o) == key), "...")
        there = OmegaConf.select(config, f"{home}.{name}", default=None) is not None
        return (f"{key} is not where the plugin reads it: set {'' if there else '+'}{home}.{name}={value} instead"
                f"{' (no +: the yaml sets every knob)' if there else ''}; {first}")
    if section is None:
        return f"{key} is not in the config (did you mean {path}?); {hydra_said}" if path else None
    cls = OffGRPOConfig if section == PREFIX else RECConfig
    knobs = ", ".join(f.name for f in dataclasses.fields(cls))
    if path == section:  # the section itself (algorithm.offgrpo=1): a value there is no knob either
        return f"{key} is no knob (did you mean {path}.<knob>=...? its knobs: {knobs}); {first}"
    if path is not None:
        return f"{key} is no knob (did you mean {path}?); {first}"
    return f"{key} is no knob ({section}'s knobs: {knobs}); {first}"


@contextlib.contextmanager
def _plugin_info_on_stderr():
    """The plugin's info lines (what ``final_outputs_only=auto`` resolved to, a window's rounds) on stderr, as
    main_ppo's hydra logging shows them, with their level (``[INFO]``: nothing to act on; ``[WARNING]``); verl's CPU
    logging setup would drop them here."""
    import logging

    plugin = logging.getLogger("verl_offgrpo")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
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


@contextlib.contextmanager
def _plugin_warnings():
    """The plugin's warnings (each message once, in order) logged while the block runs: :func:`dry_run` repeats
    them under the printed config, where they are not lost above a thousand lines of yaml."""
    import logging

    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = _one_line(record.getMessage())
            if message not in seen:
                seen.append(message)

    plugin = logging.getLogger("verl_offgrpo")
    handler = Collect(level=logging.WARNING)
    plugin.addHandler(handler)
    try:
        yield seen
    finally:
        plugin.removeHandler(handler)


def _group_override_error(err: Exception, overrides: list[str]) -> tuple[int, str, None]:
    """:func:`validate`'s answer to an exception of hydra's that is no ``HydraException`` (its defaults list's
    ValueError "Config group override must be a string or a list", or a TypeError): a config group given a value
    (``algorithm=null``, ``transfer_queue=5``, ``data=[1]``) is a section set to a value, exit 5; an override
    without a key (``=5``) or anything else is hydra's, exit 4; one line each."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from verl_offgrpo.config.readable import section_set_to_a_value

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - hydra's line as it is
        parsed = []
    for override in parsed:  # a group is a key without a dot; hydra refused a value that names none of its options
        key, value = override.key_or_group, override.value()
        if not key:
            return 4, f"config error (hydra): the override {override.input_line!r} names no key: write key=value.", None
        names = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        if "." not in key and not names:
            return 5, f"config error (unreadable): {section_set_to_a_value(key, value)}", None
    return 4, f"config error (hydra): {_one_line(err) or type(err).__name__}", None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


#: what ``compose`` reads of verl 0.9.1 beyond its public functions: the frame of verl's own ``validate_config``
#: (:func:`_raised_in_verls_checks`); and, by path, ``verl/third_party/{vllm,sglang}/`` (:func:`_what_this_machine_lacks`)
VERL_INTERNALS = ("verl.utils.config.validate_config",)


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


#: exit code of a config verl's own checks could not finish on this machine (:func:`_what_this_machine_lacks`)
NOT_CHECKABLE_HERE = 6
#: what a config on verl's V1 trainer needs that verl imports only inside Ray (its TaskRunner), said by ``compose``
#: (exit 1) and ``check``
TRANSFER_QUEUE_MISSING = (
    "the config runs verl's V1 trainer (trainer.use_v1=true, the default), which needs the TransferQueue package: "
    "pip install 'TransferQueue>=0.1.10', or run the v0 trainer (README: trainer.use_v1=false "
    "+actor_rollout_ref.rollout.checkpoint_manager_class=...)"
)


def transfer_queue_missing(config) -> str | None:
    """:data:`TRANSFER_QUEUE_MISSING` for a config on the V1 trainer where the ``transfer_queue`` package is not
    importable (main_ppo would start Ray and stop there), else None."""
    import importlib.util

    from verl_offgrpo.config.readers import uses_v1

    return TRANSFER_QUEUE_MISSING if uses_v1(config) and importlib.util.find_spec("transfer_queue") is None else None


#: errors that say the model hub could not be reached (by class name, where their package defines them): offline,
#: refused, timed out. The hub's answers (a repository, revision or file not found, a gated repository) are not here:
#: a mistyped hub id stays a config error
_UNREACHABLE = {
    "huggingface_hub": ("LocalEntryNotFoundError", "OfflineModeIsEnabled"),
    "requests": ("ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout"),
    "urllib3": ("NewConnectionError", "MaxRetryError", "ConnectTimeoutError", "NameResolutionError"),
    "httpx": ("ConnectError", "ConnectTimeout", "ReadTimeout"),
}


def _what_this_machine_lacks(err: BaseException) -> tuple[str, BaseException] | None:
    """What verl's ``validate_config`` needed for this config that this machine does not have, and the error that
    says so; or None. vLLM (or SGLang), where the error was raised importing verl 0.9.1's ``verl.third_party.vllm``
    (its LoRA checks import it; without vLLM installed it raises "vllm version None not supported"); the model hub,
    where the chain holds an error of :data:`_UNREACHABLE` (a model path that is not a local directory here is read
    as a hub id: a critic's or reward model's tokenizer, offline)."""
    chain, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        chain.append(err)
        err = err.__cause__ or err.__context__
    for link in chain:
        tb = link.__traceback__
        while tb is not None:
            path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
            for engine, name in (("vllm", "vLLM"), ("sglang", "SGLang")):
                if f"/verl/third_party/{engine}/" in path:
                    return f"{name} installed", link
            tb = tb.tb_next
    for link in reversed(chain):  # the innermost says it plainest
        package = (type(link).__module__ or "").split(".")[0]
        if type(link).__name__ in _UNREACHABLE.get(package, ()):
            return ("the model hub (the network; a model path that is not a local directory here is read as a hub "
                    "id)"), link
    return None


def _naming_the_path_key(config, line: str) -> str:
    """``line`` (verl's error) with the path key whose value it quotes, where one does: transformers' "Repo id must be
    in the form ..." names the path, not the key (``critic.model.path`` for a ``gae`` job on verl's default)."""
    from omegaconf import OmegaConf

    from verl_offgrpo.config.tilde_path_checks import CRITIC_KEYS, MODEL_KEYS, REWARD_MODEL_KEYS

    for key in MODEL_KEYS + CRITIC_KEYS + REWARD_MODEL_KEYS:
        value = OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)
        if isinstance(value, str) and value and f"'{value}'" in line:
            return f"{line} ({key}={value})"
    return line


def validate(overrides: list[str], config_path: str | None = None, config_name: str | None = None):
    """Compose the shipped yaml (or ``config_path``/``config_name``: :func:`compose`) + ``overrides`` and validate it
    exactly as main_ppo's driver does, without Ray or a GPU: ``(exit code, the one-line error or None, the composed
    config or None)``; the codes as :func:`dry_run`'s. The plugin's info lines and verl's banner go to stderr on the way.

    A mandatory value still ``???``, or null where verl needs one, is said before any check runs, alone
    (:func:`unset_line`): the config cannot run without it, and the checks would read it as unset."""
    import verl  # noqa: F401  (loads the plugin)
    import verl.utils.config as verl_config
    from hydra.errors import HydraException
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from verl_offgrpo.config import OffGRPOConfigError
    from verl_offgrpo.config.readable import UnreadableConfigError, check_readable
    from verl_offgrpo.patches import DISABLE_ENV, PatchError, disabled
    from verl_offgrpo.patches import validate_config as validate_config_patch
    from verl_offgrpo.patches.rollout_config import SAID_AS, RolloutConfigError, rollout_config_error

    source = {"config_path": config_path, "config_name": config_name}
    try:
        config = compose(overrides, **source)
    except (HydraException, OmegaConfBaseException) as err:
        hint = _own_yaml_hint(str(err)) or _override_hint(str(err), overrides, source) or _tilde_hint(str(err))
        return 4, f"config error (hydra): {hint or _one_line(err)}", None
    except Exception as err:  # noqa: BLE001 - hydra's own ValueError/TypeError for an override it cannot apply
        return _group_override_error(err, overrides)
    if disabled():  # turned off on purpose: plain verl's checks, for a config that does not need the plugin
        from verl_offgrpo.patches.selection import config_selects

        if config_selects(config):
            return 1, (f"verl-offgrpo is turned off ({DISABLE_ENV}={os.environ.get(DISABLE_ENV)}) but this config "
                       "selects it (the plugin's estimator, loss, trainer mode or knobs): main_ppo would fail on the "
                       f"names it does not register; unset {DISABLE_ENV}, or compose verl's own yaml "
                       "(--config-path <verl/trainer/config> --config-name ppo_trainer)."), config
    elif not validate_config_patch.live():
        return 1, ("verl did not load the verl-offgrpo plugin, so its checks would not run here or in main_ppo; "
                   "`python -m verl_offgrpo check` shows why."), config
    try:  # before anything reads it: an unresolvable ${...} or a section set to null would stop the first reader
        check_readable(config)
    except UnreadableConfigError as err:  # no config to hand on: nothing can read it
        return 5, f"config error (unreadable): {err}", None
    if unset := unset_line(config):  # first: the checks would read it as unset, and pass or fail for the wrong reason
        return 3, unset, config
    try:
        with contextlib.redirect_stdout(sys.stderr), _plugin_info_on_stderr():  # stdout is the yaml
            verl_config.validate_config(
                config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
            )
    except RolloutConfigError as err:  # the wrap of a selecting config built verl's RolloutConfig
        return 4, f"config error ({SAID_AS}): {err.line}", config
    except OffGRPOConfigError as err:
        return 2, f"off_grpo config error: {err}", config
    except PatchError as err:  # the installed verl does not take the plugin's patches: not the config's fault
        return 1, f"verl-offgrpo cannot run here: {_one_line(err)} (`python -m verl_offgrpo check` lists them)", config
    except MissingMandatoryValue as err:  # verl read a ??? that missing_values leaves out (a switched-off section)
        return 3, incomplete([err.full_key]), config
    except Exception as err:  # verl's own validate_config rejects the config, or the plugin's checks have a bug
        if not _raised_in_verls_checks(err):
            raise  # a bug in the plugin's checks (a bare ValueError too, not a config error of verl's): its traceback
        lacks = _what_this_machine_lacks(err)
        if lacks:  # the plugin's checks ran first and passed; verl's could not finish here
            what, said = lacks
            # the test by which verl's wrapped validate_config ran the plugin's checks, or not
            passed = "; the plugin's checks, which run first, passed" if validate_config_patch.selects(config) else ""
            return NOT_CHECKABLE_HERE, (f"not checked here: verl's validate_config needs {what} for this config "
                                        f"({type(said).__name__}: {_one_line(said)}){passed}. Check it where the job "
                                        "will run."), config
        if isinstance(err, (AssertionError, ValueError, HydraException)):  # verl's checks of the config
            # verl's dataclass checks reach here wrapped in hydra's InstantiationException: say the cause
            cause = err.__cause__ if isinstance(err, HydraException) and err.__cause__ is not None else err
            said = _naming_the_path_key(config, _one_line(cause) or type(cause).__name__)
            return 4, f"config error (verl's validate_config): {said}", config
        # anything else verl's checks raise (a key its branch needs is not in the config, a model path, ...)
        said = _naming_the_path_key(config, f"{type(err).__name__}: {_one_line(err)}")
        return 4, f"config error (verl's validate_config): {said}", config
    # a selecting config's wrap built it already (and would have raised): only plain verl's is built here
    worker_error = None if validate_config_patch.selects(config) else rollout_config_error(config)
    if worker_error:  # main_ppo would pass its driver checks, start Ray and the workers, then stop on it
        return 4, f"config error ({SAID_AS}): {worker_error}", config
    if lacking := transfer_queue_missing(config):  # verl imports it only inside Ray: the job would stop there
        return 1, f"verl-offgrpo cannot run here: {lacking}", config
    return 0, None, config


def dry_run(overrides: list[str], path_hints: dict[str, str] | None = None, config_path: str | None = None,
            config_name: str | None = None) -> int:
    """Compose (the shipped yaml, or ``config_path``/``config_name`` as main_ppo's ``--config-path``/``--config-name``)
    and validate exactly as main_ppo's driver does (:func:`validate`), without Ray or a GPU, and
    print the config; then note, on stderr, the data/model paths that do not exist here
    (:func:`~verl_offgrpo.cli.paths.local_path_notes`, with ``path_hints``; exit code unchanged).

    Exit 3 if a mandatory value (``???``, e.g. ``rollout.name``) is still unset, said before any check runs;
    2 for a config the plugin rejects, 4 for a config hydra cannot compose (a typo in a key, bad override
    syntax) or verl's own ``validate_config`` rejects (any exception it raises), 5 for a value that cannot be read
    (a ``${...}`` that does not resolve, a section set to null); one line each, no traceback.
    Exit 1 if verl did not load the plugin (``VERL_USE_EXTERNAL_PLUGINS`` leaves it out, the package is not
    pip-installed, or its import failed, which verl logs only at DEBUG): verl's own ``validate_config`` would
    then pass without the off_grpo checks, and main_ppo would not know them; also 1 if the installed verl does
    not take the plugin's patches, or if a valid config on the V1 trainer lacks the TransferQueue package here.
    """
    from omegaconf import OmegaConf

    with _plugin_warnings() as warnings:
        code, error, config = validate(overrides, config_path, config_name)
    if code:
        print(error, file=sys.stderr)
        return code
    print(OmegaConf.to_yaml(config))
    from verl_offgrpo.patches import DISABLE_ENV, disabled

    from verl_offgrpo.patches.selection import config_selects

    verdict = (f"# composed and validated: verl's validate_config passed (verl-offgrpo turned off: {DISABLE_ENV}="
               f"{os.environ.get(DISABLE_ENV)})" if disabled() else
               "# composed and validated: verl's validate_config + off_grpo checks passed" if config_selects(config) else
               "# composed and validated: verl's validate_config passed (the config selects no part of verl-offgrpo: "
               "plain verl, its checks do not apply)")
    if warnings:  # said again under the yaml, where the eye lands, not only above it
        verdict += f" with {len(warnings)} warning{'s' if len(warnings) > 1 else ''}:"
    print(verdict, file=sys.stderr)
    for warning in warnings:
        print(f"#   [WARNING] {warning}", file=sys.stderr)
    for note in local_path_notes(config, path_hints):
        print(note, file=sys.stderr)
    return 0
