"""A custom task's reward function that cannot score stops ``ugrpo train`` with one clear error instead of a run
trained on all-zero rewards: before the model loads (a TRL-style signature, checked on the first train row's gold
answer) or, as a backstop, when every completion of the run's first step was a scoring error."""

from __future__ import annotations

import json
import textwrap

import dense_reward
import pytest
from train_helpers import small_config, write_jsonl

from ugrpo.cli import main
from ugrpo.errors import RewardFunctionError
from ugrpo.runlock import check_claim
from ugrpo.train.config import config_from_dict
from ugrpo.train.loop import train
from ugrpo.train.preflight import preflight
from ugrpo.train.resume import hashed_config

TRL_REWARD = '''
def correct(prompts, completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]

def boxed(completions, answers):
    return [float(c == "\\\\boxed{" + a + "}") for c, a in zip(completions, answers)]
'''


def test_a_trl_signature_is_one_error_line_before_the_model_loads(tmp_path, monkeypatch, capsys):
    (tmp_path / "trl_reward_check.py").write_text(textwrap.dedent(TRL_REWARD))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = write_jsonl(tmp_path / "train.jsonl", ["3+4=", "1+6="])
    made = tmp_path / "made"
    made.mkdir()  # a folder the user made beforehand stays, empty
    for out in (tmp_path / "new", made):
        rc = main(["train", "--out", str(out), "--model.name", "tiny:instruct", "--task.name", "custom",
                   "--task.options.data_path", data, "--task.options.reward_fn", "trl_reward_check:correct",
                   "--eval.n_problems", "0", "--steps", "1"])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith("ugrpo train: error: task.options.reward_fn 'trl_reward_check:correct' on the gold "
                              f"answer of {data}:line 1 ('7'): TypeError: correct() got multiple values for argument "
                              "'prompts'. ugrpo's custom task calls fn(completions, answers, **row_fields)"), err
        assert "TRL reward functions take (prompts, completions, ...)" in err
    assert not (tmp_path / "new").exists() and list(made.iterdir()) == []


def test_preflight_warns_when_the_gold_answer_scores_zero_and_is_silent_when_it_scores(
        tiny_model_dir, task_files, tmp_path, monkeypatch, capsys):
    (tmp_path / "trl_reward_check.py").write_text(textwrap.dedent(TRL_REWARD))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, task__options__reward_fn="trl_reward_check:boxed"))
    preflight(cfg, tmp_path / "run")
    err = capsys.readouterr().err
    assert err.startswith("warning: task.options.reward_fn 'trl_reward_check:boxed' on the gold answer of ")
    assert len(err.strip().splitlines()) == 1 and "reward 0.0;" in err
    preflight(config_from_dict(small_config(tiny_model_dir, task_files)), tmp_path / "run")  # dense_reward:sevens
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fn,error", [
    ("gold_only", "(ValueError: cannot parse the completion)"),
    ("nan_but_gold", "(custom reward_fn 'dense_reward:nan_but_gold' returned nan for completion 0; expected a finite "
                     "number or None)")])
def test_a_first_step_of_scoring_errors_stops_the_run_and_leaves_it_resumable(tiny_model_dir, task_files, tmp_path,
                                                                               fn, error):
    """Both functions pass the check (they score the gold answer) and fail on every model completion (raise, or return
    NaN): step 1 stops the run with the error; the folder keeps steps 0-1 and is not locked."""
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, task__options__reward_fn=f"dense_reward:{fn}",
                                        eval__n_problems=2, eval__pass1_samples=1))
    out = tmp_path / "run"
    with pytest.raises(RewardFunctionError) as e:
        train(cfg, out)
    msg = str(e.value)
    assert msg.startswith(f"step 1: task.options.reward_fn 'dense_reward:{fn}' failed on all 8 completions {error}; "
                          "the run stops rather than train on zero rewards")
    assert ("it must return None, not raise" in msg) == (fn == "gold_only") and "--resume" in msg
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and rows[1]["n_errors"] == 8 and rows[1]["reward_mean"] == 0.0
    assert not (out / "results.json").exists() and not (out / "final_model").exists()
    check_claim(out, "train", hashed_config(cfg), resume=True, exclusive=True)  # released: --resume may continue
    with pytest.raises(RewardFunctionError, match="^step 1: "):  # it does (no checkpoint: from step 0), and the
        train(cfg, out, resume=True)                              # function, still unfixed, stops it again
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_crashes_after_the_first_step_are_counted_not_a_stop(tiny_model_dir, task_files, tmp_path):
    dense_reward._batches["n"] = 0
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=3, eval__n_problems=0, checkpoint_every=0,
                                        task__options__reward_fn="dense_reward:fails_after_first_batch"))
    result = train(cfg, tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert result.steps == 3 and [r.get("n_errors") for r in rows if r["step"]] == [0, 8, 8]


def test_a_scoring_warning_under_the_training_bar_is_written_above_it(tiny_model_dir, task_files, tmp_path, capsys,
                                                                     monkeypatch):
    """The one-line scoring warning (``logging``, step 2 here) is written as the step lines are (``tqdm.write``):
    the bar is cleared, the warning gets a line of its own, the bar is drawn again below; not appended to the bar's
    line. No logging set up (as under ``ugrpo``): Python's last-resort handler would write it; as quiet as that one
    (WARNING and up); the handlers are restored after the run."""
    import logging

    monkeypatch.setattr(logging.root, "handlers", [])  # pytest's capture handlers off: the console as the CLI has it
    dense_reward._batches["n"] = 0
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=3, eval__n_problems=0, checkpoint_every=0,
                                        task__options__reward_fn="dense_reward:fails_after_first_batch"))
    chatty = logging.getLogger("ugrpo.test_chatty")
    monkeypatch.setattr(chatty, "level", logging.INFO)  # a library logging INFO stays quiet, as before: WARNING up
    train(cfg, tmp_path / "run", on_step=lambda step, row: chatty.info("an info record at step %d", step))
    err = capsys.readouterr().err
    assert "an info record" not in err
    at = [x for x in err.split("\n") if "flaky verifier" in x]
    assert len(at) == 1 and "train:" in err, err
    assert at[0].split("\r")[-1].startswith("task 'custom': reward_fn 'dense_reward:fails_after_first_batch' raised "
                                            "RuntimeError: flaky verifier"), repr(at[0])
    assert logging.root.handlers == []
