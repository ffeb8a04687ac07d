"""``ugrpo plan --trl-config``: a tiny TRL config (local model folder, JSONL prompts, a reward module) end to end."""

from __future__ import annotations

import json

import pytest

trl = pytest.importorskip("trl", reason="the TRL integration needs `trl` (pip install 'ugrpo[trl]')")

from tests.integrations.trl_helpers import PROMPTS  # noqa: E402
from ugrpo.experiments.plan.trl import load_reward_function, load_trl_config, run_trl_plan  # noqa: E402

REWARD = "tests.integrations.trl_helpers:first_digit_reward"


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("trlplan")
    (root / "model").symlink_to(tiny_model_dir, target_is_directory=True)
    (root / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p, "idx": i}) + "\n" for i,
                                                p in enumerate(PROMPTS)))
    return root


def _write(root, name, **fields):
    base = {"model_name_or_path": str(root / "model"), "dataset_name": str(root / "prompts.jsonl"),
            "reward_funcs": [REWARD], "num_generations": 4, "per_device_train_batch_size": 32,
            "gradient_accumulation_steps": 2, "num_processes": 1, "max_completion_length": 8, "learning_rate": 1e-5,
            "ugrpo": {"pilot_batch": 64, "pilot_group": 4, "sketch_dim": 64, "n_boot": 200, "seed": 0}}
    base.update(fields)
    path = root / name
    path.write_text(json.dumps(base))
    return path


def test_trl_config_plan_writes_trl_answer(files, tmp_path):
    cfg_path = _write(files, "grpo.json")
    res = run_trl_plan(cfg_path, tmp_path / "run", progress=False)
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    for name in ("config.json", "metrics.jsonl", "report.md", "plan.png"):
        assert (tmp_path / "run" / name).exists(), name
    trl_ = on_disk["trl"]
    assert on_disk["budget"] == trl_["budget_N"] == 64  # 32 per device x 2 accumulation x 1 process
    assert trl_["current"] == {"num_generations": 4, "per_device_train_batch_size": 32,
                               "gradient_accumulation_steps": 2,
                               "num_processes": 1, "prompts_per_step": 16,
                               "predicted_mse": next(c["predicted_mse"] for c in on_disk["candidates"] if c["G"] == 4)}
    assert on_disk["pilot"]["B0"] == 64 and on_disk["pilot"]["G0"] == 4
    rec = trl_["recommended"]  # the band's recommendation: always given
    g = res["g_recommended"]
    assert rec["num_generations"] == g and 64 % g == 0 and g == res["band"]["recommended"]
    assert rec["per_device_train_batch_size"] == 32 and rec["prompts_per_step"] == 64 // g
    assert f"num_generations: {g}" in trl_["message"] and "your num_generations = 4 is " in trl_["message"]
    assert trl_["decided"] == res["band"]["decided"]
    assert trl_["num_generations_band"] == [res["band"]["low"], res["band"]["high"]]
    assert "In TRL's terms" in (tmp_path / "run" / "report.md").read_text()


def test_budget_override_gives_per_device_batch(files, tmp_path):
    cfg = load_trl_config(_write(files, "b.json"), budget=128)
    assert cfg.N == 128 and cfg.step_budget == 64
    with pytest.raises(ValueError, match="multiple of gradient_accumulation_steps"):
        load_trl_config(_write(files, "b2.json"), budget=127)


def test_bad_trl_configs_are_clear_errors(files, tmp_path):
    with pytest.raises(ValueError, match=r"6 \* 1 \* 1 = 6 completions per step is not divisible by num_generations = "
                       r"4"):
        load_trl_config(_write(files, "bad1.json", per_device_train_batch_size=6, gradient_accumulation_steps=1))
    with pytest.raises(ValueError, match="has no function 'nope'"):
        run_trl_plan(_write(files, "bad2.json", reward_funcs=["tests.integrations.trl_helpers:nope"]), tmp_path / "r")
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        load_reward_function("no_such_module:f")
    with pytest.raises(ValueError, match="unknown key 'num_generation'; did you mean 'num_generations'"):
        load_trl_config(_write(files, "bad3.json", num_generation=8))
    with pytest.raises(ValueError, match="missing 'reward_funcs'"):
        path = files / "bad4.json"
        path.write_text(json.dumps({"model_name_or_path": "x", "dataset_name": "y"}))
        load_trl_config(path)


