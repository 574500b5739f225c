"""The served-weights check (verl_offgrpo/sync/served_weights.py): the fingerprint, its comparison, the
worker-side record/check and the error text that reaches the driver through vLLM's and Ray's wrapping."""

import re
from types import SimpleNamespace

import pytest
import torch

from verl_offgrpo.patches import served_weights_worker
from verl_offgrpo.sync import served_weights as sw


def model(seed=0, dtype=torch.bfloat16):
    torch.manual_seed(seed)
    layers = torch.nn.ModuleList([torch.nn.Linear(5, 9), torch.nn.Linear(9, 2)]).to(dtype)
    return torch.nn.ModuleDict({"layers": layers})


def bits(t):
    return t.data.view(-1).view(torch.int16)


def test_same_weights_same_fingerprint_and_any_one_bit_change_differs():
    m = model()
    before = sw.fingerprint(m.named_parameters())
    assert before == sw.fingerprint(m.named_parameters())  # exact: integer sums, no reduction-order noise
    assert list(before) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert before["layers.0.weight"][:2] == [45, "bfloat16"]
    w = m["layers"][1].weight
    for element in (0, 7, 17):
        bits(w)[element] += 1  # one ulp
        diffs = sw.compare(before, sw.fingerprint(m.named_parameters()))
        assert [d["name"] for d in diffs] == ["layers.1.weight"] and diffs[0]["delta_sum"] == 1
        bits(w)[element] -= 1
    assert sw.compare(before, sw.fingerprint(m.named_parameters())) == []


def test_moved_elements_and_other_dtypes_show():
    m = model()
    before = sw.fingerprint(m.named_parameters())
    w = bits(m["layers"][0].weight)
    a, b = w[3].clone(), w[11].clone()
    assert a != b
    w[3], w[11] = b, a  # a swap keeps the plain sum: the position weights see it
    (diff,) = sw.compare(before, sw.fingerprint(m.named_parameters()))
    assert diff["delta_sum"] == 0 and diff["recorded"][3] != diff["served"][3]
    for dtype in (torch.float32, torch.float16, torch.float8_e4m3fn):
        t = torch.randn(13).to(dtype)
        fp = sw.fingerprint([("t", t)])
        u = t.clone()
        u.view(torch.uint8)[5] ^= 1  # one bit of one byte
        assert sw.compare(fp, sw.fingerprint([("t", u)])), dtype
        assert fp["t"][:2] == [13, str(dtype).replace("torch.", "")]


@pytest.mark.parametrize("distance", [1, 576, 2048, 50549])
def test_swaps_show_at_every_distance(distance):
    """Two elements swapped ``distance`` apart keep the plain sum; the position weights must see every one of
    forty such swaps (the multiplicative hash used before gave positions 50 549 apart equal weights 96 % of
    the time, so most swaps at that distance passed)."""
    g = torch.Generator().manual_seed(distance)
    t = torch.randn(52_000, generator=g).to(torch.bfloat16)
    fp = sw.fingerprint([("t", t)])
    missed = []
    for i in range(0, 1000, 25):
        u = t.clone()
        w = u.view(torch.int16)
        if w[i] == w[i + distance]:
            continue
        w[i], w[i + distance] = w[i + distance].clone(), w[i].clone()
        if not sw.compare(fp, sw.fingerprint([("t", u)])):
            missed.append(i)
    assert missed == []


def test_chunks_combine_exactly(monkeypatch):
    """A tensor longer than a chunk: the chunks' sums combine into the same s0 as one pass, and a change in
    any chunk shows."""
    t = torch.randn(1000).to(torch.bfloat16)
    whole = sw.fingerprint([("t", t)])["t"]
    monkeypatch.setattr(sw, "CHUNK", 64)
    chunked = sw.fingerprint([("t", t)])["t"]
    assert chunked[2] == whole[2] == int(t.view(torch.int16).to(torch.int64).sum())
    assert chunked == sw.fingerprint([("t", t.clone())])["t"]
    u = t.clone()
    u.view(torch.int16)[999] += 1  # last, partial chunk
    assert sw.fingerprint([("t", u)])["t"] != chunked


