"""benchmarks/learning_stats.py on synthetic curves whose answers are known by hand."""

from __future__ import annotations

import json

import pytest

import learning_stats as ls

SETTINGS = {"batch": 32, "n": 8}
ON_POLICY = {"v": 1, "i": 1, "batches": 1, "updates_per_step": 1}
REUSE = {"v": 1, "i": 10, "batches": 1, "updates_per_step": 10}
BIGBATCH = {"v": 1, "i": 1, "batches": 10, "updates_per_step": 10}


def linear(slope: float, horizon: int = 100, every: int = 10, start: float = 0.0, reward: float = 0.5) -> list[dict]:
    """Validated every ``every`` updates at a = min(1, start + slope·s); train reward ``reward`` every update."""
    rows = [{"step": 0, "train_reward": None, "val_pass1": start}]
    for s in range(1, horizon + 1):
        val = round(min(1.0, start + slope * s), 10) if s % every == 0 else None
        rows.append({"step": s, "train_reward": reward, "val_pass1": val, "bound_tv_token": 0.01 * (s % 2),
                     "clipfrac": 0.1 * (s % 2)})
    return rows


def test_bootstrap_of_two_values_has_the_hand_computed_percentiles():
    """Resampling [0, 1] gives means 0, ½, 1 with probabilities ¼, ½, ¼: the 2.5 % and 97.5 % percentiles are
    0 and 1. Equal values give a zero-width interval; one value gives none."""
    assert ls.bootstrap_mean([0.0, 1.0]) == {"mean": 0.5, "low": 0.0, "high": 1.0, "n": 2}
    assert ls.bootstrap_mean([0.3, 0.3, 0.3]) == {"mean": pytest.approx(0.3), "low": pytest.approx(0.3),
                                                  "high": pytest.approx(0.3), "n": 3}  # fmt: skip
    assert ls.bootstrap_mean([0.7, None]) == {"mean": 0.7, "low": None, "high": None, "n": 1}
    wide = ls.bootstrap_mean([0.1, 0.2, 0.3, 0.4, 0.5, 0.9])
    assert wide["mean"] == pytest.approx(0.4) and 0.1 < wide["low"] < 0.4 < wide["high"] < 0.9
    assert ls.bootstrap_mean([0.1, 0.2, 0.3, 0.4, 0.5, 0.9]) == wide  # a fixed RNG seed


def test_a_linear_curve_has_area_one_half_and_reaches_the_target_where_the_line_crosses_it():
    """a = s/100 over 0 … 100: the trapezoids are exact, AUC = ½; pass@1 0.6 first at update 60, i.e. after
    60·B·n samples for a one-batch-per-update config, 6·B·n for reuse (ten updates per batch) and again
    60·B·n for the big batch (ten batches, ten updates a step)."""
    rows = linear(0.01)
    out = ls.run_metrics(rows, ON_POLICY, SETTINGS, horizon=100, target=0.6)
    assert out["complete"] and out["final_acc"] == 1.0 and out["acc_auc"] == pytest.approx(0.5)
    assert (out["steps_to_target"], out["samples_to_target"], out["reached_target"]) == (60, 60 * 256, True)
    assert ls.run_metrics(rows, REUSE, SETTINGS, 100, 0.6)["samples_to_target"] == 6 * 256
    assert ls.run_metrics(rows, BIGBATCH, SETTINGS, 100, 0.6)["samples_to_target"] == 60 * 256
    assert out["reward_auc"] == 0.5 and out["drift_tv"] == pytest.approx(0.005) and out["clipfrac"] == pytest.approx(0.05)
    # over the first 50 updates: a ends at 0.5, the area is 0.25 per update
    half = ls.run_metrics(rows, ON_POLICY, SETTINGS, horizon=50, target=0.6)
    assert (half["final_acc"], half["acc_auc"], half["reached_target"], half["steps_to_target"]) == (0.5, pytest.approx(0.25), False, 50)


def test_a_step_curve_and_a_run_cut_before_the_horizon():
    """0.2 until update 40, 0.8 from 50 on: the trapezoid between 40 and 50 is (0.2 + 0.8)/2·10; AUC over
    0 … 100 = (40·0.2 + 5 + 50·0.8)/100 = 0.53. A run whose last validation is at 90 is not complete at 100."""
    rows = [{"step": s, "val_pass1": 0.2 if s <= 40 else 0.8, "train_reward": None} for s in range(0, 101, 10)]
    out = ls.run_metrics(rows, ON_POLICY, SETTINGS, horizon=100, target=0.75)
    assert out["acc_auc"] == pytest.approx(0.53) and out["steps_to_target"] == 50 and out["reward_auc"] is None
    cut = ls.run_metrics(rows[:-1], ON_POLICY, SETTINGS, horizon=100, target=0.75)
    assert not cut["complete"] and cut["final_acc"] is None and cut["acc_auc"] is None


