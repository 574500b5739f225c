"""``python -m verl_offgrpo``: self-check, the shipped config's location, a dry composition.

    python -m verl_offgrpo check                 # is the plugin installed and registered in verl?
    python -m verl_offgrpo config-dir            # directory of off_grpo_trainer.yaml (for --config-path)
    python -m verl_offgrpo compose [overrides]   # compose + validate the full training config, print it
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback

CONFIG_NAME = "off_grpo_trainer"


def config_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "config")


def check() -> int:
    """Import verl (which loads the ``verl.plugins`` entry points) and report what got registered."""
    from importlib.metadata import entry_points

    from verl_offgrpo import ESTIMATOR_NAME, LOSS_NAME, TRAINER_MODE, __version__

    problems: list[str] = []
    eps = [ep for ep in entry_points(group="verl.plugins") if ep.value.startswith("verl_offgrpo")]
    if not eps:
        problems.append("no 'verl.plugins' entry point for verl_offgrpo: is the package pip-installed?")
    import verl
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is None:
        problems.append(f"advantage estimator {ESTIMATOR_NAME!r} is not registered")
    if LOSS_NAME not in core_algos.POLICY_LOSS_REGISTRY:
        problems.append(f"policy loss {LOSS_NAME!r} is not registered")
    import verl.utils.config as verl_config

    if not getattr(verl_config.validate_config, "__off_grpo_wrapped__", False):
        problems.append("verl.utils.config.validate_config does not run the off_grpo checks")
    trainer_mode = "skipped (TransferQueue not installed: V1 trainer unavailable)"
    if importlib.util.find_spec("transfer_queue") is not None:
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

        trainer_mode = "registered" if TRAINER_MODE in TRAINER_REGISTRY else "MISSING"
        if TRAINER_MODE not in TRAINER_REGISTRY:
            problems.append(f"V1 trainer mode {TRAINER_MODE!r} is not registered")
    transfer_socket = _transfer_socket_state()
    if transfer_socket is None:
        problems.append("verl's weight-transfer socket would not be made per-cluster (no import hook installed)")
    empty_update = _empty_update_state()
    if empty_update is None:
        problems.append("verl's engines would step the optimizer on mini-batches without loss tokens (no hook)")
    if problems:
        print("verl-offgrpo check FAILED:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        print("Importing verl_offgrpo.plugin directly to show the error verl hides:", file=sys.stderr)
        try:
            importlib.import_module("verl_offgrpo.plugin")
        except Exception:  # noqa: BLE001 - the point is to show it
            traceback.print_exc()
        return 1
    print(f"verl-offgrpo {__version__} OK with verl {verl.__version__}")
    print(f"  entry point: {eps[0].name} = {eps[0].value}")
    print(f"  advantage estimator: {ESTIMATOR_NAME}   policy loss: {LOSS_NAME}")
    print(f"  V1 trainer mode {TRAINER_MODE}: {trainer_mode}")
    print(f"  weight-transfer socket: one per Ray cluster ({transfer_socket})")
    print(f"  mini-batch without loss tokens: no optimizer step ({empty_update})")
    print(f"  config: {os.path.join(config_dir(), CONFIG_NAME + '.yaml')}")
    return 0


def _hook_state(module_name: str, is_applied) -> str | None:
    """Whether the plugin's patch of ``module_name`` is in this process: "applied", "applied when
    <module> is imported" (its post-import hook waits, :mod:`verl_offgrpo.post_import`), or None."""
    from verl_offgrpo.post_import import installed_hook

    module = sys.modules.get(module_name)
    if module is not None:
        return "applied" if is_applied(module) else None
    return f"applied when {module_name} is imported" if installed_hook(module_name) else None


def _transfer_socket_state() -> str | None:
    """verl's weight-transfer socket gets a per-cluster name (:mod:`verl_offgrpo.sync.ipc_socket`)."""
    from verl_offgrpo.sync import WEIGHT_TRANSFER_MODULE
    from verl_offgrpo.sync.ipc_socket import applied

    return _hook_state(WEIGHT_TRANSFER_MODULE, applied)


def _empty_update_state() -> str | None:
    """verl's engines skip the optimizer step of a mini-batch without loss tokens (:mod:`.empty_update`)."""
    from verl_offgrpo.empty_update import BASE_ENGINE_MODULE, applied

    return _hook_state(BASE_ENGINE_MODULE, applied)


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


def dry_run(overrides: list[str]) -> int:
    """Compose and validate exactly as main_ppo's driver does, without Ray or a GPU.

    Exit 2 for a config the plugin rejects, 3 if a mandatory value (``???``, e.g. ``rollout.name``) is
    still unset. Exit 1 if verl did not load the plugin (``VERL_USE_EXTERNAL_PLUGINS`` leaves it out, the package is
    not pip-installed, or its import failed, which verl logs only at DEBUG): verl's own
    ``validate_config`` would then pass without the off_grpo checks, and main_ppo would not know them.
    """
    import verl  # noqa: F401  (loads the plugin)
    import verl.utils.config as verl_config
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from verl_offgrpo.config import OffGRPOConfigError

    validate_config = verl_config.validate_config
    if not getattr(validate_config, "__off_grpo_wrapped__", False):
        print("verl did not load the verl-offgrpo plugin, so its checks would not run here or in main_ppo; "
              "`python -m verl_offgrpo check` shows why.", file=sys.stderr)
        return 1
    config = compose(overrides)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # verl prints its progress; stdout is the yaml
            validate_config(
                config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
            )
    except OffGRPOConfigError as err:
        print(f"off_grpo config error: {err}", file=sys.stderr)
        return 2
    except MissingMandatoryValue:  # verl read a ??? value: said below
        if not missing_values(config):
            raise
    missing = missing_values(config)
    if missing:
        print(f"incomplete config: main_ppo needs these mandatory values, still ??? here: {', '.join(missing)} "
              "(e.g. actor_rollout_ref.rollout.name=vllm)", file=sys.stderr)
        return 3
    print(OmegaConf.to_yaml(config))
    print("# composed and validated: verl's validate_config + off_grpo checks passed", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_offgrpo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="verify the plugin is installed and registered in verl")
    sub.add_parser("config-dir", help="print the directory of the shipped yaml")
    p_compose = sub.add_parser("compose", help="compose + validate the training config (no GPU), print it")
    p_compose.add_argument("overrides", nargs="*", help="hydra overrides, as for main_ppo")
    args = parser.parse_args(argv)
    if args.command == "check":
        return check()
    if args.command == "config-dir":
        print(config_dir())
        return 0
    return dry_run(args.overrides)


if __name__ == "__main__":
    sys.exit(main())