def murmur_weight(i, offset=0):
    """The docstring's formula for w_i (w'_i with ``offset`` = SECOND) in plain Python integers."""
    h = (i + offset) % 2**32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    h ^= h >> 16
    return (h >> 17) + 1


def test_position_weights_are_the_formula_across_pieces_and_a_short_chunk_takes_their_prefix(monkeypatch):
    """The weights are computed in pieces of PIECE positions and once per call at CHUNK length (a bounded
    device footprint); every position still gets the formula's w_i, so the checksums do not depend on either."""
    monkeypatch.setattr(sw, "PIECE", 7)
    w = sw._position_weights(30, "cpu")
    assert w.dtype == torch.int32 and w.tolist() == [murmur_weight(i) for i in range(30)]
    assert w[0] == 1 and 1 <= int(w.min()) and int(w.max()) <= 2**15
    assert sw._position_weights(30, "cpu", sw.SECOND).tolist() == [murmur_weight(i, sw.SECOND) for i in range(30)]
    t = torch.randn(300).to(torch.bfloat16)
    short = torch.randn(5).to(torch.bfloat16)
    monkeypatch.setattr(sw, "CHUNK", 64)
    fp = sw.fingerprint([("short", short), ("t", t)])  # the short one first: the vector grows at the long one
    x = short.view(torch.int16).tolist()
    assert fp["short"][2:5] == [sum(x), *(sum(murmur_weight(i, o) * v for i, v in enumerate(x)) for o in (0, sw.SECOND))]
    assert fp["short"][5] == sum(murmur_weight(v & 0xFFFF, sw.THIRD) for v in x)  # s3: a hash of each word's bits
    y = t.view(torch.int16).tolist()  # chunk c (of 64 words) weighted by c + 1, each with the prefix weights
    s1, s2 = (sum((c + 1) * sum(murmur_weight(i, o) * v for i, v in enumerate(y[64 * c : 64 * (c + 1)]))
                  for c in range(5)) for o in (0, sw.SECOND))
    assert fp["t"][2:] == [sum(y), s1, s2, sum(murmur_weight(v & 0xFFFF, sw.THIRD) for v in y)]
    monkeypatch.setattr(sw, "PIECE", 1 << 20)
    assert sw.fingerprint([("t", t), ("short", short)]) == fp  # long first: the short one takes a prefix


def test_two_changes_that_cancel_in_one_weighted_sum_show_in_the_other():
    """+1 and −1 ulp at two positions with equal first weights leave s0 and s1 as they were (the collision a small
    tensor with two changed elements meets about once in 2¹⁵ syncs); the second weights differ there, so s2 moves.
    The per-tensor sync check reads such a tensor as changed, not as a sync that did not arrive."""
    w = sw._position_weights(4096, "cpu").tolist()
    seen = {}
    for k, x in enumerate(w):  # the first two positions with equal first weights
        if x in seen:
            i, j = seen[x], k
            break
        seen[x] = k
    assert w[i] == w[j] and murmur_weight(i, sw.SECOND) != murmur_weight(j, sw.SECOND)
    t = torch.ones(4096, dtype=torch.bfloat16)
    u = t.clone()
    u.view(torch.int16)[i] += 1
    u.view(torch.int16)[j] -= 1
    before, after = sw.fingerprint([("norm", t)])["norm"], sw.fingerprint([("norm", u)])["norm"]
    assert after[2:4] == before[2:4] and after[4] != before[4]
    [diff] = sw.compare({"norm": before}, {"norm": after})
    assert diff["name"] == "norm" and sw._describe(diff).endswith(f"-> {after[3:5]})")  # the message shows s2 moved


