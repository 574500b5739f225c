"""The knob docs of the plugin's three config classes, in TRL's ``GRPOConfig`` style: every field the class declares
is named once in its docstring, ``name (type, default value): ...``, with the field's own default, in one to three
lines; the docs carry no measurements, machines or leases (those live in the results page)."""

import dataclasses

import pytest

from verl_offgrpo.config import OffGRPOConfig
from verl_offgrpo.config.rec import RECConfig
from verl_offgrpo.policy_loss_config import OffGRPOPolicyLossConfig

INDENT = " " * 8
LAB_WORDS = ("H100", "H200", "results/", "NOTEBOOK", "lease", " s ", "GiB")


def _doc_value(text: str):
    text = text.strip().strip('"')
    if text in ("true", "false"):
        return text == "true"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def own_fields(cls) -> list[dataclasses.Field]:
    """The fields ``cls`` declares itself (not those of verl's base class)."""
    base = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}
    return [f for f in dataclasses.fields(cls) if f.name not in base]


def knob_doc(cls, name: str) -> tuple[object, int]:
    """The default written in ``cls``'s docstring for ``name``, and how many lines its entry takes."""
    lines = cls.__doc__.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(f"{INDENT}{name} (")]
    assert len(starts) == 1, f"{cls.__name__}.{name}: {len(starts)} entries"
    head = lines[starts[0]][len(INDENT) + len(name) + 2:]
    assert ", default " in head.split("):", 1)[0], f"{cls.__name__}.{name}: no default in {head!r}"
    written = head.split("):", 1)[0].rsplit(", default ", 1)[1]
    more = 0
    while starts[0] + 1 + more < len(lines) and lines[starts[0] + 1 + more].startswith(INDENT + "    "):
        more += 1
    return _doc_value(written), 1 + more


@pytest.mark.parametrize("cls", [OffGRPOConfig, RECConfig, OffGRPOPolicyLossConfig], ids=lambda c: c.__name__)
def test_every_knob_is_documented_once_with_its_default_in_one_to_three_lines(cls):
    fields = own_fields(cls)
    assert fields
    for f in fields:
        written, lines = knob_doc(cls, f.name)
        assert written == f.default, (cls.__name__, f.name, written, f.default)
        assert 1 <= lines <= 3, (cls.__name__, f.name, lines)
    for word in LAB_WORDS:
        assert word not in cls.__doc__, (cls.__name__, word)


def test_the_doc_check_catches_a_wrong_default_and_a_long_entry():
    """The check itself can fail: a docstring whose default differs, or whose entry runs to four lines."""
    @dataclasses.dataclass
    class Knobs:
        """Args:
        a (int, default 2): one line.
        b (bool, default false): one
            two
            three
            four.
        """

        a: int = 1
        b: bool = False

    assert knob_doc(Knobs, "a") == (2, 1) and knob_doc(Knobs, "b") == (False, 4)
