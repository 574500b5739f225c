"""benchmarks/step0_accuracy.py: the Wilson interval, verl's prompt rendering and decoding, and the committed
measurement against what learning.py's docstring and the issue ask of the task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import learning
import step0_accuracy as s0

RESULT = Path(__file__).resolve().parents[1] / "results" / "step0_accuracy.json"


def test_wilson_interval_matches_hand_computed_values():
    """0/10: centre = half = (z²/2n)/(1 + z²/n) = 0.13877, so [0, 0.2775]; 5/10: symmetric about ½,
    half = z·sqrt(1/40 + z²/400)/(1 + z²/10) = 0.2634; it never leaves [0, 1]."""
    assert s0.wilson(0, 10) == pytest.approx((0.0, 0.27754), abs=1e-5)
    assert s0.wilson(5, 10) == pytest.approx((0.5 - 0.26341, 0.5 + 0.26341), abs=1e-5)
    assert s0.wilson(10, 10) == pytest.approx((1 - 0.27754, 1.0), abs=1e-5)
    with pytest.raises(ValueError):
        s0.wilson(3, 0)


class _FakeTokenizer:
    """Records how the prompt is rendered; a token is a character, id 2 is <|im_end|>."""

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, **kw):
        self.calls.append((messages, kw))
        return [ord(c) for c in "<u>" + messages[0]["content"] + "<a>"]

    def convert_tokens_to_ids(self, token):
        assert token == "<|im_end|>"
        return 2

    def decode(self, ids, skip_special_tokens):
        assert skip_special_tokens  # verl's reward managers decode without special tokens
        return "".join(chr(i) for i in ids if i != 2)


class _FakeModel:
    """Greedy 'generation': appends the digits of the prompt's last number, then <|im_end|> and padding."""

    def __init__(self):
        self.kwargs = []

    def generate(self, input_ids, attention_mask, **kw):
        import torch

        self.kwargs.append(kw)
        out = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            text = "".join(chr(i) for i, m in zip(ids, mask) if m)
            answer = [ord(c) for c in text.split()[-1].strip("?<a>")] + [2]
            out.append(ids + answer + [2] * (4 - len(answer)))
        return torch.tensor(out)


def test_prompts_render_as_verl_does_and_responses_decode_left_padded_and_greedy():
    tok, model = _FakeTokenizer(), _FakeModel()
    rows = [[{"role": "user", "content": "Is it 7?"}], [{"role": "user", "content": "Or 12?"}], [{"role": "user", "content": "x 345?"}]]
    ids = [s0.prompt_ids(tok, r) for r in rows]
    assert tok.calls[0][1] == {"add_generation_prompt": True, "tokenize": True, "return_dict": False}
    padded, mask = s0.left_pad(ids[:2], 2)
    assert len(padded[0]) == len(padded[1]) and padded[1][0] == 2 and mask[1][0] == 0 and mask[0][0] == 1
    assert s0.greedy_responses(model, tok, ids, max_new_tokens=48, batch_size=2) == ["7", "12", "345"]
    assert model.kwargs[0] == {"do_sample": False, "max_new_tokens": 48, "eos_token_id": 2, "pad_token_id": 2}


def test_scores_are_the_runs_last_integer_reward_with_the_echo_refused():
    rows = [{"data_source": "arithmetic/largest4", "prompt": [{"role": "user", "content": q}],
             "reward_model": {"ground_truth": "87"}, "extra_info": {"question": q}}
            for q in ["Which number is the largest: 12, 87, 45, 60? Answer with just the number."] * 3]  # fmt: skip
    responses = ["The largest number is 87.", "The largest number is 60.", "12, 87, 45, 60"]
    result = s0.task_result(rows, responses, seconds=1.0)
    assert (result["correct"], result["n"], result["accuracy"]) == (1, 3, 0.3333)
    assert [e["reward"] for e in result["examples"]] == [1.0, 0.0, 0.0]  # the echo's last number is no answer


def test_the_committed_measurement_puts_the_learning_task_in_the_10_to_40_percent_band():
    """The default task of learning.py starts between 10 % and 40 % greedy on ≥ 500 held-out questions, the
    whole 95 % interval inside; measured on exactly the runs' data and decoding."""
    result = json.loads(RESULT.read_text())
    chosen = result["tasks"][learning.DEFAULT_TASK]
    assert chosen["n"] >= 500 and chosen["data"] == learning.task_label(learning.DEFAULT_TASK)
    assert 0.10 < chosen["wilson95"][0] <= chosen["accuracy"] <= chosen["wilson95"][1] < 0.40
    assert chosen["accuracy"] == round(chosen["correct"] / chosen["n"], 4)
    assert chosen["wilson95"] == pytest.approx(s0.wilson(chosen["correct"], chosen["n"]), abs=1e-4)
    decoding = result["decoding"]
    assert decoding["greedy"] and decoding["max_new_tokens"] == 48 and decoding["dtype"] == "bfloat16"
    assert "add_generation_prompt=True" in decoding["prompt"] and result["model"] == learning.MODEL_NAME