def _learning(curves: dict[str, dict[str, list[dict]]], entries: dict[str, dict] | None = None) -> dict:
    entries = entries or {}
    return {"task": "t", "model": "m", "settings": SETTINGS,
            "configs": {name: {**entries.get(name, ON_POLICY), "seeds": seeds} for name, seeds in curves.items()}}


def test_paired_differences_rerun_noise_and_censoring():
    """Three seeds. off_policy_v10 = on_policy_mask + 0.05 at every validated point in every seed: its paired
    final-accuracy and AUC differences are 0.05 with a zero-width interval. The rerun differs from
    on_policy_mask by +0.02 / −0.02 / +0.02 at each point: the noise floor has mean |d| 0.02 and mean d 0.02/3.
    A config that never reaches the target is censored at the horizon in all three seeds."""
    slopes = {"0": 0.006, "1": 0.008, "2": 0.01}
    base = {s: linear(k, start=0.1) for s, k in slopes.items()}

    def shifted(rows, by):
        return [{**r, "val_pass1": None if r["val_pass1"] is None else r["val_pass1"] + by} for r in rows]

    curves = {
        "on_policy_mask": base,
        "off_policy_v10": {s: shifted(rows, 0.05) for s, rows in base.items()},
        "on_policy_mask_rerun": {s: shifted(rows, 0.02 if s != "1" else -0.02) for s, rows in base.items()},
        "flat": {s: linear(0.0, start=0.1) for s in slopes},
    }
    summary = ls.summarize(_learning(curves, {"on_policy_mask_rerun": {**ON_POLICY, "rerun_of": "on_policy_mask"}}),
                           horizon=100, target=0.5)  # fmt: skip
    assert sorted(summary["paired"]) == ["flat - on_policy_mask", "off_policy_v10 - on_policy_mask"]
    v10 = summary["paired"]["off_policy_v10 - on_policy_mask"]
    assert v10["seeds"] == ["0", "1", "2"]
    for q in ("final_acc", "acc_auc"):
        assert (v10[q]["mean"], v10[q]["low"], v10[q]["high"]) == pytest.approx((0.05, 0.05, 0.05))
    noise = summary["rerun_noise"]["on_policy_mask_rerun"]
    assert noise["acc_auc"]["abs_mean"] == pytest.approx(0.02) and noise["acc_auc"]["mean"] == pytest.approx(0.02 / 3)
    assert noise["acc_auc"]["low"] == pytest.approx(-0.02) and noise["acc_auc"]["high"] == pytest.approx(0.02)
    # on_policy_mask reaches 0.5 at 0.1 + k·s ≥ 0.5: s = 70 (k = .006, first validated s ≥ 66.7), 50, 40
    base_stats = summary["configs"]["on_policy_mask"]["over_seeds"]
    assert base_stats["steps_to_target"]["mean"] == pytest.approx((70 + 50 + 40) / 3) and base_stats["censored"] == 0
    flat = summary["configs"]["flat"]["over_seeds"]
    assert flat["censored"] == 3 and flat["steps_to_target"]["mean"] == 100  # censored at H: a lower bound
    assert summary["paired"]["flat - on_policy_mask"]["steps_to_target"]["mean"] == pytest.approx(100 - 160 / 3)
    assert "| off_policy_v10 - on_policy_mask | 0.05 [0.05, 0.05] (n=3)" in ls.table(summary)


def test_seeds_cut_before_the_horizon_leave_the_statistics_and_the_pairs():
    """A seed cut after update 89 (last validated at 80) leaves the config's statistics and its pairs at H = 100;
    the horizon every run reaches is 80."""
    curves = {"on_policy_mask": {"0": linear(0.01), "1": linear(0.01)[:90]}, "reuse_i10": {"0": linear(0.005), "1": linear(0.005)}}
    assert ls.common_horizon(_learning(curves)) == 80
    summary = ls.summarize(_learning(curves, {"reuse_i10": REUSE}), horizon=100, target=0.6)
    assert summary["configs"]["on_policy_mask"]["over_seeds"]["final_acc"]["n"] == 1
    assert summary["paired"]["reuse_i10 - on_policy_mask"]["seeds"] == ["0"]
    assert summary["paired"]["reuse_i10 - on_policy_mask"]["acc_auc"]["mean"] == pytest.approx(0.25 - 0.5)


