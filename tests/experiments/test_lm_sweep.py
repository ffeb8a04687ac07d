"""``ugrpo sweep --config``: a fixed-budget G sweep of the LM trainer (files, resume, aggregate, errors)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TESTS_TRAIN = str(Path(__file__).resolve().parents[1] / "train")
if TESTS_TRAIN not in sys.path:  # ``dense_reward`` (the task's reward_fn) and ``train_helpers``
    sys.path.insert(0, TESTS_TRAIN)

from train_helpers import EVAL_PROMPTS, TRAIN_PROMPTS, small_config, write_jsonl  # noqa: E402

from .conftest import assert_png, results, run_cli  # noqa: E402

SWEEP = ["--budget", "8", "--groups", "2,4", "--steps", "4", "--no-progress"]


@pytest.fixture(scope="module")
def lm_config(tmp_path_factory, tiny_model_dir) -> Path:
    """A YAML config: random tiny model, dense-reward custom task, eval at steps 0, 2, 4, checkpoints every 2."""
    d = tmp_path_factory.mktemp("lmsweep")
    files = write_jsonl(d / "train.jsonl", TRAIN_PROMPTS), write_jsonl(d / "eval.jsonl", EVAL_PROMPTS)
    cfg = small_config(tiny_model_dir, files, eval__pass1_samples=2)
    path = d / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _evals(folder: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "eval_accuracy" in r}


def test_lm_sweep_files_aggregate_and_resume(tmp_path, capsys, lm_config):
    out = tmp_path / "sw"
    argv = ["sweep", "--config", lm_config, *SWEEP, "--seeds", "2", "--out", out]
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    for f in ("config.json", "results.json", "sweep.png", "sweep_pass1.png", "report.md"):
        assert (out / f).exists(), f
    assert_png(out / "sweep.png")
    names = [f"N8-G{G}-s{s}" for G in (2, 4) for s in (0, 1)]
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(names)
    for n in names:
        cfg = json.loads((out / "runs" / n / "config.json").read_text())
        G, s = int(n.split("-")[1][1:]), int(n[-1])
        assert (cfg["budget"]["samples_per_step"], cfg["budget"]["group_size"], cfg["seed"], cfg["steps"]) == (8, G, s,
                                                                                                               4)
        assert (out / "runs" / n / "results.json").exists()
    res = results(out)
    assert res["checkpoints"] == [0, 2, 4]
    assert [r["action"] for r in res["runs"]] == ["started"] * 4
    assert len(res["rows"]) == 2 * 3 * 2  # (G, checkpoint, metric)
    # the aggregate equals a hand computation from the runs' metrics: mean and t_{0.975,1} = 12.7062 interval
    for r in res["rows"]:
        vals = [_evals(out / "runs" / f"N8-G{r['G']}-s{s}")[r["checkpoint"]][r["metric"]] for s in (0, 1)]
        m = (vals[0] + vals[1]) / 2
        half = 12.706204736174698 * abs(vals[0] - vals[1]) / 2  # s/sqrt(2) = |a-b|/2 for n = 2
        assert r["mean"] == pytest.approx(m, abs=1e-12) and r["seeds"] == 2 and r["B"] == 8 // r["G"]
        assert (r["ci_low"], r["ci_high"]) == (pytest.approx(m - half, abs=1e-9), pytest.approx(m + half, abs=1e-9))
    for b in res["best_G"]:
        cell = [r for r in res["rows"] if (r["checkpoint"], r["metric"]) == (b["checkpoint"], b["metric"])]
        top = max(r["mean"] for r in cell)
        assert b["G"] == min(r["G"] for r in cell if r["mean"] == top)
        assert b["tied"] == [r["G"] for r in cell if r["mean"] == top and r["G"] != b["G"]]
    report = (out / "report.md").read_text()
    assert "Table 2" in report and "**" in report and "empirical best G" in stdout

    # rerun: every run is skipped (results.json untouched), nothing is trained again
    mtimes = {n: (out / "runs" / n / "results.json").stat().st_mtime_ns for n in names}
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert "4 started" not in stdout and "0 started, 0 resumed, 4 skipped" in stdout
    assert {n: (out / "runs" / n / "results.json").stat().st_mtime_ns for n in names} == mtimes
    assert results(out)["rows"] == res["rows"]

    # a changed training config in the same folder is an error naming the field
    rc, _, err = run_cli([*argv, "--set", "optim.lr=0.5"], capsys)
    assert rc == 2 and "optim.lr = 0.01" in err and "optim.lr = 0.5" in err and "new --out" in err, err


def test_lm_sweep_takes_dotted_overrides(tmp_path, capsys, lm_config):
    """``ugrpo sweep --config FILE --optim.lr 0.05``: the same override syntax as ``ugrpo train``, applied to every
    run (and ``--set`` still works); an unknown dotted field is an error naming the closest one. The report's header
    and results.json name the task with its effective options, a ``--task.options.*`` override included."""
    out = tmp_path / "dot"
    argv = ["sweep", "--config", lm_config, "--budget", "8", "--groups", "4", "--seeds", "1", "--steps", "1",
            "--no-progress", "--out", out]
    rc, _, err = run_cli([*argv, "--optim.lr", "0.05", "--eval.every", "0", "--set", "optim.grad_clip=2.5",
                          "--task.options.timeout", "7"], capsys)
    assert rc == 0, err
    cfg = json.loads((out / "runs" / "N8-G4-s0" / "config.json").read_text())
    assert cfg["optim"]["lr"] == 0.05 and cfg["optim"]["grad_clip"] == 2.5 and cfg["eval"]["every"] == 0
    assert results(out)["task"] == {"name": "custom", "options": cfg["task"]["options"]}
    assert cfg["task"]["options"]["timeout"] == 7
    line = next(x for x in (out / "report.md").read_text().splitlines() if x.startswith("Config "))
    assert f"model `{cfg['model']['name']}`, task `custom` (" in line and "timeout=7" in line, line
    rc, _, err = run_cli([*argv[:-1], tmp_path / "bad", "--optim.lrr", "1"], capsys)
    assert rc == 2 and "unknown config key 'optim.lrr'" in err and "optim.lr" in err, err
    rc, _, err = run_cli([*argv[:-1], tmp_path / "bad", "--budget.group_size", "2"], capsys)
    assert rc == 2 and "the sweep sets budget.group_size itself" in err, err


def test_lm_sweep_resumes_interrupted_run(tmp_path, capsys, lm_config):
    """A run killed after its step-2 checkpoint resumes from it and ends as if never interrupted."""
    from ugrpo.train.config import load_config
    from ugrpo.train.loop import train

    pairs = [("steps", 4), ("budget.samples_per_step", 8), ("budget.group_size", 4), ("seed", 0)]
    cfg = load_config(lm_config, pairs)
    ref = tmp_path / "ref"
    train(cfg, ref)

    out = tmp_path / "sw"
    folder = out / "runs" / "N8-G4-s0"

    def stop(step, row):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, folder, on_step=stop)
    assert not (folder / "results.json").exists() and (folder / "checkpoints" / "step-2").is_dir()
    dead = out / "runs" / "N8-G4-s1"  # died before its first checkpoint (step 2): restarted from scratch

    def die(step, row):
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(load_config(lm_config, pairs[:-1] + [("seed", 1)]), dead, on_step=die)
    assert (dead / "metrics.jsonl").is_file() and not (dead / "checkpoints" / "step-2").exists()
    rc, stdout, err = run_cli(["sweep", "--config", lm_config, "--budget", "8", "--groups", "4", "--steps", "4",
                               "--seeds", "2", "--no-progress", "--out", out], capsys)
    assert rc == 0, err
    assert "1 started, 1 resumed, 0 skipped" in stdout
    steps = [json.loads(x)["step"] for x in (dead / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert steps == [0, 1, 2, 3, 4]  # started over in place: the dead run's rows replaced, none duplicated
    assert _evals(folder).keys() == _evals(ref).keys() == {0, 2, 4}
    for step, row in _evals(ref).items():
        got = _evals(folder)[step]
        assert (got["eval_accuracy"], got["eval_pass1"]) == (row["eval_accuracy"], row["eval_pass1"])
    assert json.loads((folder / "results.json").read_text())["final_eval_pass1"] == pytest.approx(
        json.loads((ref / "results.json").read_text())["final_eval_pass1"])


def test_lm_sweep_pool_and_ray_equal_in_process(tmp_path, capsys, lm_config):
    """Two spawn workers, and a local Ray with 2 workers (one task per run), give the same runs as one
    in-process worker (seeded trainer); one seed: no interval. The config's reward function lives in a
    test module on sys.path, so the Ray tasks also show that the driver's import paths reach them."""
    outs = {}
    for label, extra in (("inproc", ["--workers", "1"]), ("pool", ["--workers", "2"]),
                         ("ray", ["--ray", "--workers", "2"])):
        outs[label] = tmp_path / label
        rc, stdout, err = run_cli(["sweep", "--config", lm_config, "--budget", "8", "--groups", "2,4", "--steps", "2",
                                   "--seeds", "1", *extra, "--no-progress", "--out", outs[label]], capsys)
        assert rc == 0, err
        assert "no intervals" in stdout
    ref = outs["inproc"]
    for label in ("pool", "ray"):
        for n in ("N8-G2-s0", "N8-G4-s0"):
            got, want = _evals(outs[label] / "runs" / n), _evals(ref / "runs" / n)
            assert got.keys() == want.keys() == {0, 2}
            for step, row in want.items():
                assert (got[step]["eval_accuracy"], got[step]["eval_pass1"]) == (row["eval_accuracy"],
                                                                                  row["eval_pass1"])
            log = (outs[label] / "runs" / n / "train.log").read_text()
            assert "step 2 " in log, log  # the step lines, without the training bar's redraws (the sweep has one)
            assert "step/s" not in log and "\r" not in log, log
            a = json.loads((outs[label] / "runs" / n / "results.json").read_text())
            b = json.loads((ref / "runs" / n / "results.json").read_text())
            assert a["final_eval_pass1"] == b["final_eval_pass1"]
        assert [r["mean"] for r in results(outs[label])["rows"]] == [r["mean"] for r in results(ref)["rows"]]
    assert all(r["ci_low"] is None for r in results(ref)["rows"])
    assert json.loads((outs["ray"] / "config.json").read_text())["ray"] == {
        "address": None, "cpus_per_run": 1.0, "gpus_per_run": 0.0}