def test_missing_and_extra_tensors_differ():
    a = sw.fingerprint(model().named_parameters())
    b = dict(a)
    del b["layers.1.bias"]
    b["extra"] = [1, "bfloat16", 0, 0]
    assert [(d["name"], d["recorded"] is None, d["served"] is None) for d in sw.compare(a, b)] == [
        ("layers.1.bias", False, True),
        ("extra", True, False),
    ]


class Extension:
    """Stands for verl's vLLMColocateWorkerExtension."""


class Worker(Extension):
    def __init__(self, rank=0):
        self.rank = rank
        self.model_runner = SimpleNamespace(model=model(seed=rank))


def test_worker_method_records_and_checks_and_the_driver_reads_the_error():
    module = SimpleNamespace(__name__="fake", vLLMColocateWorkerExtension=Extension)
    served_weights_worker.install_worker_method(module)
    served_weights_worker.install_worker_method(module)  # idempotent
    worker = Worker(rank=1)
    method = getattr(worker, sw.RPC_METHOD)
    with pytest.raises(sw.ServedWeightsMismatch, match="rank 1 has no record"):
        method("check", step=0, replica=0)
    report = method("record", step=3, replica=0)
    assert report["rank"] == 1 and report["tensors"] == 4 and report["elements"] == 45 + 9 + 18 + 2
    assert method("check", step=4, replica=0)["digest"] == report["digest"]
    bits(worker.model_runner.model["layers"][0].bias)[2] += 1
    with pytest.raises(sw.ServedWeightsMismatch) as caught:
        method("check", step=5, replica=0)
    # what reaches the manager: vLLM's multiproc executor and engine core wrap the text, Ray adds its own
    wrapped = RuntimeError(
        "ray::vLLMHttpServer.collective_rpc() ... Exception: Call to collective_rpc method failed: Worker failed with "
        f"error '{caught.value}', please check the stack trace above for the root cause"
    )
    payload = sw.parse_payload(wrapped)
    assert payload["rank"] == 1 and payload["recorded_step"] == 3 and payload["differing"] == 1
    assert payload["first"][0]["name"] == "layers.0.bias" and payload["first"][0]["delta_sum"] == 1
    text = sw.mismatch_message([(1, wrapped)], slot_step=5, repeat=False, num_replicas=2)
    assert text.startswith("verl-offgrpo: step 6: vLLM does not serve α after its wake without a weight sync, for "
                           "step 6's rollout: replica 1 of 2, TP rank 1: 1 of 4 parameter tensors differ from α as "
                           "loaded at the sync of step 3")  # fmt: skip
    assert re.search(r"first: layers\.0\.bias \(bit-sum (-?\d+) -> (-?\d+)", text)
    repeat = sw.mismatch_message([(0, wrapped), (1, wrapped)], slot_step=5, repeat=True, num_replicas=2)
    assert repeat.startswith("verl-offgrpo: step 5: ") and "the repeated wake of step 5 (validation)" in repeat
    assert "(2 of 2 replicas failed the check)" in repeat
    # an error without a payload (the check could not run) is still an error, with its text
    other = sw.mismatch_message([(0, RuntimeError("Method 'off_grpo_served_weights' is not implemented."))], 2, False, 1)
    assert other.startswith("verl-offgrpo: step 3: the served-weights check could not confirm") and "not implemented" in other


def test_install_warns_on_a_module_without_the_extension(caplog):
    """Not an import error in every verl process: a warning, and the check then fails at the first sync."""
    with caplog.at_level("WARNING", logger=served_weights_worker.__name__):
        served_weights_worker.install_worker_method(SimpleNamespace(__name__="verl.workers.rollout.vllm_rollout.utils"))
    assert "verify_served_weights=false" in caplog.text


def test_unknown_action_is_an_error():
    with pytest.raises(ValueError, match="'record' or 'check', got 'compare'"):
        sw.served_weights_rpc(Worker(), "compare")


