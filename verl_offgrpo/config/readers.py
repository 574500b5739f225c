"""Small readers the start-up checks share: a check's knobs (given, or read off the config), which trainer
and mode the config runs, whether the actor trains LoRA adapters, a number or a flag of verl's config (one that is
not a number, or not true or false, is the plugin's one-line error, never a bare ``ValueError`` nor a reading
verl does not share), the local parquet files a data key names. Read only; each check module decides."""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Any, Iterator

from .off_grpo import OffGRPOConfig
from .values import OffGRPOConfigError, quoted_number_error, written_value
from .values import config_value as _get
from .values import is_int as _is_int
from .values import is_number as _is_number


def uses_lora(config: Any) -> bool:
    """Whether the actor trains LoRA adapters: ``model.lora.rank`` (or the older ``lora_rank``) > 0, or an
    adapter path."""
    model = "actor_rollout_ref.model"
    rank = integer_at(config, f"{model}.lora.rank", 0)  # the default also stands for null and ???
    if rank <= 0:
        rank = integer_at(config, f"{model}.lora_rank", 0)
    return rank > 0 or _get(config, f"{model}.lora_adapter_path") is not None


def knobs_of(config: Any, knobs: OffGRPOConfig | None, error: type[OffGRPOConfigError] = OffGRPOConfigError) -> OffGRPOConfig:
    """``knobs``, or the config's own, with a knob error raised as ``error`` (the caller's kind)."""
    if knobs is not None:
        return knobs
    try:
        return OffGRPOConfig.from_algorithm(_get(config, "algorithm"))
    except OffGRPOConfigError as err:
        if type(err) is error:
            raise
        raise error(str(err)) from None


def uses_v1(config: Any) -> bool:
    """The V1 trainer (``trainer.use_v1``, verl's default true) rather than v0 (:func:`flag_at`: main_ppo runs v0
    for a null, which the default would read as V1)."""
    return flag_at(config, "trainer.use_v1", True)


def v1_mode(config: Any) -> Any:
    """The V1 trainer's mode (``trainer.v1.trainer_mode``, verl's default "sync")."""
    return _get(config, "trainer.v1.trainer_mode", "sync")


def as_number(value: Any, name: str, kind: str = "a number", parses_strings: bool = False) -> Any:
    """``value`` (the config's ``name``) as a number: an int or float as it is; None stays None. A string that
    reads as a number is the "drop the quotes" error (:func:`.values.quoted_number_error`): verl builds its actor
    and rollout configs with hydra's ``instantiate``, which keeps a quoted ``'0.3'`` a string for the workers to
    fail on; only a field that verl itself parses from a string (``parses_strings``: ``rollout_is_threshold``,
    whose yaml value is ``inf``) reads it as a float. Anything else (a word, a bool, a list) is an
    :class:`OffGRPOConfigError` naming ``name`` and the value, which must be ``kind``."""
    return _coerced(value, name, kind, _is_number, float, parses_strings)


def flag_at(config: Any, key: str, default: bool, why: str = "") -> bool:
    """The true or false at the dotted ``key`` of ``config`` (``default`` where it is absent). verl reads its flags
    as ``if value:``, so a quoted ``'false'`` is true there and a null false, whatever the default: anything but
    a bool (an int aside, read alike by both) is an :class:`OffGRPOConfigError` naming the key and the value
    (then ``why``, the clause that says who reads it)."""
    value = written_value(config, key, default)
    if isinstance(value, (bool, int)):
        return bool(value)
    quoted = isinstance(value, str) and value.strip().lower() in ("true", "false")
    raise OffGRPOConfigError(
        f"{key} must be true or false (got {value!r}"
        + (", a quoted string, which verl reads as true: write it without quotes" if quoted else "") + f"){why}."
    )


def integer_at(config: Any, key: str, default: Any = None) -> Any:
    """The integer at the dotted ``key`` of ``config`` (``default`` when absent), as :func:`as_integer` reads it."""
    return as_integer(_get(config, key, default), key)


def as_integer(value: Any, name: str) -> Any:
    """``value`` (the config's ``name``) as an integer: an int as it is, None stays None; a quoted one is the
    "drop the quotes" error, anything else an :class:`OffGRPOConfigError` naming ``name`` and the value."""
    return _coerced(value, name, "an integer", _is_int, int, False)


