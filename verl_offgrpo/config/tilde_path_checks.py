"""Paths verl reads as written: a ``~`` in a data file or model path is not the home directory.

verl 0.9.1 passes each data file (``data.train_files`` / ``data.val_files``: both datasets are created at start-up,
``create_rl_dataset``) and each model path it loads (the actor's ``path``, ``tokenizer_path``, ``hf_config_path`` and
LoRA adapter: ``HFModelConfig``, ``PeftModel.from_pretrained``; a critic's and a reward model's where they run)
through ``verl.utils.fs.copy_to_local`` to ``datasets``, transformers or peft; none of them expands ``~``. So a
``~/data/gsm8k/train.parquet`` written in a yaml or as a quoted override (hydra's grammar takes no bare ``~`` in a
value) looks for ``./~/data/gsm8k/train.parquet`` and fails with ``FileNotFoundError`` after Ray started, and a
model at ``~/models/x`` is taken for a hub id and refused. Here, in a selecting job's driver checks, such a path that
is there only with ``~`` expanded is refused in one line that names the path to write; a path missing either way is
left to verl, as every missing file is (``compose`` notes it), and so are the data files of a dataset class of the
user's own (``data.custom_cls.path``), which may read paths its way.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from .readers import path_exists, path_list
from .values import OffGRPOConfigError
from .values import config_value as _get

#: the keys verl creates a dataset from at start-up (train and validation, whether or not the job validates)
DATA_KEYS = ("data.train_files", "data.val_files")
#: the actor model's paths verl reads at start-up (``HFModelConfig``; the LoRA adapter: the FSDP engine's
#: ``PeftModel.from_pretrained``)
MODEL_KEYS = tuple(f"actor_rollout_ref.model.{name}" for name in
                   ("path", "tokenizer_path", "hf_config_path", "lora_adapter_path", "lora.adapter_path"))
#: the critic's model paths, read where verl runs a critic (``need_critic``: ``critic.enable``, else ``gae``)
CRITIC_KEYS = ("critic.model.path", "critic.model.tokenizer_path", "critic.model.hf_config_path")
#: the reward model's path, read where ``reward.reward_model.enable``
REWARD_MODEL_KEYS = ("reward.reward_model.model_path",)


def keys_verl_reads(config: Any) -> tuple[str, ...]:
    """The path keys of ``config`` that verl 0.9.1 reads at start-up: the data files (unless a dataset class of the
    user's own reads them), the actor's model paths, the critic's and the reward model's where they run."""
    keys = MODEL_KEYS if _get(config, "data.custom_cls.path") else DATA_KEYS + MODEL_KEYS
    critic = _get(config, "critic.enable")
    if critic or (critic is None and _get(config, "algorithm.adv_estimator") == "gae"):
        keys += CRITIC_KEYS
    if _get(config, "reward.reward_model.enable", False):
        keys += REWARD_MODEL_KEYS
    return keys


def unexpanded_home_paths(value: Any) -> Iterator[str]:
    """The paths of a key's value (a path or a list) that start with ``~`` and are there only with ``~`` expanded."""
    for path in path_list(value):
        if isinstance(path, str) and path.startswith("~") and path_exists(os.path.expanduser(path)) \
                and not path_exists(path):
            yield path


def check_paths_verl_reads(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a path verl reads (:func:`keys_verl_reads`) that is there only with ``~``
    expanded (:func:`unexpanded_home_paths`)."""
    for key in keys_verl_reads(config):
        for path in unexpanded_home_paths(_get(config, key)):
            raise OffGRPOConfigError(
                f"{key}={path}: verl does not expand ~ in paths (it would look for ./{path} and fail after Ray "
                f"started): write {os.path.expanduser(path)}"
                + (f" (or $HOME{path[1:]} in a shell script)." if path.startswith("~/") else ".")
            )


__all__ = ["CRITIC_KEYS", "DATA_KEYS", "MODEL_KEYS", "REWARD_MODEL_KEYS", "check_paths_verl_reads", "keys_verl_reads",
           "unexpanded_home_paths"]
