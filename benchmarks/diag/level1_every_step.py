"""Diagnosis only: v = 1 (a real sync every step) with vLLM sleeping at level 1, as a lagged run does.

A v = 1 run sleeps at level 2 (weights discarded) and a v > 1 run at level 1 (α copied to host
memory and restored on wake). To tell whether the sleep level itself changes how fast vLLM then
generates (the 7B 2-GPU pairs of benchmarks/NOTEBOOK.md §3), run v = 1 with this manager: it syncs every
step exactly as verl does and differs from plain v = 1 only in the sleep level. Never for training:
it pays both the copy to host memory and the transfer.

    python3 benchmarks/throughput.py ... --v 1 --gpus 0,1,2,3 \\
        --control level1=actor_rollout_ref.rollout.checkpoint_manager_class=benchmarks.diag.level1_every_step.Level1EveryStep

(beside the plain v=1 job, labelled ``<layout>-level1``; benchmarks/NOTEBOOK.md §3 has the run.)

(the repo root is on the jobs' ``PYTHONPATH``; ``benchmarks`` is a namespace package.)
"""

from verl_offgrpo.sync.lagged_manager import LaggedCheckpointManager
from verl_offgrpo.sync.vllm_sleep import keep_weights_across_sleep


class Level1EveryStep(LaggedCheckpointManager):
    """:class:`LaggedCheckpointManager` at ``sync_period=1`` whose replicas sleep at level 1."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)  # at v > 1 the startup checks reject this class
        self.server_reports = keep_weights_across_sleep(self.replicas, level=1)