def test_a_record_answers_whether_the_ranks_weights_changed_since_its_previous_record():
    """``record`` returns ``changed``: None at a rank's first record, then whether its fingerprint differs from the
    previous record's (one ulp in one element counts)."""
    worker = Worker(rank=2)
    assert sw.served_weights_rpc(worker, "record", step=0)["changed"] is None
    assert sw.served_weights_rpc(worker, "record", step=4)["changed"] is False
    bits(worker.model_runner.model["layers"][1].weight)[0] += 1
    assert sw.served_weights_rpc(worker, "record", step=8)["changed"] is True
    assert sw.served_weights_rpc(worker, "record", step=12)["changed"] is False


def test_every_tp_rank_must_change_as_the_trainer_did():
    """The rule per TP rank from its ``record`` answer: when the trainer moved every rank must have changed (each
    holds a shard of every layer; one that did not missed the sync), when it did not none may have; the breaking
    ranks are named. Ranks without a previous record tell nothing, and a replica none of whose ranks has one, or whose
    call returned no per-rank answers (verl's collective_rpc without the plugin's patch returns None), is an error
    (the manager then warns that the check is off), not a pass."""
    from verl_offgrpo.sync.sync_reached import replicas_breaking_the_rule, rule_broken_message

    rank = lambda r, changed: {"rank": r, "changed": changed}
    answers = [[rank(0, True), rank(1, False)],  # the sync reached rank 0 only
               [rank(0, True), rank(1, True)],  # both moved
               [rank(0, False), rank(1, False)]]  # nothing moved
    moved = replicas_breaking_the_rule(answers, changed=True)
    assert moved == [(0, {"changed": False, "ranks": [1]}), (2, {"changed": False, "ranks": [0, 1]})]
    assert rule_broken_message(moved, True, 8, 4, 3).startswith(
        "verl-offgrpo: step 8: the weight sync did not reach vLLM: the trainer's weights changed since the sync of "
        "step 4, but the vLLM workers of replica 0 of 3 (TP rank 1) (2 of 3 replicas alike) serve the same weights")
    still = replicas_breaking_the_rule(answers, changed=False)
    assert still == [(0, {"changed": True, "ranks": [0]}), (1, {"changed": True, "ranks": [0, 1]})]
    assert "(replica 0 of 3, TP rank 0) (2 of 3 replicas alike): the engine serves" in rule_broken_message(
        still, False, 8, 4, 3)
    assert replicas_breaking_the_rule([[rank(0, None), rank(1, True)]], changed=True) == []
    assert replicas_breaking_the_rule([[rank(0, None), rank(1, False)]], changed=True) == [
        (0, {"changed": False, "ranks": [1]})]
    with pytest.raises(RuntimeError, match="replica 1 answered None instead of one record per vLLM worker"):
        replicas_breaking_the_rule([[rank(0, True)], None], changed=True)
    # no rank remembers the previous sync (its workers restarted): the rule cannot be judged, which is said
    with pytest.raises(RuntimeError, match="no vLLM worker of rollout replica 1 has a record of the previous sync"):
        replicas_breaking_the_rule([[rank(0, True)], [rank(0, None), rank(1, None)]], changed=True)