def test_ray_flags_and_missing_ray(tmp_path, capsys, lm_config, monkeypatch):
    base = ["sweep", "--config", lm_config, "--budget", "8", "--groups", "4", "--no-progress", "--out", tmp_path / "o"]
    rc, _, err = run_cli(base + ["--ray-gpus", "1"], capsys)
    assert rc == 2 and "--ray-gpus only apply with --ray" in err, err
    rc, _, err = run_cli(base + ["--ray", "--ray-cpus", "0"], capsys)
    assert rc == 2 and "--ray-cpus must be > 0" in err, err
    rc, _, err = run_cli(["sweep", "--ray", "--budget", "8", "--groups", "4", "--out", tmp_path / "e"], capsys)
    assert rc == 2 and "--ray need --config" in err, err
    from ray._private.services import find_gcs_addresses

    if not find_gcs_addresses():  # 'auto' joins ANY Ray instance running on the machine (another user's sweep, say)
        rc, _, err = run_cli(base + ["--ray", "--ray-address", "auto"], capsys)
        assert rc == 2 and "--ray-address auto: no Ray cluster there" in err and "ray start --head" in err, err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    rc, _, err = run_cli(base + ["--ray"], capsys)
    assert rc == 2 and "pip install 'ugrpo[ray]'" in err, err
    assert not (tmp_path / "o" / "runs").exists()  # nothing trained


