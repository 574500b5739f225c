"""The check that each sync reached vLLM reads the trainer's tensors by name under verl 0.9.1's default actor engine
(torch FSDP1, flat parameters): two real FSDP1 ranks on CPU (``fixtures/fsdp1_ranks.py``, gloo), each rank's
fingerprints through :func:`~verl_offgrpo.sync.sync_reached.actor_tensor_fingerprints`, then the per-tensor rule
and the element counts the cross-rank rule compares, as the manager runs them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests._background import module_jobs
from verl_offgrpo.sync.served_cast import compare_with_trainer, composed_fingerprints
from verl_offgrpo.sync.sync_reached import tensors_that_did_not_arrive, trainer_changed_tensors, trainer_numels

SCRIPT = Path(__file__).parent / "fixtures" / "fsdp1_ranks.py"
ROOT = str(Path(__file__).resolve().parents[1])


def _spec(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fsdp1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    return dict(args=[sys.executable, str(SCRIPT), str(out)], timeout=240, env=env)


#: two gloo ranks in their own interpreters (~5 s), in the background from the session's start (``_background``)
BACKGROUND_JOBS = {"fsdp1_ranks": (("test_fsdp1_ranks_fingerprint_the_checkpoints_tensors",
                                    "test_a_tensor_fsdp1_changed_that_vllm_did_not_stops_the_sync",
                                    "test_shards_placed_in_vllms_tensors_add_up_to_its_fingerprints",
                                    "test_a_vllm_rank_serving_the_last_syncs_tensors_is_unlike_the_trainer"), _spec)}

QKV = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
K_PROJ, NORM = "model.layers.0.self_attn.k_proj.weight", "model.layers.1.input_layernorm.weight"


@pytest.fixture(scope="module")
def outputs(request):
    job = module_jobs(request)["fsdp1_ranks"]
    assert job.returncode == 0, job.stderr[-3000:]
    out = Path(job.args[-1])
    return {engine: [json.loads((out / f"{prefix}rank{rank}.json").read_text()) for rank in (0, 1)]
            for engine, prefix in (("fsdp1", ""), ("fsdp2", "fsdp2_"))}


@pytest.fixture(scope="module")
def ranks(outputs):
    return outputs["fsdp1"]


def test_fsdp1_ranks_fingerprint_the_checkpoints_tensors(ranks):
    """Each rank's flat parameters come back as the pieces of the original parameters it holds, under the
    checkpoint's names (vLLM's loader's), not ``_flat_param``: their element counts summed over the ranks are the
    whole tensors' (what the cross-rank rule compares a TP rank's whole copy of a norm with); and an update that
    moved one element of k_proj (rank 0's piece) and one of a layer norm (rank 1's, before FSDP1's padding) changed
    exactly those two."""
    sizes = ranks[0]["sizes"]
    assert set(ranks[0]["after"]) | set(ranks[1]["after"]) == set(sizes)
    assert trainer_numels([rank["after"] for rank in ranks]) == sizes
    assert ranks[0]["after"][K_PROJ][0] == 8 and ranks[1]["after"][K_PROJ][0] == 24  # one tensor over two shards
    assert NORM not in ranks[0]["after"] and ranks[1]["after"][NORM][0] == 8
    changed = trainer_changed_tensors([rank["before"] for rank in ranks], [rank["after"] for rank in ranks])
    assert changed == {K_PROJ, NORM}


def test_a_tensor_fsdp1_changed_that_vllm_did_not_stops_the_sync(ranks):
    """The per-tensor rule on those names: a vLLM rank that serves the fused qkv_proj and the norm and changed
    neither at the sync leaves both unarrived (k_proj named through vLLM's fused tensor); one that changed both
    passes. Before the flat parameters were split, no trainer name matched vLLM's and nothing was checked."""
    changed = trainer_changed_tensors([rank["before"] for rank in ranks], [rank["after"] for rank in ranks])
    served = {"model.layers.0.self_attn.qkv_proj.weight": [48], NORM: [8], "model.norm.weight": [8]}
    stale = [[{"rank": 0, "changed_tensors": [], "fingerprints": served, "packed": QKV}]]
    missing, checked, replicas = tensors_that_did_not_arrive(stale, changed)
    assert (checked, replicas) == (2, 1)
    assert missing == [(0, [("model.layers.0.self_attn.qkv_proj.weight", [K_PROJ]), (NORM, [NORM])])]
    arrived = [[{**stale[0][0], "changed_tensors": ["model.layers.0.self_attn.qkv_proj.weight", NORM]}]]
    assert tensors_that_did_not_arrive(arrived, changed) == ([], 2, 1)


QKV_WEIGHT = "model.layers.0.self_attn.qkv_proj.weight"


def _composed(ranks):
    return composed_fingerprints([rank["placed"]["tensors"] for rank in ranks],
                                 {name for rank in ranks for name in rank["placed"]["unplaced"]}, QKV)


@pytest.mark.parametrize("engine", ["fsdp1", "fsdp2"])
def test_shards_placed_in_vllms_tensors_add_up_to_its_fingerprints(outputs, engine):
    """Each rank fingerprints its shards with every word at its position in the vLLM tensor that loads it (FSDP1:
    a flat parameter's pieces, k_proj over both ranks' shards; FSDP2: rows ⌈d₀/2⌉ of each tensor, q_proj's 7 rows as
    4 + 3), so the two ranks' sums are exactly what a TP = 1 vLLM rank holding the gathered weights as bf16
    fingerprints, the fused [q; k; v] included; the rule then compares every tensor and finds none unlike. k_proj's
    bias cannot be placed in vLLM's fused bias (q_proj has none to precede it), so that tensor is left out."""
    ranks = outputs[engine]
    served, composed = ranks[0]["served"], _composed(ranks)
    assert {name: composed.get(name) for name in served} == served
    assert len(served) == 6 and QKV_WEIGHT in served  # two fused qkv weights, three norms, lm_head
    biases = {f"model.layers.{layer}.self_attn.qkv_proj.bias" for layer in (0, 1)}  # k and v's: unplaced
    assert set(composed) == set(served) | biases and all(composed[b][3] is None for b in biases)
    assert compare_with_trainer([[{"rank": 0, "fingerprints": served}]], composed, None) == ([], {(0, n) for n in served}, 6)


def test_a_vllm_rank_serving_the_last_syncs_tensors_is_unlike_the_trainer(ranks):
    """After the update that moved one element of k_proj and one of a norm, a TP = 1 vLLM rank still serving the
    weights from before it holds exactly those two tensors (k_proj through the fused qkv_proj) unlike the trainer's
    cast; not trusted (left out at a calibrating sync), the same tensors are not compared."""
    composed = _composed(ranks)
    stale = [[{"rank": 0, "fingerprints": ranks[0]["served_before"]}]]
    unlike, alike, compared = compare_with_trainer(stale, composed, None)
    assert unlike == [(0, [(QKV_WEIGHT, [0]), (NORM, [0])])] and compared == 6 and len(alike) == 4
    assert compare_with_trainer(stale, composed, alike) == ([], alike, 4)
