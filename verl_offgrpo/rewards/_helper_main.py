"""Main module of a math-verify helper process (:mod:`._worker` starts it): serves checks on stdin.

Kept apart from :mod:`._worker` (the pool, imported by :mod:`.math_verify_reward`) so that the pool
does not import the checker back.
"""

from verl_offgrpo.rewards._worker import serve
from verl_offgrpo.rewards.math_verify_reward import verify_with_alarm

if __name__ == "__main__":
    serve(verify_with_alarm)
