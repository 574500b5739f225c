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


def test_the_gemma3_tokenizer_is_bpe_that_survives_save_and_reload(tmp_path):
    """A toy GGUF vocabulary: words merge whole by id order, control tokens and newline runs match whole,
    space runs become ``▁`` runs; saved and reloaded it tokenizes the same (transformers' own GGUF
    tokenizer is a Unigram that reloads as BPE without merges, one token a character), and Gemma 3's chat
    template renders the runs' prompt with the bos, the turn markers and the generation prompt."""
    from transformers import AutoTokenizer

    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "\n", "  ",
              "▁", "a", "b", "u", "s", "e", "r", "m", "o", "d", "l", "ab", "▁ab", "us", "er", "user", "mo",
              "el", "mod", "model", "▁b"]  # fmt: skip
    types = [3] * 7 + [4, 4] + [1] * (len(tokens) - 9)
    tok = learning.gemma3_tokenizer(tokens, types)
    ids = {t: i for i, t in enumerate(tokens)}
    assert tok.convert_ids_to_tokens(tok.encode("ab ab", add_special_tokens=False)) == ["ab", "▁ab"]
    turn = tok.encode("<start_of_turn>user\n", add_special_tokens=False)
    assert turn == [ids["<start_of_turn>"], ids["user"], ids["\n"]]
    assert tok.convert_ids_to_tokens([ids["  "]]) == ["▁▁"]
    tok.chat_template = learning.GEMMA3_CHAT_TEMPLATE
    tok.eos_token = "<end_of_turn>"
    tok.save_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    assert again.encode("ab ab user", add_special_tokens=False) == tok.encode("ab ab user", add_special_tokens=False)
    assert again.eos_token == "<end_of_turn>" and again.pad_token == "<pad>" and again.bos_token == "<bos>"
    messages = [{"role": "system", "content": "ab"}, {"role": "user", "content": "b a"}]
    text = again.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<bos><start_of_turn>user\nab\n\nb a<end_of_turn>\n<start_of_turn>model\n"
    ids_rendered = s0.prompt_ids(again, messages[1:])
    assert ids_rendered[:3] == [ids["<bos>"], ids["<start_of_turn>"], ids["user"]]
    assert ids_rendered[-3:] == [ids["<start_of_turn>"], ids["model"], ids["\n"]]


def test_a_second_model_is_stored_beside_the_first_and_merges_its_own_tasks():
    """--merge keeps the file's model at the top level; another model goes under ``models`` and, measured
    again, keeps its other tasks; the first model measured again keeps the others under ``models``."""
    smol = {"model": learning.MODEL_NAME, "tasks": {"largest4": 1, "add2": 2}}
    gemma = {"model": learning.GEMMA3_NAME, "tasks": {"largest4": 3}}
    both = s0.place(smol, gemma)
    assert both == {**smol, "models": {learning.GEMMA3_NAME: gemma}}
    assert s0.model_section(both, learning.GEMMA3_NAME) is gemma and s0.model_section(both, learning.MODEL_NAME) is both
    assert s0.model_section(smol, "other") == {} and s0.model_section({}, "other") == {}
    again = s0.place(both, {"model": learning.MODEL_NAME, "tasks": {"largest4": 4}})
    assert again == {"model": learning.MODEL_NAME, "tasks": {"largest4": 4}, "models": {learning.GEMMA3_NAME: gemma}}
    assert s0.place({}, gemma) == gemma


def test_the_stop_token_is_the_models_end_of_turn():
    tok, model = _FakeTokenizer(), _FakeModel()
    tok.convert_tokens_to_ids = lambda token: {"<|im_end|>": 2, "<end_of_turn>": 2}[token]
    assert s0.greedy_responses(model, tok, [s0.prompt_ids(tok, [{"role": "user", "content": "Is it 7?"}])],
                               max_new_tokens=8, batch_size=1, stop="<end_of_turn>") == ["7"]  # fmt: skip
    assert learning.MODELS["smollm2"][3] == "<|im_end|>" and learning.MODELS["gemma3-270m"][3] == "<end_of_turn>"


def test_the_committed_gemma3_measurement_is_consistent_and_leaves_smollm2_at_the_top():
    result = json.loads(RESULT.read_text())
    assert result["model"] == learning.MODEL_NAME
    gemma = result["models"][learning.GEMMA3_NAME]
    chosen = gemma["tasks"][learning.DEFAULT_TASK]
    assert chosen["n"] == 500 and chosen["data"] == learning.task_label(learning.DEFAULT_TASK)
    assert chosen["accuracy"] == round(chosen["correct"] / chosen["n"], 4)
    assert chosen["wilson95"] == pytest.approx(s0.wilson(chosen["correct"], chosen["n"]), abs=1e-4)
    assert gemma["decoding"]["stop"] == "<end_of_turn>" and "echo" in gemma["note"]