def _coerced(value: Any, name: str, kind: str, accepts, parse, parses_strings: bool) -> Any:
    """``value`` as it is where ``accepts`` it (or None); a string ``parse`` reads where ``parses_strings``, else
    the quoted-number error; else the one-line error."""
    if value is None or accepts(value):
        return value
    if isinstance(value, str):
        try:
            parsed = parse(value)
        except ValueError:
            parsed = None
        if parsed is not None:
            if parses_strings:
                return parsed
            raise quoted_number_error(name, value, kind)
    raise OffGRPOConfigError(f"{name} must be {kind} (got {value!r}).")


def guards_verls_advantage(config: Any) -> bool:
    """Whether the served-policy guard reads r' = π_k/α of a batch whose advantage is verl's (an estimator not the
    plugin's): under the plugin's loss, whose start-up checks make verl compute r' (``rollout_is``); the guard reads
    it as the plugin's estimators do (``rollout_is_weights``, or with ``allow_truncated_rprime`` the log-probs:
    :func:`verl_offgrpo.bound_monitor.rprime_fields`). Any other loss leaves verl's weights to verl, unguarded."""
    from verl_offgrpo import LOSS_NAMES

    return _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode") in LOSS_NAMES


#: where verl 0.9.1 reads the vLLM engine's extra arguments (``vLLMHttpServer.launch_server``)
ENGINE_KWARGS = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def engine_kwarg(config: Any, argument: str) -> tuple[str, Any] | None:
    """(the key as written, its value) of vLLM's engine argument ``argument`` in :data:`ENGINE_KWARGS`, or None where
    it is not set non-null there, or the rollout is not vLLM's. verl 0.9.1 drops nulls, then starts vLLM with
    ``{..., "logprobs_mode": rollout.logprobs_mode, ..., **engine_kwargs}`` as command-line arguments; vLLM's parser
    reads ``a_b`` and ``a-b`` as one argument and keeps the last, so a key here beats verl's own, and the hyphenated
    spelling is read first (were both written, the order of the user's keys decides)."""
    if written_value(config, "actor_rollout_ref.rollout.name", "vllm") != "vllm":
        return None
    for spelled in dict.fromkeys((argument.replace("_", "-"), argument)):
        value = written_value(config, f"{ENGINE_KWARGS}.{spelled}")
        if value is not None:
            return f"{ENGINE_KWARGS}.{spelled}", value
    return None


def vllm_quantization(config: Any) -> Any:
    """The quantization vLLM starts with, None for none: :func:`engine_kwarg` ``quantization`` where set (verl's
    rollout knob takes only fp8/torchao/ascend, so other methods come that way), "qat" where
    ``rollout.qat.enable`` (verl then sets modelopt or compressed-tensors from the QAT config, whatever
    ``rollout.quantization`` says), a ``quantization_config`` in the engine's ``hf_overrides``, else
    ``rollout.quantization``."""
    rollout = "actor_rollout_ref.rollout"
    written = engine_kwarg(config, "quantization")
    if written is not None:
        return written[1]
    if bool(_get(config, f"{rollout}.qat.enable", False)):
        return "qat"
    overrides = engine_kwarg(config, "hf_overrides")
    if overrides is not None and _get(overrides[1], "quantization_config") is not None:
        return "hf_overrides.quantization_config"
    return _get(config, f"{rollout}.quantization")


def rollout_data_parallel_size(config: Any) -> int:
    """vLLM's data-parallel ranks in one rollout replica (``actor_rollout_ref.rollout.data_parallel_size``; absent,
    null or 0: 1), read by :func:`as_integer`: a word, a float or a list is the plugin's one-line error (a quoted
    number: drop the quotes), never read as some other count."""
    key = "actor_rollout_ref.rollout.data_parallel_size"
    return as_integer(_get(config, key, 1), key) or 1


@dataclasses.dataclass(frozen=True)
class RolloutLayout:
    """The colocated rollout's layout: verl builds ⌊GPUs / (TP·DP·PP)⌋ vLLM replicas on the trainer's GPUs
    (``n_gpus_per_node`` × ``nnodes``), and each data-parallel rank of a replica is one engine with its own
    ``max_num_seqs``: engines = ⌊GPUs / (TP·DP·PP)⌋ · DP."""

    tensor: int
    data: int
    pipeline: int
    per_node: int
    nodes: int

    @property
    def gpus(self) -> int:
        return self.per_node * self.nodes

    @property
    def replica_gpus(self) -> int:
        return self.tensor * self.data * self.pipeline

    @property
    def engines(self) -> int:
        return self.gpus // self.replica_gpus * self.data