def test_the_trainers_digest_reads_its_shards_as_vllms_dtype():
    """The actor worker's digest is of its parameters cast to the rollout dtype, the bits vLLM's loader stores: an
    fp32 change below bf16's resolution leaves the bf16 digest as it was (vLLM would not change either), one above
    changes it; fp32 sees both."""
    from verl_offgrpo.sync import sync_reached

    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    worker = SimpleNamespace(worker_dict={"actor_rollout_ref": SimpleNamespace(
        actor=SimpleNamespace(engine=SimpleNamespace(module=layer)), ref=None)})
    digests = lambda: [sync_reached.actor_tensor_fingerprints(worker, dtype)["tensors"]
                       for dtype in ("bfloat16", "float32")]
    before = digests()
    with torch.no_grad():
        layer.weight[0, 0] += 2.0 ** -12  # bf16 has 8 significant bits: 1 + 2^-12 rounds back to 1
    after_small = digests()
    assert after_small[0] == before[0] and after_small[1] != before[1]
    with torch.no_grad():
        layer.weight[0, 0] += 2.0 ** -7
    assert digests()[0] != before[0]
    assert sync_reached.trainer_changed_tensors(None, [before[0]]) is None
    assert sync_reached.trainer_changed_tensors([before[0]], [before[0]]) == set()
    assert sync_reached.trainer_changed_tensors([before[0]], [after_small[0]]) == set()
    with pytest.raises(RuntimeError, match="no actor model"):
        sync_reached.actor_tensor_fingerprints(SimpleNamespace(), "bfloat16")


