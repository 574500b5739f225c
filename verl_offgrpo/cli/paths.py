"""Where the shipped yaml lives, and the notes on the local paths of a composed config (data files, the model)
that do not exist on this machine."""

from __future__ import annotations

import os
import re

from verl_offgrpo.config.readers import path_exists
from verl_offgrpo.config.tilde_path_checks import DATA_KEYS, keys_verl_reads, unexpanded_home_paths

CONFIG_NAME = "off_grpo_trainer"


def config_dir() -> str:
    """The directory of the shipped ``off_grpo_trainer.yaml`` (for main_ppo's ``--config-path``)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config")


#: the config keys whose paths verl reads at start-up: data files (a string or a list) and the model
DATA_PATH_KEYS = DATA_KEYS
MODEL_PATH_KEY = "actor_rollout_ref.model.path"
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # hdfs://, s3://, gs://, ...: not checked here
_HUB_ID = re.compile(r"^[A-Za-z0-9_][\w.-]*(/[A-Za-z0-9_][\w.-]*)?$")  # "gpt2", "Qwen/Qwen2.5-0.5B-Instruct"


#: verl 0.9.1's data yaml, whose train/val files are a placeholder (``~/data/rlhf/gsm8k/...``) a user must replace
VERL_DATA_YAML = ("verl", "trainer/config/data/legacy_data.yaml")
#: what data_prep writes, for the placeholder's note (README "Use it with verl")
DATA_PREP = {"data.train_files": "train.parquet", "data.val_files": "test.parquet"}


def verls_placeholder_data() -> dict[str, str]:
    """``{key: path}`` of verl's own data yaml (:data:`VERL_DATA_YAML`) for :data:`DATA_PATH_KEYS`; empty if it
    cannot be read."""
    from importlib import resources

    from omegaconf import OmegaConf

    package, name = VERL_DATA_YAML
    try:
        data = OmegaConf.load(str(resources.files(package).joinpath(name)))
    except Exception:  # noqa: BLE001 - another verl: no placeholder note, the plain one stays
        return {}
    return {key: str(data.get(key.split(".", 1)[1])) for key in DATA_PATH_KEYS if data.get(key.split(".", 1)[1])}


def local_path_notes(config, hints: dict[str, str] | None = None) -> list[str]:
    """One ``note:`` line per local path of ``config`` that does not exist on this machine: the data files
    (``data.train_files``/``val_files``, a string or a list) and the model (``actor_rollout_ref.model.path``).

    Remote paths (``scheme://``) are not checked. verl passes a model path that is not ``hdfs://`` to
    transformers unchanged (``verl.utils.fs.copy_to_local``), which takes a name that is not a local directory
    as a Hugging Face hub id: such a model path is noted as that, not as missing. ``hints`` maps a path to
    what its note adds in parentheses (the recipes say which data_prep script makes their files); verl's own
    placeholder data paths (:func:`verls_placeholder_data`) are noted as that, with the data_prep command."""
    from omegaconf import OmegaConf

    hints = hints or {}
    notes = []
    placeholders = verls_placeholder_data()

    def paths(key):
        value = OmegaConf.select(config, key, default=None, throw_on_missing=False)
        if value is None:
            return []
        return [str(p) for p in value] if OmegaConf.is_list(value) or isinstance(value, (list, tuple)) else [str(value)]

    for key in DATA_PATH_KEYS:
        for path in paths(key):
            if _REMOTE.match(path) or path_exists(path):
                continue
            if any(unexpanded_home_paths(path)):  # verl reads ~ as written
                notes.append(f"note: {key}={path}: verl does not expand ~ in paths; the file is "
                             f"{os.path.expanduser(path)}: write that")
                continue
            hint = f" ({hints[path]})" if path in hints else ""
            if not hint and placeholders.get(key) == path:
                hint = (f" (verl's placeholder: set {key} to your data; in a checkout of the repository, `python "
                        f"data_prep/gsm8k.py --output-dir ~/data/gsm8k` writes $HOME/data/gsm8k/{DATA_PREP[key]})")
            notes.append(f"note: {key}={path} does not exist here{hint}")
    for key in (key for key in keys_verl_reads(config) if key not in DATA_KEYS):  # the data files': noted above
        for path in paths(key):
            if any(unexpanded_home_paths(path)):
                notes.append(f"note: {key}={path}: verl does not expand ~ in paths; the model is "
                             f"{os.path.expanduser(path)}: write that")
    for path in paths(MODEL_PATH_KEY):
        if _REMOTE.match(path) or os.path.isdir(path) or any(unexpanded_home_paths(path)):
            continue
        if _HUB_ID.match(path) and ".." not in path and not os.path.exists(path):
            notes.append(f"note: {MODEL_PATH_KEY}={path} is not a local directory; verl will try the Hugging Face "
                         "hub (transformers takes it as a hub id: the local HF cache, else a download)")
        else:
            notes.append(f"note: {MODEL_PATH_KEY}={path} does not exist here" if not os.path.exists(path)
                         else f"note: {MODEL_PATH_KEY}={path} is not a directory")
    return notes
