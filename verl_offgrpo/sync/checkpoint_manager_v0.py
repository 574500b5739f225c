"""The dotted path earlier versions documented for the v0 trainer's manager class; the class lives in
:mod:`verl_offgrpo.sync.lagged_manager` (it serves both trainers). Kept so that existing configs with
``checkpoint_manager_class=verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager`` still load."""

from .lagged_manager import LaggedCheckpointManager

__all__ = ["LaggedCheckpointManager"]