def test_a_record_names_the_tensors_that_changed_and_vllms_packed_modules():
    """``record`` also answers which tensors changed since the rank's previous record (None at its first), every
    tensor's fingerprint by name, and the model's ``packed_modules_mapping`` (vLLM's fused tensor ← the checkpoint's)."""
    worker = Worker(rank=0)
    worker.model_runner.model.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    first = sw.served_weights_rpc(worker, "record", step=0)
    assert first["changed_tensors"] is None and first["packed"] == {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    assert list(first["fingerprints"]) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert first["ndims"] == {"layers.0.weight": 2, "layers.0.bias": 1, "layers.1.weight": 2, "layers.1.bias": 1}
    assert first["fingerprints"] == sw.fingerprint(worker.model_runner.model.named_parameters())
    bits(worker.model_runner.model["layers"][1].bias)[0] += 1
    assert sw.served_weights_rpc(worker, "record", step=4)["changed_tensors"] == ["layers.1.bias"]
    assert sw.served_weights_rpc(worker, "record", step=8)["changed_tensors"] == []


def test_every_tensor_the_trainer_changed_must_change_on_some_tp_rank():
    """By hand: the trainer changed q_proj and the norm; vLLM serves q_proj inside qkv_proj (its packed modules).
    Replica 0: rank 1 changed qkv_proj and both changed the norm: passes. Replica 1: no rank changed qkv_proj: its
    name is given. A trainer tensor vLLM does not serve under its name (lm_head here) is not checked; a replica with a
    rank that has no previous record is skipped."""
    from verl_offgrpo.sync.sync_reached import served_name, tensors_message, tensors_that_did_not_arrive

    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    assert served_name("model.layers.0.self_attn.k_proj.weight", packed) == "model.layers.0.self_attn.qkv_proj.weight"
    assert served_name("model.layers.0.mlp.up_proj.weight", packed) == "model.layers.0.mlp.gate_up_proj.weight"
    assert served_name("model.norm.weight", packed) == "model.norm.weight"
    names = ["model.layers.0.self_attn.qkv_proj.weight", "model.norm.weight"]
    rank = lambda r, moved: {"rank": r, "changed_tensors": moved, "fingerprints": dict.fromkeys(names), "packed": packed}
    changed = {"model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight"}
    answers = [[rank(0, ["model.norm.weight"]), rank(1, names)],
               [rank(0, ["model.norm.weight"]), rank(1, ["model.norm.weight"])],
               [rank(0, None), rank(1, [])]]
    missing, checked, replicas = tensors_that_did_not_arrive(answers, changed)
    assert missing == [(1, [("model.layers.0.self_attn.qkv_proj.weight", ["model.layers.0.self_attn.q_proj.weight"])])]
    assert (checked, replicas) == (4, 2)  # two tensors on each of the two replicas with records
    assert tensors_message(missing, 8, 4, 3) == (
        "verl-offgrpo: step 8: the weight sync reached vLLM only in part: the trainer changed "
        "model.layers.0.self_attn.q_proj.weight (vLLM's model.layers.0.self_attn.qkv_proj.weight) since the sync of "
        "step 4, but no vLLM worker of replica 1 of 3 serves a changed copy, so its next rollout would mix the policy "
        "of the sync of step 4 into α = the policy of step 8. Stopped before any batch was sampled from it. Check the "
        "weight-sync path (verl's checkpoint engine, the names vLLM's loader takes); "
        "algorithm.off_grpo.verify_served_weights=false turns the check off.")
    # names vLLM does not serve: nothing to check; replicas without records: none checked (the manager's metric and
    # its "no name matched" line need a replica that was)
    assert tensors_that_did_not_arrive([[rank(0, [])]], {"lm_head.weight"}) == ([], 0, 1)
    assert tensors_that_did_not_arrive([[{"rank": 0, "changed": True}]], {"model.norm.weight"}) == ([], 0, 0)


def test_the_trainers_tensors_are_named_as_the_checkpoint_and_compared_per_rank():
    """The actor's digest carries each tensor's fingerprint under its checkpoint name (torch's wrapper segments
    dropped); a tensor changed on any rank's shard counts as changed."""
    from verl_offgrpo.sync import sync_reached

    assert sync_reached.checkpoint_name("_fsdp_wrapped_module.model.layers.0._checkpoint_wrapped_module.mlp.weight") \
        == "model.layers.0.mlp.weight"
    layer = torch.nn.Linear(3, 2)
    worker = SimpleNamespace(worker_dict={"actor_rollout_ref": SimpleNamespace(
        actor=SimpleNamespace(engine=SimpleNamespace(module=layer)), ref=None)})
    before = sync_reached.actor_tensor_fingerprints(worker, "bfloat16")["tensors"]
    assert sorted(before) == ["bias", "weight"]
    with torch.no_grad():
        layer.bias[1] += 1.0
    after = sync_reached.actor_tensor_fingerprints(worker, "bfloat16")["tensors"]
    assert sync_reached.trainer_changed_tensors(None, [after]) is None
    assert sync_reached.trainer_changed_tensors([before, before], [before, after]) == {"bias"}
    assert sync_reached.trainer_changed_tensors([before], [before]) == set()


def test_the_per_tensor_rule_is_off_where_verls_delta_sync_decides_in_bf16_for_a_finer_rollout_dtype():
    """verl's delta_sharded sync sends the elements whose bf16 value changed; an fp16 or fp32 rollout can then
    honestly keep a tensor whose finer cast moved: no per-tensor rule there, nor with a quantized rollout. With bf16,
    or verl's naive sync, it holds."""
    from verl_offgrpo.sync.sync_reached import tensors_checkable

    assert not tensors_checkable("delta_sharded", "float16") and not tensors_checkable("delta_sharded", "float32")
    assert tensors_checkable("delta_sharded", "bfloat16") and tensors_checkable("naive", "float16")
    assert tensors_checkable(None, "bfloat16")
    assert not tensors_checkable(None, "bfloat16", "fp8")  # a quantized rollout: a few changes may round away


def test_a_tensor_every_tp_rank_holds_whole_must_be_alike_on_all_ranks():
    """By hand: the trainer's two FSDP ranks hold halves (norm 4 + 4 = 8 elements, qkv 12 + 12 = 24). Replica 0's TP
    ranks hold the norm whole (8 = the trainer's) and qkv in slices (12 ≠ 24): the norm is compared, qkv is not,
    however its slices differ. Replica 1: rank 1's norm differs from rank 0's: named. A replica of one rank, one
    without answers or fingerprints: nothing to compare. Copies the trainer holds on two ranks (hybrid sharding:
    8 + 8 = 16 for a norm of 8) match no vLLM rank and are not compared, nor are tensors of two dimensions."""
    from verl_offgrpo.sync.sync_reached import replicas_with_unequal_copies, trainer_numels, unequal_copies_message

    norm, qkv = "model.norm.weight", "model.layers.0.self_attn.qkv_proj.weight"
    trainer = [{norm: [4, "bf16", 1, 2, 3], "model.layers.0.self_attn.q_proj.weight": [12, "bf16", 4, 5, 6]}] * 2
    numels = trainer_numels(trainer)
    assert numels == {norm: 8, "model.layers.0.self_attn.q_proj.weight": 24}
    rank = lambda r, norm_sum: {"rank": r, "fingerprints": {norm: [8, "bf16", norm_sum, 0, 0], qkv: [12, "bf16", r, 0, 0]},
                                "ndims": {norm: 1, qkv: 2}}
    answers = [[rank(0, 7), rank(1, 7)], [rank(0, 7), rank(1, 9)], [rank(0, 1)], None, [{"rank": 0}, rank(1, 7)]]
    unequal, compared, replicas = replicas_with_unequal_copies(answers, numels)
    assert unequal == [(1, [(norm, [1])])] and (compared, replicas) == (2, 2)
    assert replicas_with_unequal_copies(answers, {norm: 16}) == ([], 0, 2)
    # a 2-D tensor held whole (a tiny vocabulary's padded embedding slice: zeros on rank 1) is not compared
    embed = "model.embed_tokens.weight"
    rows = lambda r: {"rank": r, "fingerprints": {embed: [64, "bf16", 5 * (1 - r), 0, 0]}, "ndims": {embed: 2}}
    assert replicas_with_unequal_copies([[rows(0), rows(1)]], {embed: 64}) == ([], 0, 1)
    assert unequal_copies_message(unequal, 8, 5) == (
        "verl-offgrpo: step 8: the weight sync reached vLLM's TP ranks unequally: every rank of replica 1 of 5 holds "
        "model.norm.weight whole, but TP rank 1 serves a copy unlike the first rank's, so the sync reached some of them "
        "with it and not others, and the replica's next rollout would mix two policies. Stopped before any batch was "
        "sampled from it. Check the weight-sync path (verl's checkpoint engine, each rank's loader); "
        "algorithm.off_grpo.verify_served_weights=false turns the check off.")


def test_the_trainers_changed_tensors_across_rank_counts_and_new_names():
    """Another number of actor ranks than at the last sync: nothing to compare (None, not "unchanged"); a tensor that
    appears on a rank counts as changed."""
    from verl_offgrpo.sync import sync_reached

    fp = [1, "bfloat16", 0, 0, 0]
    assert sync_reached.trainer_changed_tensors([{"a": fp}], [{"a": fp}, {"a": fp}]) is None
    assert sync_reached.trainer_changed_tensors([{"a": fp}], [{"a": fp, "b": fp}]) == {"b"}


def test_composed_fingerprints_and_the_comparison_with_whole_copies_and_parts():
    """Per vLLM tensor the ranks' pieces add up field by field (q and k into qkv_proj); a piece of unknown position
    keeps only the sums free of positions (s1, s2 None); pieces of two dtypes leave the tensor out. A rank's whole copy
    is compared field by field (an unplaced one without s1, s2); a tensor split over both TP ranks by the sums of its
    parts' s0 and s3; a rank holding a part while another holds none is not compared."""
    from verl_offgrpo.sync.served_cast import compare_with_trainer, composed_fingerprints

    qkv = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    ranks = [{"l.q_proj.w": [2, "bfloat16", 1, 10, 100, 7], "n.w": [3, "bfloat16", 5, 50, 500, 9]},
             {"l.k_proj.w": [1, "bfloat16", 2, 20, 200, 8], "n.w": [1, "float32", 1, 1, 1, 1],
              "o.w": [4, "bfloat16", 6, 60, 600, 5]}]
    composed = composed_fingerprints(ranks, {"o.w"}, qkv)
    assert composed == {"l.qkv_proj.w": [3, "bfloat16", 3, 30, 300, 15], "o.w": [4, "bfloat16", 6, None, None, 5]}
    whole = [[{"rank": 0, "fingerprints": {"l.qkv_proj.w": [3, "bfloat16", 3, 30, 301, 15],
                                           "o.w": [4, "bfloat16", 6, 1, 2, 5]}}]]
    assert compare_with_trainer(whole, composed, None) == ([(0, [("l.qkv_proj.w", [0])])], {(0, "o.w")}, 2)
    parts = [[{"rank": 0, "fingerprints": {"l.qkv_proj.w": [2, "bfloat16", 1, 0, 0, 10]}},
              {"rank": 1, "fingerprints": {"l.qkv_proj.w": [1, "bfloat16", 2, 0, 0, 5]}}]]
    assert compare_with_trainer(parts, composed, None) == ([], {(0, "l.qkv_proj.w")}, 2)
    stale = [[parts[0][0], {"rank": 1, "fingerprints": {"l.qkv_proj.w": [1, "bfloat16", 2, 0, 0, 6]}}]]
    assert compare_with_trainer(stale, composed, None) == ([(0, [("l.qkv_proj.w", [0, 1])])], set(), 2)
    assert compare_with_trainer([[parts[0][0], {"rank": 1, "fingerprints": {}}]], composed, None) == ([], set(), 0)
    assert compare_with_trainer(stale, composed, set()) == ([], set(), 0)  # nothing trusted: nothing compared


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_pieces_cut_at_and_around_chunk_boundaries_add_up_to_the_whole(monkeypatch, dtype):
    """With 64-word chunks, pieces of a 300-element tensor cut at 63, 64, 65, 128 and inside a chunk, fingerprinted at
    their positions in it, sum (numel, s0, s1, s2 each) to the whole tensor's fingerprint: each word is counted with
    its chunk's multiplier and its position's weights in the whole (a float32 element is two words)."""
    monkeypatch.setattr(sw, "CHUNK", 64)
    t = torch.randn(300, generator=torch.Generator().manual_seed(3)).to(dtype)
    whole = sw.fingerprint([("t", t)])["t"]
    for cuts in ([0, 63, 300], [0, 64, 300], [0, 65, 128, 300], [0, 10, 20, 129, 191, 300], [0, 300]):
        pieces = sw.fingerprint_placed((str(i), t[a:b], a) for i, (a, b) in enumerate(zip(cuts, cuts[1:])))
        summed = [sum(fp[k] for fp in pieces.values()) for k in (0, 2, 3, 4, 5)]
        assert summed == [whole[0]] + whole[2:], cuts
    shifted = sw.fingerprint_placed([("a", t[:100], 0), ("b", t[100:], 101)])  # one position off: another sum
    assert [sum(fp[k] for fp in shifted.values()) for k in (3, 4)] != whole[3:5]
    assert [sum(fp[k] for fp in shifted.values()) for k in (2, 5)] == [whole[2], whole[5]]  # s0, s3: free of places


def test_views_of_fsdp1_with_use_orig_params_are_left_unplaced():
    """FSDP1 with ``use_orig_params=true`` shows each rank plain 1-D views of its shard, whose place in the whole tensor
    is not read: every piece is reported unplaced (the exact rule then compares none), not placed at 0; a plain module
    places every tensor whole at 0."""
    from verl_offgrpo.sync import sync_reached

    module = torch.nn.Sequential(torch.nn.Linear(3, 2))
    worker = SimpleNamespace(actor=SimpleNamespace(engine=SimpleNamespace(module=module)))
    assert sync_reached.actor_tensor_fingerprints(worker, "bfloat16")["unplaced"] == []
    module[0]._use_orig_params = True  # what FullyShardedDataParallel sets on itself
    assert sorted(sync_reached.actor_tensor_fingerprints(worker, "bfloat16")["unplaced"]) == ["0.bias", "0.weight"]
