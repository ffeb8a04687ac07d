"""The command line's one error policy, ``--help`` from the config docstrings, and the command table."""

from __future__ import annotations

import json

import pytest

from ugrpo.cli import COMMANDS, main


def _run(argv, capsys):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_an_error_inside_train_is_one_line_and_exit_2(tiny_model_dir, tmp_path, capsys):
    """A prompt longer than the model's 64-token context is found inside ``train()`` (after the model is
    loaded): one line on stderr naming the problem and the fix, exit code 2, no traceback, no run folder."""
    train_file, eval_file = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train_file.write_text(json.dumps({"prompt": "1+" * 50 + "1=", "answer": "51"}) + "\n")
    eval_file.write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    out = tmp_path / "run"
    rc, _, err = _run(["train", "--out", out, "--model.name", tiny_model_dir, "--task.name", "custom",
                       "--task.options.data_path", train_file, "--task.options.eval_path", eval_file,
                       "--task.options.reward_fn", "tests.experiments.conftest:starts_with_digit",
                       "--budget.samples_per_step", "4", "--budget.group_size", "4", "--sampling.max_new_tokens", "5",
                       "--steps", "1"], capsys)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("ugrpo train: error: train problem 'custom-train-0': prompt has ")
    assert "> model context 64" in err
    assert "task.long_prompts=skip" in err
    assert not (out / "metrics.jsonl").exists()


