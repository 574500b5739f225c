"""In-place copy of the actor's parameters into the reference model, shard by shard.

:func:`copy_params_into_` ``(dst_module, src_module)`` overwrites every parameter of ``dst`` (the
reference) with the matching parameter of ``src`` (the actor), in place: the destination tensors keep
their storage, device and dtype (``copy_`` casts, e.g. fp32 actor → bf16 reference, and moves, e.g.
GPU actor shard → CPU-offloaded reference shard). Nothing is gathered: each rank copies its own local
shard, so no collective runs and no full model is ever materialised. The two modules must therefore be
sharded identically; every mismatch raises :class:`RefResetError` before anything is written.

Three layouts, detected from the modules:

* **plain** ``nn.Module`` s (and non-FSDP DTensor-free models): parameters matched by name, shapes must be
  equal.
* **FSDP2** (``fully_shard``; verl ``strategy=fsdp2``): parameters are ``DTensor`` s with the original
  names; global shape, placements and device-mesh ranks must match, then ``dst.to_local().copy_(
  src.to_local())``. Unsharded (mid-forward) modules are resharded first (local, no communication).
  With ``CPUOffloadPolicy`` (verl's reference) the destination's local shards live on CPU and are
  written there.
* **FSDP1** (``FullyShardedDataParallel``; verl ``strategy=fsdp``): one ``FlatParameter`` per wrapped
  unit. Units are paired in traversal order; each pair must hold the same original parameters
  (``_fqns``, ``_shapes``) and each original parameter must cover the same index range of this rank's
  shard (``_shard_param_infos``). The copy writes the persistent local shard (``_local_shard``, which
  is also ``flat_param.data`` when resharded; a CPU tensor with ``CPUOffload(offload_params=True)``,
  verl's reference, or after verl's own param offload). When the two layouts agree exactly (same
  shard infos and shard numel, the usual case) the whole local shard is copied at once, else each
  original parameter's slice is copied. FSDP1 with ``use_orig_params=True`` aligns parameters by the
  compute dtype; if that makes the actor's and the reference's shard boundaries differ, the shard
  infos differ and this raises (mismatched sharding).

Buffers are not copied (verl's causal LMs have no trained buffers; rotary ``inv_freq`` is identical in
both models by construction).

The FSDP1 path reads private members of torch's FSDP1 (:data:`TORCH_INTERNALS`), written for torch 2.11;
the plugin does not replace any of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import nn


class RefResetError(RuntimeError):
    """The reference cannot be overwritten with the actor in place (mismatch or unsupported layout)."""


@dataclass
class CopyReport:
    path: str = "plain"
    tensors: int = 0
    numel: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    src_devices: list = field(default_factory=list)
    dst_devices: list = field(default_factory=list)
    dst_dtypes: list = field(default_factory=list)
    cast: bool = False
    max_abs_diff: float | None = None
    resharded: int = 0

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "tensors": self.tensors,
            "numel": self.numel,
            "bytes_written": self.bytes_written,
            "seconds": self.seconds,
            "src_devices": sorted(self.src_devices),
            "dst_devices": sorted(self.dst_devices),
            "dst_dtypes": sorted(self.dst_dtypes),
            "cast": self.cast,
            "resharded": self.resharded,
            "max_abs_diff": self.max_abs_diff,
        }


# ----------------------------------------------------------------------------- layout detection
def _fsdp1_cls():
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel
    except Exception:  # noqa: BLE001 - torch without distributed
        return None


def _fsdp2_cls():
    for mod, name in (("torch.distributed.fsdp", "FSDPModule"), ("torch.distributed._composable.fsdp", "FSDPModule")):
        try:
            return getattr(__import__(mod, fromlist=[name]), name)
        except Exception:  # noqa: BLE001
            continue
    return None


def _dtensor_cls():
    for mod in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            return getattr(__import__(mod, fromlist=["DTensor"]), "DTensor")
        except Exception:  # noqa: BLE001
            continue
    return None


def module_layout(module: nn.Module) -> str:
    """``"fsdp1"``, ``"fsdp2"`` or ``"plain"``."""
    fsdp1, fsdp2 = _fsdp1_cls(), _fsdp2_cls()
    if fsdp1 is not None and any(isinstance(m, fsdp1) for m in module.modules()):
        return "fsdp1"
    if fsdp2 is not None and any(isinstance(m, fsdp2) for m in module.modules()):
        return "fsdp2"
    return "plain"


# ----------------------------------------------------------------------------- helpers
def _names_check(dst_names: Iterable[str], src_names: Iterable[str], what: str) -> None:
    dst_names, src_names = list(dst_names), list(src_names)
    if dst_names == src_names:
        return
    missing = [n for n in dst_names if n not in set(src_names)]
    extra = [n for n in src_names if n not in set(dst_names)]
    raise RefResetError(
        f"verl-offgrpo ref reset: {what} differ between the reference and the actor "
        f"(in the reference only: {missing[:5]}{'…' if len(missing) > 5 else ''}; "
        f"in the actor only: {extra[:5]}{'…' if len(extra) > 5 else ''}"
        + ("; same names in a different order" if not missing and not extra else "")
        + ")."
    )


def _copy_tensor_(dst: torch.Tensor, src: torch.Tensor, report: CopyReport, verify: bool) -> None:
    if dst.shape != src.shape:
        raise AssertionError("caller checks shapes")  # pragma: no cover
    dst.copy_(src)
    report.tensors += 1
    report.numel += dst.numel()
    report.bytes_written += dst.numel() * dst.element_size()
    for seen, value in (
        (report.src_devices, str(src.device)),
        (report.dst_devices, str(dst.device)),
        (report.dst_dtypes, str(dst.dtype)),
    ):
        if value not in seen:
            seen.append(value)
    report.cast = report.cast or dst.dtype != src.dtype
    if verify and dst.numel():
        diff = (dst - src.to(device=dst.device, dtype=dst.dtype)).abs().max().item()
        report.max_abs_diff = max(report.max_abs_diff or 0.0, float(diff))
    elif verify and report.max_abs_diff is None:
        report.max_abs_diff = 0.0


# ----------------------------------------------------------------------------- plain / FSDP2
def _reshard_fsdp2(module: nn.Module) -> None:
    fsdp2 = _fsdp2_cls()
    for m in module.modules():
        if fsdp2 is not None and isinstance(m, fsdp2):
            m.reshard()


def _copy_named_(dst_module: nn.Module, src_module: nn.Module, report: CopyReport, verify: bool) -> None:
    dtensor = _dtensor_cls()
    if report.path == "fsdp2":
        # Registered parameters are the sharded DTensors only while resharded (FSDP2 keeps the root
        # unsharded after a forward); resharding is local and frees the unsharded copies, so the next
        # forward all-gathers the new shards.
        for mod in (dst_module, src_module):
            report.resharded += int(dtensor is not None and not all(isinstance(p, dtensor) for p in mod.parameters()))
            _reshard_fsdp2(mod)
    dst_params = dict(dst_module.named_parameters())
    src_params = dict(src_module.named_parameters())
    _names_check(dst_params, src_params, "parameter names")
    pairs = []
    for name, dst in dst_params.items():
        src = src_params[name]
        if dst.shape != src.shape:
            raise RefResetError(
                f"verl-offgrpo ref reset: parameter {name!r} has shape {tuple(dst.shape)} in the reference "
                f"and {tuple(src.shape)} in the actor."
            )
        d_is, s_is = (dtensor is not None and isinstance(dst, dtensor)), (dtensor is not None and isinstance(src, dtensor))
        if d_is != s_is:
            raise RefResetError(
                f"verl-offgrpo ref reset: parameter {name!r} is {'a DTensor' if d_is else 'a plain tensor'} in the "
                f"reference but {'a DTensor' if s_is else 'a plain tensor'} in the actor (mismatched sharding)."
            )
        if d_is:
            if tuple(dst.placements) != tuple(src.placements):
                raise RefResetError(
                    f"verl-offgrpo ref reset: parameter {name!r} placements differ (reference {dst.placements}, "
                    f"actor {src.placements}) (mismatched sharding)."
                )
            if dst.device_mesh.mesh.tolist() != src.device_mesh.mesh.tolist():
                raise RefResetError(
                    f"verl-offgrpo ref reset: parameter {name!r} lives on different device meshes (reference ranks "
                    f"{dst.device_mesh.mesh.tolist()}, actor {src.device_mesh.mesh.tolist()}) (mismatched sharding)."
                )
            dst_local, src_local = dst.to_local(), src.to_local()
            if dst_local.shape != src_local.shape:
                raise RefResetError(
                    f"verl-offgrpo ref reset: parameter {name!r} local shard shapes differ (reference "
                    f"{tuple(dst_local.shape)}, actor {tuple(src_local.shape)}) (mismatched sharding)."
                )
            pairs.append((dst_local, src_local))
        else:
            pairs.append((dst.data, src.data))
    for dst, src in pairs:
        _copy_tensor_(dst, src, report, verify)


# ----------------------------------------------------------------------------- FSDP1
#: torch's FSDP1 members the FSDP1 copy reads (torch 2.11; private, so a torch upgrade may move them)
TORCH_INTERNALS = (
    "torch.distributed.fsdp.FullyShardedDataParallel._handle",
    "torch.distributed.fsdp._flat_param.FlatParamHandle.{flat_param,uses_sharded_strategy,needs_unshard,reshard}",
    "torch.distributed.fsdp._flat_param.FlatParameter.{_fqns,_shapes,_shard_param_infos,_local_shard,_sharded_size}",
)


def _fsdp1_units(module: nn.Module):
    """``[(fqn of the FSDP unit, FlatParamHandle)]`` in traversal order."""
    fsdp1 = _fsdp1_cls()
    units = []
    for name, m in module.named_modules():
        if isinstance(m, fsdp1):
            handle = getattr(m, "_handle", None)
            if handle is not None:
                units.append((name, handle))
    return units


def _reshard_fsdp1(units) -> int:
    """Free every still-allocated unsharded flat parameter (local; no communication); return how many.

    FSDP1 does not free the *root* unit's unsharded parameter after a forward (it expects a backward to
    use it), and a later ``unshard`` of a unit whose unsharded storage is still allocated skips the
    all-gather (``FlatParamHandle.needs_unshard``). The reference only ever runs forwards, so without this
    its next forward would use the stale pre-reset root weights (embeddings, final norm, LM head with
    verl's per-decoder-layer wrapping). verl's ``EngineEvalModeCtx`` reshards the root only when
    ``fsdp_size > 1``. A unit that never ran a forward (FSDP1's lazy init not done: the reference at a resume's
    first sync) has no unsharded storage (torch's ``FlatParameter._full_param_padded``, which ``needs_unshard``
    reads) and nothing to free.
    """
    freed = 0
    for _, handle in units:
        gathered = hasattr(handle.flat_param, "_full_param_padded")
        if getattr(handle, "uses_sharded_strategy", False) and gathered and not handle.needs_unshard():
            handle.reshard(True)
            freed += 1
    return freed


def _flat_local_shard(handle, who: str, unit: str) -> torch.Tensor:
    flat = handle.flat_param
    local = getattr(flat, "_local_shard", None)  # set at FSDP lazy init; shares storage with .data when resharded
    if local is None:
        local = flat.data
    sharded_size = getattr(flat, "_sharded_size", None)
    if sharded_size is not None and local.numel() != torch.Size(sharded_size).numel():
        raise RefResetError(
            f"verl-offgrpo ref reset: FSDP unit {unit!r} of the {who} is not in its sharded state "
            f"({local.numel()} elements, shard has {torch.Size(sharded_size).numel()})."
        )
    return local


def _copy_fsdp1_(dst_module: nn.Module, src_module: nn.Module, report: CopyReport, verify: bool) -> None:
    dst_units, src_units = _fsdp1_units(dst_module), _fsdp1_units(src_module)
    _names_check([n for n, _ in dst_units], [n for n, _ in src_units], "FSDP-wrapped units (wrap policy)")
    report.resharded = _reshard_fsdp1(dst_units) + _reshard_fsdp1(src_units)
    plans = []
    for (unit, dh), (_, sh) in zip(dst_units, src_units):
        dflat, sflat = dh.flat_param, sh.flat_param
        _names_check(list(dflat._fqns), list(sflat._fqns), f"parameters of FSDP unit {unit!r}")
        if [tuple(s) for s in dflat._shapes] != [tuple(s) for s in sflat._shapes]:
            raise RefResetError(f"verl-offgrpo ref reset: parameter shapes of FSDP unit {unit!r} differ.")
        d_local = _flat_local_shard(dh, "reference", unit)
        s_local = _flat_local_shard(sh, "actor", unit)
        d_infos, s_infos = list(dflat._shard_param_infos), list(sflat._shard_param_infos)
        if d_infos == s_infos and d_local.numel() == s_local.numel():
            plans.append([(d_local, s_local)])  # identical layout: the whole local shard at once
            continue
        slices = []
        for fqn, di, si in zip(dflat._fqns, d_infos, s_infos):
            same = (
                di.in_shard == si.in_shard
                and di.numel_in_shard == si.numel_in_shard
                and di.intra_param_start_idx == si.intra_param_start_idx
                and di.intra_param_end_idx == si.intra_param_end_idx
            )
            if not same:
                raise RefResetError(
                    f"verl-offgrpo ref reset: parameter {unit + '.' if unit else ''}{fqn} covers different parts of "
                    f"this rank's shard in the reference ({di}) and the actor ({si}) (mismatched sharding: "
                    "fsdp_size, wrap_policy, use_orig_params or mixed-precision dtype differ between "
                    "actor_rollout_ref.actor.fsdp_config and actor_rollout_ref.ref.fsdp_config)."
                )
            if di.in_shard and di.numel_in_shard:
                slices.append(
                    (
                        d_local.narrow(0, di.offset_in_shard, di.numel_in_shard),
                        s_local.narrow(0, si.offset_in_shard, si.numel_in_shard),
                    )
                )
        plans.append(slices)
    for slices in plans:
        for dst, src in slices:
            _copy_tensor_(dst, src, report, verify)


# ----------------------------------------------------------------------------- entry
@torch.no_grad()
def copy_params_into_(dst_module: nn.Module, src_module: nn.Module, *, verify: bool = False) -> dict:
    """Overwrite ``dst_module``'s parameters with ``src_module``'s, in place; return a report dict.

    ``dst_module`` (the reference) keeps its storage, device (e.g. CPU offload) and dtype; values are
    cast with ``copy_``. All checks (names, shapes, sharding) run before the first write. ``verify``
    re-reads every written tensor and reports ``max_abs_diff`` against the cast source (0.0 expected).
    """
    start = time.perf_counter()
    if dst_module is src_module:
        raise RefResetError("verl-offgrpo ref reset: the reference and the actor are the same module.")
    d_layout, s_layout = module_layout(dst_module), module_layout(src_module)
    if d_layout != s_layout:
        raise RefResetError(
            f"verl-offgrpo ref reset: the reference is wrapped as {d_layout} but the actor as {s_layout} "
            "(mismatched sharding)."
        )
    report = CopyReport(path=d_layout)
    if d_layout == "fsdp1":
        _copy_fsdp1_(dst_module, src_module, report, verify)
    else:
        _copy_named_(dst_module, src_module, report, verify)
    for dev in report.dst_devices + report.src_devices:
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
            break
    report.seconds = time.perf_counter() - start
    return report.as_dict()
