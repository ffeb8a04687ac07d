"""GSM-Symbolic through reasoning-gym: seeding, disjoint splits, the verifier on adversarial answers, the missing
package, and a 2-step training run end to end on a random tiny model."""

from __future__ import annotations

import json
import string
import sys
from fractions import Fraction

import pytest

pytest.importorskip("reasoning_gym")

from ugrpo.tasks import Problem, get_task, score  # noqa: E402
from ugrpo.tasks.gsm_symbolic import GSMSymbolicTask, MissingExtraError  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return get_task("gsm_symbolic", seed=0, n_train=300, n_eval=100)


def test_same_seed_same_problems_other_seed_others(task):
    again = GSMSymbolicTask(seed=0, n_train=300, n_eval=100)
    assert task.train_problems() == again.train_problems() and task.eval_problems() == again.eval_problems()
    other = GSMSymbolicTask(seed=1, n_train=300, n_eval=100)
    shared = {p.prompt for p in task.train_problems()} & {p.prompt for p in other.train_problems()}
    assert len(shared) <= 3  # independent draws: a template with few variables can repeat a question by chance
    smaller = GSMSymbolicTask(seed=0, n_train=50, n_eval=100)
    assert smaller.train_problems() == task.train_problems()[:50]  # a prefix: n_train does not reshuffle


def test_splits_are_disjoint_and_without_repeats(task):
    train, ev = task.train_problems(), task.eval_problems()
    assert len(train) == 300 and len(ev) == 100
    tq, eq = [p.meta["question"] for p in train], [p.meta["question"] for p in ev]
    assert len(set(tq)) == 300 and len(set(eq)) == 100 and not set(tq) & set(eq)
    assert len({p.id for p in train + ev}) == 400 and train[0].id == "gsm_symbolic-train-00000"


def test_problems_carry_the_gold_of_the_reference_solution_and_a_difficulty_spread(task):
    problems = task.train_problems() + task.eval_problems()
    for p in problems:
        assert Fraction(p.answer) == Fraction(p.meta["solution"].rsplit("####", 1)[1].strip())  # its own last line
        assert Fraction(p.answer) >= 0 and p.prompt.startswith(p.meta["question"])
        assert p.prompt.endswith("put your final answer within \\boxed{}.")
    steps = {p.meta["steps"] for p in problems}
    templates = {p.meta["template"] for p in problems}
    assert min(steps) <= 2 and max(steps) >= 6 and len(templates) >= 60


GOLD = "28080"
CASES = [  # (completion, reward): None = unscorable (reward 0, counted)
    ("\\boxed{28080}", 1.0),
    ("He earns 12 days * 195 = 2340 a month, so 2340 * 12 = 28080.", 1.0),  # reasoning-gym's scorer reads 12: 0.01
    ("The answer is 28,080", 1.0),
    ("\\boxed{28080.0}", 1.0),
    ("$28080", 1.0),
    ("\\boxed{\\frac{56160}{2}}", 1.0),  # math-verify path
    ("\\boxed{28081}", 0.0),
    ("28080 is what I first thought, but it is 28000", 0.0),  # the final number counts
    ("\\boxed{28080} no wait \\boxed{2340}", 0.0),  # the last box counts
    ("\\boxed{-28080}", 0.0),
    ("", None),
    ("I do not know", None),
    ("\\boxed{}", None),
]


@pytest.mark.parametrize("completion,reward", CASES)
def test_verifier_on_right_wrong_and_malformed_answers(task, completion, reward):
    problem = Problem(id="x", prompt="q", answer=GOLD)
    assert task.verify([completion], [problem]) == [reward]
    res = score(task, [completion], [problem])
    assert res.rewards == [reward or 0.0] and res.unscorable == [reward is None]


def test_verifier_on_a_decimal_gold(task):
    p = Problem(id="d", prompt="q", answer="9281.25")
    got = task.verify(["\\boxed{9281.25}", "\\boxed{\\frac{37125}{4}}", "9281.3", "\\boxed{9281}"], [p] * 4)
    assert got == [1.0, 1.0, 0.0, 0.0]