def test_cli_writes_the_summary_and_refuses_unknown_pairs(tmp_path, capsys):
    path = tmp_path / "learning.json"
    path.write_text(json.dumps(_learning({"on_policy_mask": {"0": linear(0.01)}, "on_policy": {"0": linear(0.008)}})))
    assert ls.main(["--learning", str(path), "--out", str(tmp_path / "s.json")]) == 0  # horizon: both reach 100
    written = json.loads((tmp_path / "s.json").read_text())
    assert written["horizon"] == 100
    assert written["paired"]["on_policy - on_policy_mask"]["acc_auc"]["mean"] == pytest.approx(0.4 - 0.5)
    assert "on_policy - on_policy_mask" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ls.main(["--learning", str(path), "--pairs", "window_v10/on_policy"])
    assert ls.parse_pairs("a/b,c/d") == [("a", "b"), ("c", "d")]
    with pytest.raises(ValueError):
        ls.parse_pairs("a-b")


def lagged(drifts: list[float], v: int = 2, reward: float = 0.5) -> list[dict]:
    """A v-lag run: update s (1 …) at rollout lag (s − 1) mod v with bound drift ``drifts[s − 1]``; validated
    at 0 and at every multiple of 2."""
    rows = [{"step": 0, "train_reward": None, "val_pass1": 0.1, "rollout_lag": None, "bound_mean_abs_log_rprime": None}]
    for s, x in enumerate(drifts, start=1):
        rows.append({"step": s, "train_reward": reward, "val_pass1": 0.1 if s % 2 == 0 else None,
                     "rollout_lag": float((s - 1) % v), "bound_mean_abs_log_rprime": x})  # fmt: skip
    return rows


def test_drift_by_lag_averages_seed_window_units_and_pairs_the_same_updates():
    """v = 2, H = 4. off_policy_v10: seed 0 drifts 0.1, 0.3 | 0.1, 0.5 (| between windows) and a row past H
    (9.0, left out); seed 1 is cut after one window: 0.4, 0.6. Lag 0 units: 0.1, 0.1, 0.4, mean 0.2 (the mean
    of seed means would be 0.25); lag 1: 0.3, 0.5, 0.6, mean 1.4/3. window_v10 = off_policy_v10 + 0 at lag 0 and
    + 0.1 at lag 1 on seed 0's updates, and runs seed 1 for two windows: the pairs are seed 0's two windows and
    seed 1's first (n = 3), with differences 0 and 0.1 exactly. v = 1 configs and bigbatch's rows without a lag
    have no drift entry."""
    per_step = {"0": lagged([0.1, 0.3, 0.1, 0.5, 9.0]), "1": lagged([0.4, 0.6])}
    window = {"0": lagged([0.1, 0.4, 0.1, 0.6]), "1": lagged([0.4, 0.7, 0.2, 0.2])}
    lag2 = {**ON_POLICY, "v": 2}
    learning = _learning({"on_policy_mask": {"0": linear(0.01, horizon=4, every=2)}, "off_policy_v10": per_step,
                          "window_v10": window, "bigbatch_v10": {"0": linear(0.01, horizon=4, every=2)}},
                         {"off_policy_v10": lag2, "window_v10": lag2, "bigbatch_v10": BIGBATCH})  # fmt: skip
    drift = ls.drift_by_lag(learning, horizon=4)
    assert sorted(drift["configs"]) == ["off_policy_v10", "window_v10"] and drift["unit"] == "(seed, window)"
    lags = drift["configs"]["off_policy_v10"]["lags"]
    assert [(x["lag"], x["n"]) for x in lags] == [(0, 3), (1, 3)]
    assert lags[0]["mean"] == pytest.approx(0.2) and lags[1]["mean"] == pytest.approx(1.4 / 3)
    assert lags[0]["low"] == pytest.approx(0.1) and lags[0]["high"] == pytest.approx(0.4)  # P(mean 0.1) = 8/27, P(0.4) = 1/27: both > 2.5 %
    assert drift["configs"]["window_v10"]["lags"][0]["mean"] == pytest.approx((0.1 + 0.1 + 0.4 + 0.2) / 4)
    diff = drift["paired"]["window_v10 - off_policy_v10"]
    assert diff["seeds"] == ["0", "1"]
    assert [(x["n"], x["mean"], x["low"], x["high"]) for x in diff["lags"]] == [
        (3, pytest.approx(0.0), pytest.approx(0.0), pytest.approx(0.0)),
        (3, pytest.approx(0.1), pytest.approx(0.1), pytest.approx(0.1))]  # fmt: skip
    # the drift summary rides in summarize's output; the markdown lists lag rows with one column per config and pair
    summary = ls.summarize(learning, horizon=4, target=0.6)
    assert summary["drift_by_lag"] == drift
    text = ls.lag_table(summary)
    assert "| lag | off_policy_v10 | window_v10 | window_v10 - off_policy_v10 |" in text
    assert "| 1 | 0.467 [0.3, 0.6] (n=3) | " in text  # 0.3 and 0.6 thrice: 1/27 each
    assert text.endswith("| 0.1 [0.1, 0.1] (n=3) |")


