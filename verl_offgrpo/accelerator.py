"""The worker's accelerator: verl's torch device module, or None on a machine without one.

verl picks the module (``torch.cuda`` on NVIDIA GPUs, ``torch.npu`` on Ascend) in
``verl.utils.device.get_torch_device``; the plugin's worker-side code (the skipped sync's cache
handling, the π_ref reset) asks it here, so that a CPU process (tests, a driver) gets None and skips
``synchronize`` / ``mem_get_info`` / ``empty_cache`` instead of failing on them.
"""

from __future__ import annotations

from typing import Any


def available_device() -> Any | None:
    """verl's torch device module when a device is available, else None."""
    try:
        from verl.utils.device import get_torch_device
    except ImportError:  # pragma: no cover - verl is always present in workers
        return None
    device = get_torch_device()
    return device if getattr(device, "is_available", lambda: False)() else None