def rollout_layout(config: Any) -> RolloutLayout | None:
    """The config's :class:`RolloutLayout` (``actor_rollout_ref.rollout``'s tensor, data and pipeline parallel sizes,
    ``trainer.n_gpus_per_node`` and ``nnodes``; an absent one is 1), or None where one is null, a word or below 1:
    verl multiplies them as they are, and :func:`.verl_counts.check_verl_counts` or verl names such a value."""
    rollout = "actor_rollout_ref.rollout"
    keys = (f"{rollout}.tensor_model_parallel_size", f"{rollout}.data_parallel_size",
            f"{rollout}.pipeline_model_parallel_size", "trainer.n_gpus_per_node", "trainer.nnodes")
    sizes = [written_value(config, key, 1) for key in keys]
    if not all(_is_int(size) and size >= 1 for size in sizes):
        return None
    return RolloutLayout(*sizes)


def samples_per_step(config: Any) -> int | None:
    """B·n: ``data.train_batch_size`` × ``rollout.n`` (absent: 1), or None where either is not a positive integer."""
    batch, n = _get(config, "data.train_batch_size"), _get(config, "actor_rollout_ref.rollout.n", 1)
    return batch * n if all(_is_int(x) and x > 0 for x in (batch, n)) else None


def lag0_batch_reaches_every_engine(config: Any) -> bool:
    """Whether a step's B·n samples (:func:`samples_per_step`) are at least the colocated rollout's vLLM engines
    (:attr:`RolloutLayout.engines`): a window's lag-0 batch can then have reached every engine, which its lagged
    batches' warning-only limit rests on. True where a count cannot be read. verl's own check makes B·n a multiple
    of the GPUs with FSDP's static batch sizes, so this is False only with dynamic ones or Megatron."""
    layout, samples = rollout_layout(config), samples_per_step(config)
    return layout is None or samples is None or samples >= layout.engines


def one_optimizer_step_per_batch(config: Any) -> bool:
    """i = 1 and one mini-batch per batch (verl counts both sizes in prompts): θ = π_k at the only step."""
    epochs = _get(config, "actor_rollout_ref.actor.ppo_epochs", 1)
    mini, batch = _get(config, "actor_rollout_ref.actor.ppo_mini_batch_size"), _get(config, "data.train_batch_size")
    return epochs == 1 and mini is not None and mini == batch


def validates(config: Any) -> bool:
    """Whether the job runs a validation (``trainer.val_before_train``, verl's default true, or a positive
    ``trainer.test_freq``), so that verl reads the rows of ``data.val_files``."""
    freq = _get(config, "trainer.test_freq", -1)
    return bool(_get(config, "trainer.val_before_train", True)) or (_is_int(freq) and freq > 0)


def path_list(value: Any) -> list[Any]:
    """A path key's value as a list: a path, or a list of them (what verl's data keys take); [] for none."""
    return [value] if isinstance(value, str) else list(value) if hasattr(value, "__iter__") and value else []


def path_exists(path: str) -> bool:
    """Whether ``path`` is there as written (a glob: whether it matches, as ``datasets`` expands one)."""
    return bool(glob.glob(path, recursive=True)) if glob.has_magic(path) else os.path.exists(path)


def expanded(path: str) -> list[str]:
    """``path`` with its glob expanded, as ``datasets`` expands one (sorted; ``**`` at any depth); a plain path as it is."""
    return sorted(glob.glob(path, recursive=True)) if glob.has_magic(path) else [path]


def local_parquet_files(value: Any) -> Iterator[str]:
    """The local parquet files of a data key (a path or a list of them; globs expanded, as ``datasets`` does; ``~`` is
    not, and such a path is left to verl)."""
    for path in path_list(value):
        if not isinstance(path, str):  # hdfs://… is no local file either
            continue
        for file in expanded(path):
            if os.path.isfile(file) and file.endswith(".parquet"):
                yield file
