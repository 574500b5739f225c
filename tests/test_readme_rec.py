"""The REC/RED options of the README's "Which loss when" (and of docs/losses.md): the shell block defines every
variable the tables use, so it can be pasted as is; each row, expanded by bash from that block, is a config the
plugin accepts; the block's own ``compose`` line runs (exit 0, the row it names)."""

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import validate_off_grpo_config

from _overrides import shipped_config

REPO = Path(__file__).resolve().parents[1]
DOCS = {"README.md": REPO / "README.md", "docs/losses.md": REPO / "docs" / "losses.md"}


def rec_block(text: str) -> str:
    """The fenced ``bash`` block that defines ``REC=``."""
    blocks = [b for b in re.findall(r"^```bash\n(.*?)^```$", text, flags=re.S | re.M) if re.search(r"^REC=", b, re.M)]
    assert len(blocks) == 1, blocks
    return blocks[0]


def rec_rows(text: str) -> list[str]:
    """The table cells that start from ``$REC``, as written."""
    return [cell for line in text.splitlines() if line.startswith("|") for cell in re.findall(r"`(\$REC\b[^`]*)`", line)]


def expand(block: str, rows: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """Bash's words of ``block``'s ``python`` command lines and of each row, with only ``block``'s definitions
    (``set -u``: a variable the block does not define fails): what a user who pasted the block gets."""
    script = ["set -eu", "python() { printf '%s\\n' python \"$@\"; echo ---; }", block]
    script += [f"printf '%s\\n' {row}; echo ---" for row in rows]
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", "\n".join(script)], capture_output=True,
                          text=True, timeout=30, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert done.returncode == 0, done.stderr
    *chunks, rest = done.stdout.split("---\n")
    assert rest == ""
    chunks = [chunk.splitlines() for chunk in chunks]
    return [c for c in chunks if c[:1] == ["python"]], [c for c in chunks if c[:1] != ["python"]]


@pytest.fixture(scope="module")
def composed():
    """The shipped yaml with the vLLM rollout, composed once; :func:`with_overrides` applies a row to a copy."""
    return shipped_config("actor_rollout_ref.rollout.name=vllm")


def with_overrides(config, overrides: list[str]):
    """``config`` with hydra's ``key=value`` overrides of existing keys, as omegaconf merges them (a key the config
    does not have fails, as in hydra; one composition instead of one per row)."""
    from omegaconf import OmegaConf

    return OmegaConf.merge(config, OmegaConf.from_dotlist(overrides))


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_rec_rows_need_only_the_pasted_block(doc):
    """Every variable a row uses is defined in the page's bash block; bash expands every row, with ``set -u``,
    to overrides that start from REC's two."""
    text = DOCS[doc].read_text()
    rows = rec_rows(text)
    assert len(rows) == 8, rows
    block = rec_block(text)
    used = {name for row in rows for name in re.findall(r"\$(\w+)", row)}
    assert used <= set(re.findall(r"^(\w+)=", block, re.M)), used
    _, expanded = expand(block, rows)
    assert len(expanded) == len(rows)
    for row, overrides in zip(rows, expanded):
        assert overrides[:2] == ["actor_rollout_ref.actor.policy_loss.loss_mode=rec",
                                 "algorithm.norm_adv_by_std_in_grpo=false"], row
        assert all("$" not in word and "=" in word for word in overrides), row


def test_every_readme_row_is_accepted_by_the_plugins_checks(composed):
    text = DOCS["README.md"].read_text()
    _, expanded = expand(rec_block(text), rec_rows(text))
    selected = set()
    for overrides in expanded:
        config = with_overrides(composed, overrides)
        assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "rec"
        knobs = config.actor_rollout_ref.actor.policy_loss.rec
        selected.add((knobs.clip_mode, knobs.weight, config.algorithm.adv_estimator))
        validate_off_grpo_config(config)
    assert len(selected) == 7  # 8 rows; the wider clip changes ε only


def test_the_readme_tables_match_the_losses_page():
    assert rec_rows(DOCS["README.md"].read_text()) == rec_rows(DOCS["docs/losses.md"].read_text())


def test_the_readme_rec_block_runs_as_pasted(capsys):
    """The block's last line, as bash expands it after the two definitions: ``compose`` exits 0 with REC-TwoSide."""
    from verl_offgrpo.cli.main import main

    commands, _ = expand(rec_block(DOCS["README.md"].read_text()), [])
    assert len(commands) == 1
    command = commands[0]
    assert command[:4] == ["python", "-m", "verl_offgrpo", "compose"], command
    assert main(command[3:]) == 0, capsys.readouterr().err
    printed = yaml.safe_load(capsys.readouterr().out)
    policy_loss = printed["actor_rollout_ref"]["actor"]["policy_loss"]
    assert policy_loss["loss_mode"] == "rec" and policy_loss["rec"]["clip_mode"] == "two-side"
    assert printed["algorithm"]["norm_adv_by_std_in_grpo"] is False


def test_the_start_up_line_names_each_readme_row_as_the_table_does(composed, caplog):
    """Each row's overrides make the rec loss's info line (config/rec_option.py) name that row's option."""
    import logging

    text = DOCS["README.md"].read_text()
    names = [line.split("|")[1].strip() for line in text.splitlines()
             if line.startswith("|") and re.search(r"`\$REC\b", line)]
    _, expanded = expand(rec_block(text), rec_rows(text))
    assert len(names) == len(expanded) == 8
    for name, overrides in zip(names, expanded):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="verl_offgrpo"):
            validate_off_grpo_config(with_overrides(composed, overrides))
        said = [r.getMessage() for r in caplog.records if "the rec loss runs" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(f"off_grpo: the rec loss runs {name}"), (name, said)
