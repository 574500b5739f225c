"""The mandatory values a composed config still leaves unset (``???``, or null where verl needs a value), and the
one line that names them.

verl 0.9.1's ``validate_config`` does not look for them (``actor_rollout_ref.rollout.name=???`` and
``actor_rollout_ref.model.path=null`` pass it), so a job fails where it first reads one (omegaconf's
``MissingMandatoryValue``; for the model path a TypeError, which hydra's instantiate wraps), after Ray has
started; the plugin's checks would read one as unset. ``compose`` says them first (exit 3), and the
``validate_config`` wrap refuses a selecting config that has one."""

from __future__ import annotations


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

    return sorted(key for key in _missing_keys(config) if not switched_off(key))


def _missing_keys(config) -> list[str]:
    """omegaconf's ``OmegaConf.missing_keys`` (dotted keys, ``[i]`` for list items) without resolving
    interpolations: one that reaches a ``???`` raised there, where the ``???`` it reaches is named here."""
    from .values import raw_nodes

    return [path for path, _, _, node in raw_nodes(config) if node._is_missing()]


#: what the one line about a ``???`` value suggests setting it to (else ``...``): the plugin runs vLLM only
EXAMPLE_VALUES = {"actor_rollout_ref.rollout.name": "vllm"}


def incomplete(missing: list[str]) -> str:
    """The one line that names the mandatory values still ``???`` in a composed config. main_ppo cannot run
    with one: verl's ``validate_config`` does not look for them (``actor_rollout_ref.rollout.name=???`` passes
    it), so the job fails where it first reads the value (omegaconf's ``MissingMandatoryValue``), after Ray has
    started."""
    example = f"{missing[0]}={EXAMPLE_VALUES.get(missing[0], '...')}"
    if len(missing) == 1:
        what, how = f"the mandatory value {missing[0]} is", "set it"
    else:
        what, how = f"the mandatory values {', '.join(missing)} are", "set each"
    return (f"incomplete config: {what} still ???; {how} as an override, e.g. {example} (verl's own checks pass "
            "a ???, so main_ppo would start Ray, then fail on the first ??? it reads)")


#: the values every job reads at start-up that verl's yaml gives and a null override takes away, with what to set:
#: verl 0.9.1 builds ``HFModelConfig(path=...)`` and both datasets (``create_rl_dataset``) in its TaskRunner, a Ray
#: actor, and a null fails there (a TypeError on the path; ``copy_to_local(None)``), after Ray started
NOT_NULL = {
    "actor_rollout_ref.model.path": "a local model directory or a hub id",
    "data.train_files": "your training data (a parquet or jsonl file, or a list of them)",
    "data.val_files": "your validation data (verl builds it at start-up whether or not the job validates)",
}


def null_values(config) -> list[str]:
    """The keys of :data:`NOT_NULL` that ``config`` sets to null, among those verl reads
    (:func:`.tilde_path_checks.keys_verl_reads`: not the data files where a dataset class of the user's own,
    ``data.custom_cls.path``, takes them and may read a null its way)."""
    from omegaconf import OmegaConf

    from .tilde_path_checks import keys_verl_reads

    unset, read = object(), keys_verl_reads(config)
    return [key for key in NOT_NULL
            if key in read and OmegaConf.select(config, key, default=unset, throw_on_missing=False) is None]


def unset_line(config) -> str | None:
    """The one line for the values ``config`` leaves unset, or None: the ``???`` first (:func:`incomplete`: the checks
    would read one as unset), else the nulls verl needs a value for (:func:`nulled`)."""
    if missing := missing_values(config):
        return incomplete(missing)
    if nulls := null_values(config):
        return nulled(nulls)
    return None


def nulled(keys: list[str]) -> str:
    """The one line that names the values of :data:`NOT_NULL` set to null, and what to set each to."""
    what = "; ".join(f"{key} is null: set it to {NOT_NULL[key]}" for key in keys)
    return (f"incomplete config: {what} (verl's own checks pass a null there, so main_ppo would start Ray, then fail "
            "where it reads it)")
