"""verl-offgrpo: off-policy GRPO (Mroueh et al., arXiv 2505.22257) as a verl plugin.

Importing this package is cheap and has no side effects; the registrations with verl happen in
:mod:`verl_offgrpo.plugin`, which verl imports through the ``verl.plugins`` entry point.
"""

__version__ = "0.1.0"

#: Name of the advantage estimator and of the policy loss registered with verl.
ESTIMATOR_NAME = "off_grpo"
LOSS_NAME = "off_grpo"
#: The group-relative REINFORCE family (Yao et al., arXiv 2509.24203): the RED-Drop estimator and the
#: REC policy loss (clip mask, NoIS / IS / RED-Weight weights).
RED_DROP_ESTIMATOR_NAME = "red_drop"
REC_LOSS_NAME = "rec"
#: Every estimator and policy loss the plugin registers (a config naming one selects the plugin).
ESTIMATOR_NAMES = (ESTIMATOR_NAME, RED_DROP_ESTIMATOR_NAME)
LOSS_NAMES = (LOSS_NAME, REC_LOSS_NAME)
#: Name of the V1 trainer mode that implements the lagged weight sync.
TRAINER_MODE = "off_grpo_sync"
#: The mode that trainer presents to verl's own code (``PPOTrainer.trainer_mode``): verl's ``sync``, whose settings
#: (``trainer.v1.sync.*``) it reads.
PRESENTED_MODE = "sync"