def test_trl_answer_in_trl_terms(files):
    """The TRL-terms answer of a plan (the planner's numbers given, so every branch is checked): it says what the plan
    says, never "inside the band" beside a cost."""
    from ugrpo.experiments.plan.trl import _trl_answer

    cfg = load_trl_config(_write(files, "c.json", per_device_train_batch_size=16, gradient_accumulation_steps=4,
                                 num_processes=2), budget=256)
    cands = [{"G": g, "predicted_mse": 1.0 / g + g / 100} for g in (2, 4, 8, 16, 32, 64, 128, 256)]
    band = {"low": 8, "high": 16, "open_ended": False, "tolerance": 0.05, "recommended": 8, "decided": True,
            "cannot_tell": None, "g_range": [8, 8], "c1_range": None}
    res = {"g_star": 8, "g_star_ci": [8, 16], "g_recommended": 8, "candidates": cands, "message": "", "band": band,
           "budget": 256}
    ans = _trl_answer(cfg, res)
    assert ans["budget_N"] == 256 and ans["decided"]
    assert ans["recommended"] == {"num_generations": 8, "per_device_train_batch_size": 32,  # 256 / (4 * 2)
                                  "gradient_accumulation_steps": 4, "num_processes": 2, "prompts_per_step": 32,
                                  "predicted_mse": 1.0 / 8 + 0.08}
    assert ans["current"]["prompts_per_step"] == 32 and ans["current"]["predicted_mse"] is None  # other budget
    assert not ans["current_inside_band"] and "inside" not in ans["message"]
    ratio = (1 / 4 + 0.04) / (1 / 8 + 0.08)  # G = 4's predicted MSE over the best (G = 8)
    assert f"your num_generations = 4 costs {100 * (ratio - 1):.0f}% more gradient error" in ans["message"]
    assert ans["message"].startswith("set num_generations: 8 with per_device_train_batch_size: 32 (N = 256 "
                                     "completions per step = 32 prompts x 8): within 5% of the best predicted MSE "
                                     "for every c1 in its interval")
    assert "near-optimal (within 5% of the best for some c1): num_generations from 8 to 16" in ans["message"]
    guess = _trl_answer(cfg, {**res, "pilot": {"B0": 32}, "band": {
        **band, "decided": False, "g_range": [4, 256], "high": 256, "open_ended": True,
        "recommended_worst_ratio": 1.19, "pilot_prompts_needed": 512}}, n_rows=128)
    assert not guess["decided"] and guess["message"].startswith("best guess num_generations: 8 ")
    # as the console of `ugrpo plan` says: the cost of the guess and the pilot that would decide, here more prompts
    # than the dataset has (before: neither, or a pilot the dataset could not give)
    assert "it costs at most 19% more than the best over that interval" in guess["message"]
    assert ("a pilot of about 512 prompts (ugrpo.pilot_batch; this one: 32) would probably decide, more than the 128 "
            "rows of the train dataset: with this data more samples per prompt (ugrpo.pilot_group)") in guess["message"]
    assert "the pilot cannot tell: the best num_generations is 4 at one end of c1's interval and 256 at the other" in \
        guess["message"] and "num_generations of at least 8" in guess["message"]
    none = _trl_answer(cfg, {**res, "g_recommended": None, "band": {**band, "cannot_tell": "every reward is equal"}})
    assert none["recommended"] is None and not none["decided"]
    assert none["message"].startswith("the pilot cannot tell which num_generations to use: every reward is equal")