def test_a_bad_config_value_and_an_unknown_field_exit_2(tmp_path, capsys):
    rc, _, err = _run(["train", "--out", tmp_path, "--budget.samples-per-step", "64", "--budget.group_size", "6"],
                      capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("ugrpo train: error: budget.group_size G=6 does not divide budget.samples_per_step N=64"), err
    rc, _, err = _run(["train", "--out", tmp_path, "--optim.lrate", "1e-4"], capsys)
    assert rc == 2 and "unknown config key 'optim.lrate'" in err and "optim.lr" in err, err
    rc, _, err = _run(["train", "--out", tmp_path, "--config", tmp_path / "missing.yaml"], capsys)
    assert rc == 2 and err.startswith("ugrpo train: error: config file") and "missing.yaml" in err, err


def test_unknown_task_option_is_a_user_error(tiny_model_dir, tmp_path, capsys):
    """``get_task`` reports an unknown option as ``OptionError`` (a TypeError for Python, a user error for the CLI)."""
    from ugrpo.tasks import OptionError, get_task

    with pytest.raises(TypeError, match="unknown option"):
        get_task("arithmetic", n_problems=3)
    assert issubclass(OptionError, ValueError)
    rc, _, err = _run(["train", "--out", tmp_path / "run", "--model.name", tiny_model_dir, "--task.options.nope", "1",
                       "--steps", "1"], capsys)
    assert rc == 2 and err.startswith("ugrpo train: error: task.options: task 'arithmetic': unknown option(s) "
                                      "nope"), err
    rc, _, err = _run(["train", "--out", tmp_path / "run", "--model.name", tiny_model_dir,
                       "--task.options.difficulti", "hard", "--steps", "1"], capsys)  # a typo: the closest option
    assert rc == 2 and "unknown option(s) difficulti (did you mean difficulty?)" in err, err
    rc, _, err = _run(["train", "--out", tmp_path / "run", "--model.name", tiny_model_dir,
                       "--task.options.difficulty", "hardd", "--steps", "1"], capsys)  # a bad value: the field named
    assert rc == 2 and err.startswith("ugrpo train: error: task.options: arithmetic: option difficulty must be one "
                                      "of ['easy', 'hard', 'medium'], got 'hardd' (set it in the config"), err
    # a config's options for the old task stay when --task.name switches the task: the message says so, no folder
    cfg = tmp_path / "arith.yaml"
    cfg.write_text("task:\n  name: arithmetic\n  options:\n    n_train: 8\n")
    rc, _, err = _run(["train", "--config", cfg, "--out", tmp_path / "g8", "--model.name", tiny_model_dir,
                       "--task.name", "gsm8k", "--steps", "1"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "task 'gsm8k': unknown option(s) n_train" in err and "when --task.name changes the task" in err, err
    assert not (tmp_path / "g8").exists()


def test_ctrl_c_exits_130_with_the_commands_message_and_a_bug_keeps_its_traceback(monkeypatch, tmp_path, capsys):
    import ugrpo.cli.commands.make_env as cmd

    def interrupted(args):
        raise KeyboardInterrupt("interrupted: the rows finished so far are in X")

    monkeypatch.setattr(cmd, "main", interrupted)
    argv = ["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2", "--out", tmp_path / "e.json"]
    rc, _, err = _run(argv, capsys)
    assert rc == 130 and "interrupted: the rows finished so far are in X" in err

    def bug(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cmd, "main", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        main([str(a) for a in argv])


def test_user_error_from_a_command_names_the_command(tmp_path, capsys):
    rc, _, err = _run(["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2",
                       "--out", tmp_path / "env.txt"], capsys)
    assert rc == 2 and err == f"ugrpo make-env: error: --out {tmp_path / 'env.txt'}: the env file must end in .json\n"


def test_train_help_lists_every_field_with_type_default_and_description(capsys):
    from ugrpo.train.config import describe_fields

    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for section in ("model", "task", "budget", "sampling", "loss", "optim", "eval", "top-level fields"):
        assert f"config fields (--section.field VALUE; YAML scalar values, '-' or '_' in names): {section}" in text
    assert "--optim.lr VALUE peak learning rate eta [float; default: 1e-05]" in text
    assert "--budget.group-size VALUE, --budget.group_size VALUE G, completions per prompt [int; default: 8]" in text
    for f in describe_fields():
        assert f"--{f.name}" in text and f"[{f.type}; default: {f.default}]" in text, f.name


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_defaults(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: ugrpo {command}") and "--out" in text
    if command == "gap":
        assert "(default: 400)" in " ".join(text.split())


def test_demo_composes_configs_and_prints_the_tables(tmp_path, capsys):
    rc, out, err = _run(["demo", "--quick", "--no-progress", "--out", tmp_path], capsys)
    assert rc == 0, err
    for title in ("Gradient MSE (Monte Carlo vs exact):", "Scaling-law constants and G* (pilot vs exact):",
                  "Sweep: empirical best G at the last checkpoint vs the planner:"):
        assert title in out
    for part in ("mse", "plan", "sweep"):
        assert (tmp_path / part / "results.json").is_file()
    assert (tmp_path / "report.md").is_file()


def test_thread_default_and_its_overrides():
    """1 torch thread on a CPU-only machine unless --threads, UGRPO_THREADS or OMP_NUM_THREADS say otherwise."""
    from ugrpo.cli.main import choose_threads

    n, why = choose_threads(None, {}, gpu=False)
    assert n == 1 and "--threads N" in why and "UGRPO_THREADS" in why
    assert choose_threads(None, {}, gpu=True) == (None, "")
    assert choose_threads(None, {"OMP_NUM_THREADS": "2"}, gpu=False) == (None, "")
    assert choose_threads(None, {"UGRPO_THREADS": "3", "OMP_NUM_THREADS": "2"}, gpu=False) == (3, "")
    assert choose_threads(4, {"UGRPO_THREADS": "3"}, gpu=False) == (4, "")
    for bad in ({"UGRPO_THREADS": "x"}, {"UGRPO_THREADS": "0"}):
        with pytest.raises(ValueError, match="UGRPO_THREADS"):
            choose_threads(None, bad, gpu=False)
    with pytest.raises(ValueError, match="--threads 0"):
        choose_threads(0, {}, gpu=False)


def test_cli_sets_the_thread_count_and_says_so_once(monkeypatch, tmp_path, capsys):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("UGRPO_THREADS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    before = torch.get_num_threads()
    try:
        argv = ["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2"]
        rc, _, err = _run([*argv, "--out", tmp_path / "a.json", "--threads", "2"], capsys)
        assert rc == 0 and torch.get_num_threads() == 2 and "torch thread" not in err
        rc, _, err = _run([*argv, "--out", tmp_path / "b.json"], capsys)
        assert rc == 0 and torch.get_num_threads() == 1 and err.count("ugrpo: 1 torch thread") == 1, err
        rc, _, err = _run([*argv, "--out", tmp_path / "c.json", "--threads", "0"], capsys)
        assert rc == 2 and "--threads 0" in err
    finally:
        torch.set_num_threads(before)


def test_thread_note_comes_with_the_first_output_and_never_before_an_input_error(monkeypatch, tmp_path):
    """The thread-choice note is said once, just before the command's first line; a command that fails on its
    input prints its one error line and nothing else; OMP_NUM_THREADS or UGRPO_THREADS silence it."""
    import contextlib
    import io

    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("UGRPO_THREADS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2", "--out"]

    def console(args):  # stdout and stderr in the order a terminal shows them
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = main([str(a) for a in args])
        return rc, buf.getvalue().splitlines()

    before = torch.get_num_threads()
    try:
        rc, lines = console([*argv, tmp_path / "a.json"])
        assert rc == 0 and lines[0].startswith("ugrpo: 1 torch thread") and lines[-1].startswith("wrote"), lines
        assert sum("torch thread" in line for line in lines) == 1
        rc, lines = console([*argv, tmp_path / "a.txt"])  # the output suffix is checked before any work
        assert rc == 2 and len(lines) == 1 and lines[0].startswith("ugrpo make-env: error:"), lines
        for name in ("OMP_NUM_THREADS", "UGRPO_THREADS"):
            monkeypatch.setenv(name, "1")
            rc, lines = console([*argv, tmp_path / f"{name}.json"])
            assert rc == 0 and not any("torch thread" in line for line in lines), lines
    finally:
        torch.set_num_threads(before)


def test_only_rank_0_prints(monkeypatch, tmp_path, capsys):
    """Under torchrun every rank runs the command; ranks other than 0 print nothing, not even errors."""
    argv = ["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2", "--threads", "1"]
    monkeypatch.setenv("RANK", "1")
    rc, out, err = _run([*argv, "--out", tmp_path / "r1.json"], capsys)
    assert rc == 0 and out == "" and err == "" and (tmp_path / "r1.json").is_file()
    rc, out, err = _run([*argv, "--out", tmp_path / "r1.txt"], capsys)
    assert rc == 2 and out == "" and err == ""
    monkeypatch.setenv("RANK", "0")
    rc, out, err = _run([*argv, "--out", tmp_path / "r0.json"], capsys)
    assert rc == 0 and "wrote" in out


def test_no_third_party_progress_bars_or_warnings(tiny_model_dir, tmp_path, capsys):
    """A command that loads a Hugging Face model prints no progress bar of theirs and lets no FutureWarning /
    DeprecationWarning of transformers or torch through."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        rc, _, err = _run(["train", "--out", tmp_path / "run", "--model.name", tiny_model_dir, "--steps", "1",
                           "--task.options.n_train", "8", "--task.options.n_eval", "4", "--eval.n_problems", "4",
                           "--budget.samples_per_step", "8", "--budget.group_size", "4", "--eval.pass1_samples", "0",
                           "--sampling.max_new_tokens", "4", "--task.options.prompt_style", "compact"], capsys)
    assert rc == 0, err
    assert "Loading weights" not in err and "it/s]" not in err.replace("step/s", ""), err
    third = [w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))
             and any(m in str(w.filename) for m in ("transformers", "torch", "trl", "accelerate", "peft"))]
    assert not third, [str(w.message) for w in third]


ABBREVIATED = [  # (command line with a shortened flag, the one error line's text): nothing runs, exit 2
    pytest.param(["train", "--resum", "--budget.group_size", "6"],
                 "ugrpo train: error: unrecognized argument --resum: did you mean --resume?", id="train-resum"),
    pytest.param(["train", "--allocation.rul", "ustat", "--budget.group_size", "6"],
                 "ugrpo train: error: unknown config key 'allocation.rul' in the command-line overrides; did you mean "
                 "allocation.rule", id="train-allocation.rul"),
    pytest.param(["mse", "--env", "builtin:demo", "--groups", "2", "--batch", "4", "--rep", "2"],
                 "error: unrecognized arguments: --rep 2", id="mse-rep"),
    pytest.param(["plan", "--env", "builtin:demo", "--pilot-batch", "8", "--pilot-group", "4", "--budget", "32",
                  "--n-bo", "50"], "error: unrecognized arguments: --n-bo 50", id="plan-n-bo"),
]


@pytest.mark.parametrize(("argv", "message"), ABBREVIATED)
def test_issue24_item5_flags_are_never_abbreviated(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    try:
        rc = main([*argv, "--out", str(out)])
    except SystemExit as e:  # argparse's own error: usage, then one error line
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert not out.exists()


def test_make_env_score_norm_knobs_reach_the_file(tmp_path, capsys):
    from ugrpo.envs.io import load_env

    out = tmp_path / "rare.json"
    rc, _, _ = _run(["make-env", "--kind", "softmax_bandit", "--prompts", "20", "--actions", "3", "--rare-fraction",
                     "0.1", "--rare-score-scale", "10", "--seed", "3", "--out", str(out)], capsys)
    env = load_env(out)
    w2 = env.exact().e_w2
    assert rc == 0 and int((w2 > 20 * w2.median()).sum()) == 2 and "--rare-fraction 0.1" in env.description
    rc, _, err = _run(["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2",
                       "--score-scale-spread", "0.5", "--out", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and "--score-scale-spread 0.5 must be a finite number in [1.0" in err