def test_drift_by_lag_resamples_windows_not_seeds_and_refuses_pairs_of_different_v():
    """One seed, two windows at lag 0 with drifts 0 and 1: resampling the two windows gives the interval [0, 1]
    (one over seeds would have none). A pair is by update: a per_step run whose lags start one update later
    (lag 0 at update 2) shares no (window start, lag) with the window run and gives no differences. Pairs need
    one v; v = 3 runs get lag rows 0 … 2 and the table '–' where the v = 2 column ends."""
    two = {**ON_POLICY, "v": 2}
    learning = _learning({"window_v10": {"0": lagged([0.0, 0.5, 1.0, 0.5])},
                          "off_policy_v10": {"0": [{**r, "rollout_lag": None if r["step"] < 2 else float(r["step"] % 2)}
                                                   for r in lagged([0.0, 0.5, 1.0, 0.5])]}},
                         {"window_v10": two, "off_policy_v10": two})  # fmt: skip
    drift = ls.drift_by_lag(learning, horizon=4)
    assert drift["configs"]["window_v10"]["lags"][0] == {"lag": 0, "mean": 0.5, "low": 0.0, "high": 1.0, "n": 2}
    # off_policy_v10: lag 0 at updates 2, 4 (window starts 2, 4), lag 1 at 3 (start 2): none is a start of window_v10's
    assert [x["n"] for x in drift["paired"]["window_v10 - off_policy_v10"]["lags"]] == [0, 0]
    three = _learning({"window_v10": {"0": lagged([0.1] * 6, v=3)}, "off_policy_v10": {"0": lagged([0.2] * 6)}},
                      {"window_v10": {**ON_POLICY, "v": 3}, "off_policy_v10": two})  # fmt: skip
    with pytest.raises(ValueError):
        ls.drift_by_lag(three, horizon=6)
    alone = ls.drift_by_lag(three, horizon=6, pairs=())
    assert [x["n"] for x in alone["configs"]["window_v10"]["lags"]] == [2, 2, 2] and alone["paired"] == {}
    assert "| 2 | 0.1 [0.1, 0.1] (n=2) | – |" in ls.lag_table({"drift_by_lag": alone})


def test_cli_prints_the_lag_table_only_with_lagged_configs(tmp_path, capsys):
    """Without a v > 1 config the output is the main table alone, as before; with one, the lag table follows it
    and the JSON carries ``drift_by_lag``."""
    path = tmp_path / "learning.json"
    plain = _learning({"on_policy_mask": {"0": linear(0.01)}})
    path.write_text(json.dumps(plain))
    assert ls.main(["--learning", str(path)]) == 0
    assert capsys.readouterr().out == ls.table(ls.summarize(plain, 100, 0.6)) + "\n"
    lag = _learning({"on_policy_mask": {"0": linear(0.01, horizon=4, every=2)}, "off_policy_v10": {"0": lagged([0.1, 0.3, 0.1, 0.5])}},
                    {"off_policy_v10": {**ON_POLICY, "v": 2}})  # fmt: skip
    path.write_text(json.dumps(lag))
    assert ls.main(["--learning", str(path), "--out", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert out.index("| off_policy_v10 - on_policy_mask |") < out.index("Drift per rollout lag") and "| 1 | 0.4 [0.3, 0.5] (n=2) |" in out
    written = json.loads((tmp_path / "s.json").read_text())["drift_by_lag"]
    assert written["horizon"] == 4 and written["configs"]["off_policy_v10"]["lags"][0]["mean"] == pytest.approx(0.1)


#: the REC/RED pairs the results page quotes (issue 33), each against its off_grpo row at the same v
REC_PAIRS = ("rec_oneside_noIS/off_policy_v10,rec_oneside_wide/off_policy_v10,red_weight/off_policy_v10,"
             "rec_oneside_wide/rec_oneside_noIS,rec_oneside_noIS_v1/on_policy_mask,red_weight_v1/on_policy_mask,"
             "rec_oneside_wide_v1/on_policy_mask,rec_oneside_wide_v1/rec_oneside_noIS_v1")


def test_the_committed_rec_pairs_are_what_the_script_derives(tmp_path):
    """results/learning_largest4/learning_stats_rec.json = learning_stats.py --pairs REC_PAIRS (the common horizon) over the
    committed learning.json; the page's headline pair (REC-OneSide-NoIS − off_grpo at v = 10) is in it."""
    from pathlib import Path

    folder = Path(ls.__file__).parent / "results" / "learning_largest4"
    out = tmp_path / "rec.json"
    ls.main(["--learning", str(folder / "learning.json"), "--pairs", REC_PAIRS, "--out", str(out)])
    committed = json.loads((folder / "learning_stats_rec.json").read_text())
    assert json.loads(out.read_text()) == committed
    area = committed["paired"]["rec_oneside_noIS - off_policy_v10"]["acc_auc"]
    assert round(area["mean"], 3) == -0.029 and area["n"] == 3