def test_cli_entry_prints_trl_answer(files, tmp_path, capsys):
    """``ugrpo plan --trl-config FILE``: the flags given replace the file's values (its ``ugrpo:`` block too: before,
    --sketch-dim, --seed and --n-boot were ignored without a word), report.md's command is the one that ran, and a
    flag whose value the TRL config sets (--max-new-tokens, --group, ...) is an error naming it."""
    from ugrpo.cli import main

    argv = ["plan", "--trl-config", str(_write(files, "cli.json")), "--out", str(tmp_path / "cli"),
            "--pilot-batch", "8", "--pilot-group", "4", "--sketch-dim", "16", "--seed", "5"]
    assert main(argv) == 0
    res = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert res["pilot"]["B0"] == 8 and res["pilot"]["meta"]["sketch_dim"] == 16
    cfg = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert cfg["seed"] == 5 and cfg["sketch_dim"] == 16
    printed = capsys.readouterr()
    assert res["trl"]["message"] in printed.out
    assert "Generating train split" not in printed.err  # the datasets library's progress bars are off (quiet)
    report = (tmp_path / "cli" / "report.md").read_text()
    assert "--pilot-group 4 --sketch-dim 16 --seed 5" in report and "--max-new-tokens" not in report
    for bad in (["--max-new-tokens", "3"], ["--group", "4"]):
        assert main([*argv[:4], str(tmp_path / "bad"), *bad]) == 2
        err = capsys.readouterr().err
        assert f"--trl-config cannot take {bad[0]}: the TRL config sets what they would" in err, err
    assert not (tmp_path / "bad").exists()


def test_cli_chunk_size_changes_memory_not_the_answer(files, tmp_path, capsys):
    """``--chunk-size 3`` (groups of 4 cut across generate calls and backward passes): the same rewards and, to
    float rounding, the same constants and answer as the default 64 rows per pass; 0 is refused before any folder."""
    from ugrpo.cli import main

    got = {}
    for chunk in (None, "3"):
        out = tmp_path / f"c{chunk}"
        argv = ["plan", "--trl-config", str(_write(files, "chunk.json")), "--out", str(out), "--pilot-batch", "8",
                "--pilot-group", "4", *([] if chunk is None else ["--chunk-size", chunk])]
        assert main(argv) == 0
        got[chunk] = json.loads((out / "results.json").read_text())
    for k in ("c1", "c2", "c3"):
        assert got["3"][k]["estimate"] == pytest.approx(got[None][k]["estimate"], rel=1e-4), k
    assert got["3"]["pilot"]["frac_zero_std"] == got[None]["pilot"]["frac_zero_std"]
    a, b = dict(got["3"]["trl"]["recommended"]), dict(got[None]["trl"]["recommended"])
    assert a.pop("predicted_mse") == pytest.approx(b.pop("predicted_mse"), rel=1e-4) and a == b
    capsys.readouterr()
    assert main(["plan", "--trl-config", str(_write(files, "chunk.json")), "--out", str(tmp_path / "bad"),
                 "--chunk-size", "0"]) == 2
    assert "--chunk-size 0: rows per pass must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_cli_trl_config_with_another_source_is_an_error(files, tmp_path, capsys):
    from ugrpo.cli import main

    argv = ["plan", "--trl-config", str(_write(files, "cli2.json")), "--env", "builtin:demo", "--out",
            str(tmp_path / "x")]
    assert main(argv) == 2
    assert "--trl-config takes the model and data from the TRL config; drop --env" in capsys.readouterr().err


def test_cli_plan_without_budget_is_an_error(tmp_path, capsys):
    from ugrpo.cli import main

    assert main(["plan", "--env", "builtin:demo", "--pilot-batch", "8", "--pilot-group", "4", "--out",
                 str(tmp_path)]) == 2
    assert "--budget N is required" in capsys.readouterr().err