def test_generated_golds_are_accepted_and_shifted_ones_rejected(task):
    ev = task.eval_problems()[:20]
    right = [f"so the result is \\boxed{{{p.answer}}}" for p in ev]
    wrong = [f"so the result is \\boxed{{{Fraction(p.answer) + 1}}}" for p in ev]
    assert task.verify(right + wrong, ev + ev) == [1.0] * 20 + [0.0] * 20


def test_bad_options():
    with pytest.raises(ValueError, match="unknown option.*valid options are"):
        get_task("gsm_symbolic", difficulty=2)
    with pytest.raises(ValueError, match="n_train must be an integer >= 1"):
        get_task("gsm_symbolic", n_train=0)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        get_task("gsm_symbolic", seed=-1)
    with pytest.raises(ValueError, match=r"\{question\}"):
        get_task("gsm_symbolic", prompt_template="no placeholder")


def test_missing_package_says_which_extra_to_install(monkeypatch):
    from ugrpo.errors import UserError

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` now raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'ugrpo\[gsm\]'") as info:
        get_task("gsm_symbolic")
    assert isinstance(info.value, ImportError) and isinstance(info.value, UserError)


def test_cli_reports_the_missing_package_as_one_error_line(monkeypatch, tmp_path, capsys):
    from ugrpo.cli import main

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model": {"name": "tiny:random"}, "task": {"name": "gsm_symbolic"}}))
    rc = main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and "pip install 'ugrpo[gsm]'" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def wide_tiny_model(tmp_path_factory) -> str:
    """A random tiny Qwen2 over printable ASCII with a 1024-token context: the built-in tiny models (digits and
    operators only, 128 positions) cannot read a GSM question, so the end-to-end run uses this one."""
    from ugrpo.lm.tiny import build_tiny_model
    from ugrpo.lm.tokenizer import build_char_tokenizer

    chars = "".join(c for c in string.printable if c not in "\n\r\t\x0b\x0c")
    tok = build_char_tokenizer(chars)
    folder = tmp_path_factory.mktemp("wide-tiny")
    build_tiny_model(tok, seed=0, max_position_embeddings=1024).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_two_training_steps_end_to_end_on_a_random_tiny_model(wide_tiny_model, tmp_path, capsys):
    """The whole pipeline on GSM-Symbolic: prompts tokenised, sampled, scored, two steps, an eval, metrics written.
    A random model's completions hold no final answer: every reward is 0 (unscorable, counted), so the steps'
    gradients are 0; this checks the plumbing, not learning (the verifier tests above check the rewards)."""
    from ugrpo.cli import main

    cfg = {"model": {"name": wide_tiny_model},
           "task": {"name": "gsm_symbolic", "options": {"n_train": 8, "n_eval": 4}},
           "budget": {"samples_per_step": 8, "group_size": 4}, "sampling": {"max_new_tokens": 8},
           "steps": 2, "optim": {"name": "adamw", "lr": 1e-3},
           "eval": {"every": 2, "n_problems": 4, "pass1_samples": 0}, "seed": 0}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    rc = main(["train", "--config", str(path), "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step") in (1, 2) and "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2], rows
    assert all(r["samples"] == 8 and r["n_unscorable"] + round(8 * r["reward_mean"]) <= 8 for r in steps)
    assert json.loads((out / "config.json").read_text())["task"]["name"] == "gsm_symbolic"


def test_the_example_config_loads_and_its_task_builds():
    from pathlib import Path

    from ugrpo.train.config.load import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "gsm-symbolic.yaml")
    assert cfg.task.name == "gsm_symbolic" and cfg.model.chat
    assert cfg.budget.samples_per_step % cfg.budget.group_size == 0
    t = get_task(cfg.task.name, **cfg.task.options)
    assert len(t.train_problems()) == 2000 and len(t.eval_problems()) == cfg.eval.n_problems
