"""math-verify reward for answers in ``\\boxed{}`` (MATH-500, AIME24, DeepScaleR).

The response's final answer (in an R1-style response, the text after the last ``</think>``; none where the
reasoning or the final ``\\boxed{`` was cut off, :func:`answer_region`, :func:`ends_in_an_open_box`) is
parsed with ``math_verify.parse`` and compared with the ground truth by ``math_verify.verify``, so
equal values written differently score 1.0: ``\\frac{1}{2}`` and ``0.5``, ``\\boxed{025}`` and
``25``, ``3\\sqrt{13}`` and ``\\sqrt{117}``; a number in ``\\text{}`` (``\\boxed{\\textbf{073}}``) is unwrapped
first (:func:`unwrap_text_numbers`: math-verify reads it as a symbol).

Timeouts. math-verify's own timeouts use ``signal.alarm``, which works only in the main thread,
and verl calls reward functions from a thread pool (``loop.run_in_executor``). So:

* in the main thread, one ``SIGALRM`` timer bounds the whole check (math-verify's per-call
  timers are turned off, they would replace ours);
* in any other thread, the check runs in a helper process (:mod:`._worker`), where the same
  timer works, and the calling thread waits at most ``timeout + grace``; a helper that does not
  answer in time (e.g. stuck inside C code, where signals are not delivered) is killed. verl 0.9.1's own
  ``verl.utils.reward_score.math_verify`` also checks in spawned processes (a ``ProcessPoolExecutor`` of four), but
  leaves a check that hangs past its timeout running in its worker, so a few such responses stall its pool.

A timed-out check scores 0.0. POSIX only (verl runs on Linux).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time

logger = logging.getLogger(__name__)

#: Seconds a single check may take before it scores 0.0.
DEFAULT_TIMEOUT_S = 10.0

THINK_END = "</think>"
THINK_START = "<think>"
#: the commands whose argument is a final answer; one left open (cut off by the length cap) is no answer
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


class CheckTimeout(BaseException):
    """Raised by the SIGALRM handler. A BaseException, so math-verify's ``except Exception``
    blocks (which turn errors into "no match") do not swallow it."""


def answer_region(solution_str: str, require_think_end: bool = False) -> str:
    """The part of a response that holds its final answer: after the last ``</think>``, if any; empty (no answer)
    where a ``<think>`` after it is never closed (reasoning cut off by the length cap), or with ``require_think_end``
    where there is no ``</think>`` at all (a model whose chat template opens ``<think>`` in the prompt, as
    DeepSeek-R1-Distill's does: a response without it is unfinished reasoning, as DeepScaleR's reward reads it)."""
    head, sep, tail = solution_str.rpartition(THINK_END)
    if THINK_START in tail or (require_think_end and not sep):
        return ""
    return tail if sep else solution_str


def ends_in_an_open_box(region: str) -> bool:
    """Whether the last ``\\boxed{`` (or ``\\fbox{``) of ``region`` is never closed: the answer was cut off."""
    opened = None
    for opened in _BOX.finditer(region):
        pass
    if opened is None:
        return False
    depth = 1
    for char in region[opened.end():]:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return False
    return True


#: a plain number, bare or in parentheses, inside a text-style LaTeX command (``\\text{073}``, ``\\textbf{(073)}``,
#: ``\\mathrm{2.5}``), which math-verify reads as a symbol named "073", not the number 73; not next to a digit (unwrapped,
#: ``10\\text{ (1)}`` would read as 101)
_TEXT_NUMBER = re.compile(r"(?<![\d.,])(?<![\d.,] )\\(?:text|textbf|textrm|mathrm|mathbf)\s*\{\s*"
                          r"(?:\(\s*([-+]?\d+(?:\.\d+)?)\s*\)|([-+]?\d+(?:\.\d+)?))\s*\}(?!\s?\d)")


#: a thin space (``\\,``, ``\\ ``, ``\\;``) between digit groups of one number: ``10\\,080``, which math-verify
#: reads as 10 and 080
_THIN_SPACE_GROUP = re.compile(r"(?<=\d)\\[,;: ](?=\d{3}(?!\d))")


def join_digit_groups(text: str) -> str:
    """``text`` with thin spaces between a number's digit groups removed: ``\\boxed{10\\,080}`` → ``\\boxed{10080}``."""
    return _THIN_SPACE_GROUP.sub("", text)


def unwrap_text_numbers(text: str) -> str:
    """``text`` with every plain number inside ``\\text{}``-like commands unwrapped: ``\\boxed{\\textbf{(073)}}`` →
    ``\\boxed{073}``, which math-verify then reads as 73. Anything else in such a command is kept."""
    return _TEXT_NUMBER.sub(lambda m: m.group(1) or m.group(2), text)


def verify_answer(solution_str: str, ground_truth: str) -> float:
    """1.0 if the answer in ``solution_str`` (the response's :func:`answer_region`, cut by the caller) equals
    ``ground_truth`` under math-verify, else 0.0.

    No timeout of its own: call it through :func:`math_verify_score`.
    """
    import math_verify.grader
    import math_verify.parser
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # math-verify's own timers are off (they would replace ours, see the module docstring); mute its
    # one-time "Timeout is disabled" warning, since the caller does bound the time.
    math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    gold = parse(
        "\\boxed{" + ground_truth + "}",
        extraction_config=[LatexExtractionConfig()],
        parsing_timeout=None,
    )
    pred = parse(
        join_digit_groups(unwrap_text_numbers(solution_str)),
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()],
        parsing_timeout=None,
    )
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=None) else 0.0


def verify_with_alarm(solution_str: str, ground_truth: str, timeout: float) -> float:
    """:func:`verify_answer` bounded by a ``SIGALRM`` timer; 0.0 on timeout. Main thread only.

    A timer already running (e.g. pytest-timeout's) is restored afterwards with what is left of it.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("verify_with_alarm uses SIGALRM and must run in the main thread")

    def _on_alarm(signum, frame):
        raise CheckTimeout()

    start = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return verify_answer(solution_str, ground_truth)
    except CheckTimeout:
        logger.warning("math-verify check timed out after %.1fs; scoring 0.0", timeout)
        return 0.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            left = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def math_verify_score(solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT_S,
                      require_think_end: bool = False) -> float:
    """Score one response, from any thread, never taking much longer than ``timeout`` seconds. An unfinished
    answer scores 0.0 without a check: reasoning cut off (:func:`answer_region`, ``require_think_end``) or a final
    ``\\boxed{`` never closed (:func:`ends_in_an_open_box`)."""
    region = answer_region(solution_str, require_think_end)  # the checks below read only the answer's region
    if not region.strip() or ends_in_an_open_box(region):
        return 0.0
    if threading.current_thread() is threading.main_thread():
        return verify_with_alarm(region, ground_truth, timeout)
    from ._worker import TIMEOUT_GRACE_S, HelperStartError, get_pool

    try:
        reply = get_pool().call(
            {"op": "verify", "solution": region, "ground_truth": ground_truth, "timeout": timeout},
            timeout=timeout + TIMEOUT_GRACE_S,
        )
    except HelperStartError:
        raise  # no check could run: loud, not a reward of 0 for every response
    except TimeoutError:
        logger.warning("math-verify helper did not answer within %.1fs; killed it, scoring 0.0", timeout)
        return 0.0
    except (RuntimeError, OSError, ValueError) as err:  # the helper died during this check
        logger.warning("math-verify helper died during a check (%r); scoring 0.0", err)
        return 0.0
    if "error" in reply:
        logger.warning("math-verify helper failed: %s; scoring 0.0", reply["error"])
        return 0.0
    return float(reply["score"])