@pytest.mark.parametrize(
    "extra, expect",
    [
        (["--budget", "8", "--groups", "3,4"], "G=3 does not divide the budget N=8"),
        (["--budget", "8,12", "--groups", "4,8"], "G=8 does not divide the budget N=12"),
        (["--budget", "8", "--groups", "4", "--env", "builtin:demo"], "mutually exclusive"),
        (["--budget", "8", "--groups", "4", "--lr", "0.1"], "mutually exclusive"),
        (["--budget", "8", "--groups", "4", "--set", "budget.group_size=2"], "the sweep sets budget.group_size"),
        (["--budget", "8", "--groups", "4", "--set", "optim.lrr=1"], "optim.lrr"),
        (["--budget", "8", "--groups", "4", "--set", "nonsense"], "expected KEY=VALUE"),
        (["--budget", "8", "--groups", "4", "--plan-pilot", "4"], "two numbers B0,G0"),
    ],
)
def test_lm_sweep_bad_inputs_before_any_work(tmp_path, capsys, lm_config, extra, expect):
    rc, _, err = run_cli(["sweep", "--config", lm_config, *extra, "--no-progress", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and err.startswith("ugrpo sweep: error:") and expect in err, err
    assert not (tmp_path / "o" / "runs").exists()  # nothing trained


def test_env_only_flags_need_config(tmp_path, capsys):
    rc, _, err = run_cli(["sweep", "--budget", "8", "--groups", "4", "--workers", "2", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "--workers need --config" in err


def test_lm_sweep_planner(tmp_path, capsys, lm_config):
    """--plan-pilot runs the LM planner once at the initial model; its G* among the swept G is the bound's argmin."""
    from ugrpo.stats.planner import bound

    out = tmp_path / "p"
    argv = ["sweep", "--config", lm_config, "--budget", "4,8", "--groups", "2,4", "--steps", "2", "--seeds", "1",
            "--plan-pilot", "4,4", "--no-progress", "--out", out]
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    plan = results(out / "plan")
    pl = results(out)["planner"]
    assert (out / "plan" / "pilot.npz").exists() and pl["pilot"] == [4, 4] and pl["g_star"] == plan["g_star"]
    c = [max(plan[k]["estimate"], 0.0) for k in ("c1", "c2", "c3")]
    expect = min([2, 4], key=lambda g: bound(*c, 4, g)) if plan["c1_distinguishable_from_zero"] else None
    assert pl["g_star_swept"] == expect
    report = (out / "report.md").read_text()  # Table 2: one row per budget, the best of each row in bold
    table = report.split("## Table 2 (eval_accuracy")[1].split("![")[0]
    lines = [x for x in table.splitlines() if x.startswith("| 4 |") or x.startswith("| 8 |")]
    assert len(lines) == 2, table
    for x in lines:
        cells = [c.strip() for c in x.strip().strip("|").split("|")][1:]
        vals = [float(c.strip("*")) for c in cells]
        assert [c.startswith("**") for c in cells] == [v == max(vals) for v in vals], x
    assert "planner G*" in stdout and "Planner (Theorem 7" in (out / "report.md").read_text()
    mtime = (out / "plan" / "results.json").stat().st_mtime_ns
    rc, _, err = run_cli(argv, capsys)  # rerun: the pilot is not sampled again
    assert rc == 0 and (out / "plan" / "results.json").stat().st_mtime_ns == mtime, err


def test_table2_and_t_interval_closed_forms():
    """Table 2 marks the best G per budget at the last checkpoint; the t-interval matches scipy's formula."""
    from ugrpo.report.sweep import table2
    from ugrpo.stats.intervals import t_interval

    rows = [{"budget": N, "G": G, "checkpoint": c, "metric": "eval_accuracy", "mean": v}
            for N, G, c, v in [(8, 2, 0, 0.9), (8, 4, 0, 0.1), (8, 2, 5, 0.25), (8, 4, 5, 0.5),
                               (16, 2, 5, 0.75), (16, 4, 5, 0.125)]]
    res = {"rows": rows, "checkpoints": [0, 5], "config": {"groups": [2, 4], "budgets": [8, 16]}}
    head, body = table2(res, "eval_accuracy")
    assert head == ["budget N", "G=2", "G=4"]
    assert body == [[8, "0.250", "**0.500**"], [16, "**0.750**", "0.125"]]
    st = t_interval([1.0, 2.0, 6.0])  # mean 3, s = sqrt(7), t_{0.975,2} = 4.302652729696142
    half = 4.302652729696142 * 7 ** 0.5 / 3 ** 0.5
    assert st.estimate == 3.0 and st.ci_low == pytest.approx(3 - half) and st.ci_high == pytest.approx(3 + half)
    assert t_interval([0.4]).ci_low is None


def test_best_g_overlap_and_table():
    """The best G per (N, checkpoint) lists exactly the G whose 95% interval overlaps its own; the per-checkpoint
    table drops step 0 and carries the planner's G* among the swept G."""
    from ugrpo.experiments.sweep.lm_aggregate import best_lm_groups
    from ugrpo.report.sweep import best_g_table, swept_g_star

    def row(G, c, mean, lo, hi):
        return {"budget": 8, "G": G, "checkpoint": c, "metric": "eval_accuracy", "mean": mean, "ci_low": lo,
                "ci_high": hi, "seeds": 3}

    rows = [row(2, 0, 0.4, 0.4, 0.4), row(4, 0, 0.4, 0.4, 0.4), row(8, 0, 0.4, 0.4, 0.4),
            row(2, 5, 0.50, 0.45, 0.55), row(4, 5, 0.60, 0.56, 0.64), row(8, 5, 0.40, 0.30, 0.559)]
    best = {b["checkpoint"]: b for b in best_lm_groups(rows)}
    assert (best[5]["G"], best[5]["overlapping"], best[5]["tied"]) == (4, [], [])  # 0.55 < 0.56 and 0.559 < 0.56
    assert (best[0]["G"], best[0]["tied"], best[0]["overlapping"]) == (2, [4, 8], [4, 8])
    rows[-1] = row(8, 5, 0.40, 0.30, 0.56)  # touching intervals count as overlapping
    assert best_lm_groups(rows)[-1]["overlapping"] == [8]
    res = {"best_G": best_lm_groups(rows), "planner": {"g_star_swept": 4, "g_star": 4}}
    head, body = best_g_table(res, "eval_accuracy")
    assert head[-1] == "planner G*" and body == [[8, 5, 4, 0.6, "[0.56, 0.64]", "8", 4]]
    assert swept_g_star({"g_star_swept": 4}) == "G* = 4" and swept_g_star({"g_star_swept": None}).startswith("no G*")
    one = [dict(r, ci_low=None, ci_high=None, seeds=1) for r in rows]
    assert best_g_table({"best_G": best_lm_groups(one), "planner": None}, "eval_accuracy")[1] == [
        [8, 5, 4, 0.6, "-", "-", "-"]]


def test_ray_sweep_ctrl_c_then_resume(tmp_path, lm_config):
    """Ctrl-C (SIGINT) during a Ray sweep run from the shell: exit 130 within seconds, the Ray tasks are cancelled,
    the run keeps its checkpoints, and the same command resumes it from the last one to the end."""
    import signal
    import subprocess
    import time

    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "ugrpo.cli", "sweep", "--config", str(lm_config), "--budget", "8", "--groups", "4",
           "--seeds", "1", "--steps", "200", "--eval.every", "100", "--ray", "--workers", "1", "--no-progress",
           "--out", str(out)]  # evaluated at steps 0, 100, 200 (every 2 would make the resume the slowest test)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS_TRAIN, os.environ.get("PYTHONPATH", "")])}
    # a shell's background job inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
    # restore the default so that the child sees Ctrl-C as a terminal user's process does, however pytest was started
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ckpt = out / "runs" / "N8-G4-s0" / "checkpoints"
    deadline = time.time() + 240
    while not (ckpt.is_dir() and any(ckpt.glob("step-*/state.json"))) and p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert p.poll() is None, "the run finished before it could be interrupted: raise --steps"
    p.send_signal(signal.SIGINT)
    log, _ = p.communicate(timeout=60)
    assert p.returncode == 130, log
    assert "interrupted: finished runs are in" in log and "rerun the same command to resume" in log
    assert log.count("interrupted") == 1, log  # the sweep's own message, not also the CLI's generic one
    run = out / "runs" / "N8-G4-s0"
    assert not (run / "results.json").exists()
    done = max(int(d.name[5:]) for d in ckpt.glob("step-*") if (d / "state.json").is_file())
    assert 2 <= done < 200
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 resumed" in p.stdout and (run / "results.json").is_file()
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert steps == sorted(set(steps)) and steps[-1] == 200  # resumed rows replace, never duplicate


def test_accuracy_intervals_stay_in_0_1_and_say_they_were_cut():
    """Three seeds near 0 or 1: the t-interval leaves [0, 1]; with the accuracy's bounds it is cut, and marked."""
    from ugrpo.experiments.sweep.lm_aggregate import aggregate_lm
    from ugrpo.stats.intervals import t_interval

    def run(G, seed, acc):
        return {"budget": 8, "G": G, "seed": seed, "name": f"G{G}-s{seed}", "evals": {4: {"eval_accuracy": acc,
                                                                                          "eval_pass1": acc}}}

    runs = [run(2, s, v) for s, v in enumerate((0.0, 0.0, 0.1))] + [run(4, s, v) for s, v in enumerate((1.0, 0.9, 1.0))]
    assert t_interval([0.0, 0.0, 0.1]).ci_low < 0 and t_interval([1.0, 0.9, 1.0]).ci_high > 1
    _, raw = aggregate_lm(runs)
    assert any(r["ci_low"] < 0 or r["ci_high"] > 1 for r in raw)  # a custom reward's mean is not cut
    _, rows = aggregate_lm(runs, bounds=(0.0, 1.0))
    assert len(rows) == 4
    for r, q in zip(rows, raw):
        assert 0.0 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 1.0
        assert r["clipped"] and (r["ci_low"], r["ci_high"]) == (max(q["ci_low"], 0.0), min(q["ci_high"], 1.0))


def test_lm_sweep_tells_of_scoring_errors_once_and_not_of_answerless_completions(tmp_path, capsys, lm_config):
    """A run's scoring warning goes to its own train.log; the sweep sums the scoring errors of every run's
    metrics.jsonl and says so once, on the console (stderr) and in report.md: how many runs, the totals by kind, where
    to read them. Here the reward function raises on every held-out batch (eval_n_errors) and never in training. A
    reward that returns None for completions without an answer (parse failures, routine for a small model) is not
    a scoring error: nothing is said."""
    argv = ["sweep", "--config", lm_config, "--budget", "8", "--groups", "4", "--steps", "1", "--workers", "1",
            "--no-progress"]
    out = tmp_path / "bad"
    rc, _, err = run_cli([*argv, "--seeds", "2", "--out", out, "--task.options.reward_fn",
                          "dense_reward:fails_on_held_out"], capsys)
    assert rc == 0, err
    names = ["N8-G4-s0", "N8-G4-s1"]
    per_run = [sum(r.get("eval_n_errors", 0) for r in _evals(out / "runs" / n).values()) for n in names]
    assert per_run[0] > 0 and per_run[0] == per_run[1]  # every evaluated completion, at steps 0 and 1
    for n in names:
        assert "raised ValueError: cannot score a held-out problem" in (out / "runs" / n / "train.log").read_text()
    warned = [x for x in err.splitlines() if "scoring errors" in x]
    assert warned == [f"warning: 2 of 2 runs had scoring errors (the reward function or verifier raised or timed out; "
                      f"those completions scored 0; eval_n_errors {sum(per_run)} in all): counted per step in each "
                      "run's metrics.jsonl (a traceback in first_error; a run's first scoring error is also a warning "
                      f"line in its train.log) in {out / 'runs'}/ (N8-G4-s0, N8-G4-s1)"], err
    res = results(out)
    assert res["scoring_errors"] == {"runs": names, "of": 2, "counts": {"eval_n_errors": sum(per_run)}}
    assert [r["scoring_errors"] for r in res["runs"]] == [{"eval_n_errors": k} for k in per_run]
    report = (out / "report.md").read_text()
    warned = [x for x in report.splitlines() if "scoring errors" in x]
    assert len(warned) == 1 and warned[0].startswith("**Warning**: 2 of 2 runs had scoring errors"), warned
    assert "in runs/ (N8-G4-s0, N8-G4-s1)." in report
    quiet = tmp_path / "quiet"  # sevens: None (unscorable, a parse failure) for every completion with a '0'
    rc, _, err = run_cli([*argv, "--seeds", "1", "--out", quiet, "--task.options.reward_fn", "dense_reward:sevens"],
                         capsys)
    rows = [json.loads(x) for x in (quiet / "runs" / "N8-G4-s0" / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("n_parse_failures", 0) + r.get("eval_n_unscorable", 0) for r in rows) > 0  # there were some
    assert rc == 0 and "scoring errors" not in err, err
    assert results(quiet)["scoring_errors"] is None and "scoring errors" not in (quiet / "report.md").read_text()
