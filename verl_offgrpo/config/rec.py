"""``actor_rollout_ref.actor.policy_loss.rec.*``: the knobs of the ``rec`` policy loss (:class:`RECConfig`).

Paper: Yao et al., "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm: Demystifying Some
Myths About GRPO and Its Friends", arXiv 2509.24203. The loss itself: :mod:`verl_offgrpo.rec_loss`.

The knobs sit in verl's ``policy_loss`` section because the loss runs in the actor workers, which see
only the actor's config; the shipped yaml selects :class:`verl_offgrpo.policy_loss_config.
OffGRPOPolicyLossConfig` (verl's ``PolicyLossConfig`` plus ``rec``) for that. Pure Python like
:mod:`.off_grpo`: no verl, torch or Ray import.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .values import OffGRPOConfigError, check_numbers, config_value, is_number, knobs_from_mapping

CLIP_MODES = ("one-side", "two-side", "ring", "none")
WEIGHTS = ("none", "is", "red_weight")
ANCHORS = ("pi_k", "rprime", "alpha")

PREFIX = "actor_rollout_ref.actor.policy_loss.rec"
#: the numeric knobs and their ranges (:func:`~.values.check_numbers`)
NUMBER_RANGES = {"eps_low_prime": "in (0, 1]", "eps_high_prime": "> 0", "tau": "> 0"}


@dataclass(frozen=True)
class RECConfig:
    """Every knob under ``actor_rollout_ref.actor.policy_loss.rec`` (the shipped yaml sets the same defaults).

    ε = (ε_low, ε_high) is verl's ``actor.clip_ratio_low`` / ``clip_ratio_high`` (each falling back to
    ``clip_ratio``), as for the ``off_grpo`` loss.

    > Clip mask M (Yao et al., REC, principle "regularise the update": clipping as a regulariser, not IS)

    Args:
        clip_mode (str, default "one-side"): "one-side" drops A>0 tokens with ρ above the band and A<0 tokens
            below it (PPO's gradient region); "two-side" drops every token outside the band; "ring" keeps the
            band plus the far one-side regions beyond ε′; "none" keeps every token (plain REINFORCE).
        eps_low_prime (float, default 0.6): ε′_low of "ring", in (ε_low, 1]: A>0 tokens with ρ ≤ 1 − ε′_low are
            kept again (their probability fell far; pushing it back up is allowed).
        eps_high_prime (float, default 2.0): ε′_high of "ring", > ε_high: A<0 tokens with ρ ≥ 1 + ε′_high are
            kept again (their probability rose far; pushing it back down is allowed).

    > Token weight Ã (Yao et al., REC ``NoIS`` / ``IS``; RED-Weight, principle "shape the data distribution")

    Args:
        weight (str, default "none"): "none": Ã = A (NoIS, the paper's recommended form); "is": Ã = A·ρ with ρ
            detached; "red_weight": Ã = A·exp(A/τ), no IS (RED-Weight: favours high-reward samples).
        tau (float, default 1.0): τ of "red_weight", > 0. Smaller τ concentrates the update on the best samples;
            A/τ is clamped to ±20 (against overflow), so a weight stops growing past A = 20τ.

    > π_old of ρ and the band's centre (the plugin's, for its lag α = π_{k−v}; no paper section)

    Args:
        anchor (str, default "alpha"): "alpha": ρ = π_θ/α, band around 1 (the paper's reference code: the clip
            acts on stale samples); "pi_k": ρ = π_θ/π_k (never binds at one step a batch, i = 1); "rprime":
            ρ = π_θ/α, band around r' = π_k/α, as the off_grpo loss.
    """

    clip_mode: str = "one-side"
    eps_low_prime: float = 0.6
    eps_high_prime: float = 2.0
    weight: str = "none"
    tau: float = 1.0
    anchor: str = "alpha"

    def __post_init__(self) -> None:
        for name, choices in (("clip_mode", CLIP_MODES), ("weight", WEIGHTS), ("anchor", ANCHORS)):
            value = getattr(self, name)
            if value not in choices:
                raise OffGRPOConfigError(f"{PREFIX}.{name} must be one of {choices} (got {value!r}).")
        check_numbers(self, PREFIX, NUMBER_RANGES)  # '0.7' or 'abc': not the range's error
        if not (_finite(self.tau) and self.tau > 0):
            raise OffGRPOConfigError(
                f"{PREFIX}.tau (τ of RED-Weight) must be > 0 (got {self.tau!r}); the default is 1.0."
            )
        if not (_finite(self.eps_low_prime) and 0 < self.eps_low_prime <= 1):
            raise OffGRPOConfigError(
                f"{PREFIX}.eps_low_prime (ε′_low of the ring) must be in (0, 1] (got {self.eps_low_prime!r}); "
                "the default is 0.6."
            )
        if not (_finite(self.eps_high_prime) and self.eps_high_prime > 0):
            raise OffGRPOConfigError(
                f"{PREFIX}.eps_high_prime (ε′_high of the ring) must be > 0 (got {self.eps_high_prime!r}); "
                "the default is 2.0."
            )
        for name in ("eps_low_prime", "eps_high_prime", "tau"):
            object.__setattr__(self, name, float(getattr(self, name)))  # an integer in the yaml reads as float

    def check_ring(self, eps_low: float, eps_high: float) -> None:
        """With ``clip_mode=ring``, ε′ must lie outside the ε band (else the ring overlaps the band):
        ε_low < ε′_low ≤ 1 (ρ ≥ 0: a ring below ρ = 0 keeps nothing) and ε′_high > ε_high. Both sides are said
        in one line, each with a fix that can work (:meth:`_ring_fix`)."""
        if self.clip_mode != "ring":
            return
        bad = [(side, prime, eps) for side, prime, eps in (("low", self.eps_low_prime, eps_low),
                                                            ("high", self.eps_high_prime, eps_high)) if not prime > eps]
        if not bad:
            return
        default = type(self)()
        raise OffGRPOConfigError(
            "clip_mode=ring needs ε′ outside the band (actor_rollout_ref.actor.clip_ratio_low/high): "
            + "; ".join(f"{PREFIX}.eps_{side}_prime={prime!r} must exceed ε_{side}={eps!r}" for side, prime, eps in bad)
            + ": " + "; ".join(self._ring_fix(side, prime, eps) for side, prime, eps in bad)
            + f" (the defaults are {default.eps_low_prime}/{default.eps_high_prime}, the paper's wider clip band)."
        )

    @staticmethod
    def _ring_fix(side: str, prime: float, eps: float) -> str:
        """What makes one side of the ring valid: ε′_high above ε_high; ε′_low in (ε_low, 1], or, where ε_low ≥ 1
        leaves ε′_low no room, ε_low below ε′_low."""
        if side == "high":
            if not math.isfinite(eps):  # no finite ε′_high exceeds it
                return (f"lower actor_rollout_ref.actor.clip_ratio_high to a finite value below {PREFIX}.eps_high_prime="
                        f"{prime!r} (ε′_high is finite, so ε_high={eps!r} leaves it no room), or use "
                        f"{PREFIX}.clip_mode=one-side")
            return f"set {PREFIX}.eps_high_prime above {eps!r}"
        if eps < 1:
            return f"set {PREFIX}.eps_low_prime in ({eps!r}, 1]"
        return (f"lower actor_rollout_ref.actor.clip_ratio_low below {PREFIX}.eps_low_prime={prime!r} (ε′_low is at "
                f"most 1, so ε_low={eps!r} leaves it no room), or use {PREFIX}.clip_mode=one-side")

    def idle_knobs(self) -> list[str]:
        """Knobs changed from their defaults that the chosen mode never reads: τ without ``weight=red_weight``,
        ε′ without ``clip_mode=ring``, the anchor without a clip mask or ``weight=is`` (ρ feeds only those)."""
        default, idle = type(self)(), []
        if self.weight != "red_weight" and self.tau != default.tau:
            idle.append(f"tau={self.tau} (read only with weight=red_weight)")
        if self.clip_mode == "none" and self.weight != "is" and self.anchor != default.anchor:
            idle.append(f"anchor={self.anchor} (read only with a clip mask or weight=is)")
        for side in ("low", "high"):
            name = f"eps_{side}_prime"
            if self.clip_mode != "ring" and getattr(self, name) != getattr(default, name):
                idle.append(f"{name}={getattr(self, name)} (read only with clip_mode=ring)")
        return idle

    def changed_fields(self) -> list[str]:
        """The knobs that differ from their defaults, in declaration order."""
        default = type(self)()
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(default, f.name)]

    @classmethod
    def from_mapping(cls, rec: Any) -> "RECConfig":
        """From the ``policy_loss.rec`` node (DictConfig, dict, an instance, or None for the defaults)."""
        return knobs_from_mapping(cls, rec, PREFIX, "clip_mode=ring")

    @classmethod
    def from_policy_loss(cls, policy_loss: Any) -> "RECConfig":
        """From verl's ``policy_loss`` section (the plugin's dataclass, a DictConfig or a dict; None: defaults)."""
        return cls.from_mapping(config_value(policy_loss, "rec"))


def _finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)
