"""``ugrpo reproduce``: smoke scale end to end (report, inline images, Claims, resume) and the paper-scale guard."""

from __future__ import annotations

import base64
import json
import re

import pytest

from .conftest import results, run_cli


@pytest.fixture(scope="module")
def repro_task(task_args, tmp_path_factory) -> list[str]:
    """The shared custom task plus a held-out file (the sweeps evaluate on it)."""
    ev = tmp_path_factory.mktemp("task_eval") / "eval.jsonl"
    ev.write_text("".join(json.dumps({"prompt": f"{i}*2=", "answer": str(2 * i)}) + "\n" for i in range(6)))
    return [*task_args, "--task-option", f"eval_path={ev}"]


def test_reproduce_smoke_end_to_end_and_resume(tmp_path, capsys, tiny_model_dir, repro_task):
    """Every part runs; report.html has inline PNGs and a verdict per claim; a rerun skips finished parts."""
    out = tmp_path / "r"
    argv = ["reproduce", "--scale", "smoke", "--model-override", tiny_model_dir, *repro_task, "--no-progress",
            "--out", out]
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert "total time" in stdout
    for sub in ("fig4/base", "fig4/instruct", "fig4/fewshot", "fig5", "table2", "thm8"):
        assert (out / sub / "results.json").is_file(), sub
    report = (out / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', report)
    assert len(images) == 3 + 2 + 1 + 1  # three Fig. 4 strengths, Fig. 5 (accuracy, pass@1), Table 2, Theorem 8
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "<h2>Claims</h2>" in report and "<b>0.7817</b>" in report  # the paper's Table 2 beside ours
    # the empirical best G per checkpoint (both sweeps, both metrics) and the planner's G* beside it
    assert report.count("Empirical best G per checkpoint") == 4 and report.count("Among the swept G") == 2
    t2 = results(out / "table2")
    # the smoke scale's 2 x 4 pilot: with 2 prompts the bootstrap over prompts cannot estimate c1's uncertainty, so no
    # G* (it used to name one, with a zero-width interval), and the report says why
    assert t2["planner"]["g_star_swept"] is None and "single distinct prompt" in t2["planner"]["band"]["cannot_tell"]
    assert "Among the swept G: <b>no G* (the pilot cannot tell: with B0 = 2 pilot prompts" in report
    for b in (b for b in t2["best_G"] if b["checkpoint"] > 0 and b["metric"] == "eval_accuracy"):
        assert f"<tr><td>{b['budget']}</td><td>{b['checkpoint']}</td><td>{b['G']}</td>" in report
    res = results(out)
    # smoke scale (3 repetitions per G, one seed per (N, G), 16 runs of Theorem 8): no claim can be decided
    assert [c["verdict"] for c in res["claims"]] == ["too small to decide"] * 5
    assert all("3 repetitions per G" in c["evidence"] for c in res["claims"][:3])
    assert "one seed" in res["claims"][3]["evidence"] and "too few runs" in res["claims"][4]["evidence"]
    assert f"fig4: base ran, instruct ran, fewshot ran (one model for all three: {tiny_model_dir})" in stdout
    assert "trained 2 runs" in stdout and "finished runs reused" not in stdout  # says what the sweeps really did
    assert res["actions"]["fig5"] == "trained 2 runs" and res["actions"]["table2"] == "trained 4 runs"

    stamps = {p: (out / p / "results.json").stat().st_mtime_ns for p in ("fig4/base", "thm8")}
    run_mtime = (out / "fig5" / "runs" / "N8-G2-s0" / "results.json").stat().st_mtime_ns
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert "fig4/base: finished earlier, skipped" in stdout and "thm8: finished earlier, skipped" in stdout
    assert {p: (out / p / "results.json").stat().st_mtime_ns for p in stamps} == stamps
    assert (out / "fig5" / "runs" / "N8-G2-s0" / "results.json").stat().st_mtime_ns == run_mtime
    assert results(out)["actions"]["thm8"] == "skipped"
    assert results(out)["actions"]["fig5"] == "reused 2 finished runs"


def test_reproduce_skip_and_bad_inputs(tmp_path, capsys, tiny_model_dir, repro_task):
    out = tmp_path / "s"
    rc, _, err = run_cli(["reproduce", "--scale", "smoke", "--model-override", tiny_model_dir, *repro_task,
                          "--skip", "fig4,fig5,table2", "--no-progress", "--out", out], capsys)
    assert rc == 0, err
    res = results(out)
    assert not (out / "fig4").exists() and res["actions"]["fig4"] == "skipped (--skip)"
    assert res["claims"][0]["verdict"] == "cannot tell" and "not run" in res["claims"][0]["evidence"]
    rc, _, err = run_cli(["reproduce", "--scale", "smoke", "--skip", "fig6", "--out", tmp_path / "b"], capsys)
    assert rc == 2 and "--skip: unknown part(s) fig6; choose from" in err


def test_reproduce_paper_without_weights_fails_fast(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    rc, _, err = run_cli(["reproduce", "--scale", "paper", "--out", tmp_path / "p"], capsys)
    assert rc == 2
    assert "--scale paper cannot run" in err and "Qwen/Qwen2.5-Math-7B" in err and "hf download" in err
    assert not (tmp_path / "p").exists()  # nothing written before the check


def _fig4_part(reps: int, ratio_ci: tuple[float, float]) -> dict:
    row = {"estimator": "grpo", "G": 32, "mse": 10.0, "ci_low": 9.0, "ci_high": 11.0}
    return {"config": {"reps": reps}, "policy": {"accuracy": 0.3}, "rows": [row],
            "comparisons": [{"G": 32, "vanilla_minus_grpo": {"mean": 2.0, "ci_low": 1.0, "ci_high": 3.0},
                             "grpo_over_oracle": {"ratio": sum(ratio_ci) / 2, "ci_low": ratio_ci[0],
                                                  "ci_high": ratio_ci[1]}}]}


def _thm8_part(se: float) -> dict:
    fit = {"mean": 0.08, "se": se, "predicted_mean": 0.078, "ks_p": 0.5, "cvm_p": 0.5, "z": 0.5}
    bad = {"mean": 0.08, "se": se, "predicted_mean": 0.009, "ks_p": 1e-100, "cvm_p": 1e-100, "z": 40.0}
    return {"cells": [{"estimator": "grpo", "G": 4, "fit": {"corrected": fit, "printed": bad}}]}


def test_too_small_to_decide_rules_and_adequate_runs_still_decide():
    """The power rules (docs/reproduce.md): reps < 10, a ratio interval wider than +-10%, one seed, and a Theorem 8
    mean known to worse than +-25% give 'too small to decide'; runs as large as the tiny scale's get a verdict."""
    from ugrpo.experiments.reproduce.claims import claims

    fig4 = {s: _fig4_part(30, (0.99, 1.02)) for s in ("base", "instruct", "fewshot")}
    got = claims({"fig4": fig4, "thm8": _thm8_part(0.004)})  # the tiny scale's precision: 1.96 SE / E ~ 10%
    assert [c["verdict"] for c in got] == ["supports", "supports", "cannot tell", "cannot tell", "supports"]
    few = {s: _fig4_part(9, (0.99, 1.02)) for s in fig4}
    assert {c["verdict"] for c in claims({"fig4": few})[:3]} == {"too small to decide"}
    wide = {**fig4, "base": _fig4_part(30, (0.85, 1.08))}  # ends below 1.10 but cannot resolve +-10%
    assert claims({"fig4": wide})[1]["verdict"] == "too small to decide"
    thm8 = claims({"thm8": _thm8_part(0.011)})[4]  # 1.96 * 0.011 = 0.0216 > 25% of 0.078
    assert thm8["verdict"] == "too small to decide" and "too few runs" in thm8["evidence"]
    assert claims({"thm8": _thm8_part(0.0099)})[4]["verdict"] == "supports"  # 0.0194 < 0.0195
