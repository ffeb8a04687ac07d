"""TrainConfig: validation messages, YAML loading, dotted overrides, the CLI parser."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from ugrpo.train.config import TrainConfig, config_from_dict, field_names, load_config, parse_overrides
from ugrpo.train.setup import lr_factor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_group_size_must_divide_budget_with_divisors_listed():
    with pytest.raises(ValueError) as e:
        config_from_dict({"budget": {"samples_per_step": 1000, "group_size": 48}})
    msg = str(e.value)
    assert "budget.group_size G=48 does not divide budget.samples_per_step N=1000" in msg
    assert "divisors of N from 2 up: [2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, 200, 250, 500, 1000]" in msg  # no 1


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"budget": {"samples_per_step": 8, "group_size": 1}}, "baseline=grpo needs budget.group_size >= 2"),
        ({"baseline": "loo"}, "baseline='loo' is not valid; choose one of ['vanilla', 'grpo', 'grpo_mean', 'oracle']"),
        ({"algorithm": 2, "minibatches": 3}, "minibatches m=3 does not divide B = N/G = 8 prompts per step; choose m "
         "among [1, 2, 4, 8]"),
        ({"minibatches": 2}, "minibatches=2 needs algorithm=2"),
        ({"loss": {"clip_high": 0.2}}, "need algorithm=2"),
        ({"baseline": "oracle"}, "baseline=oracle needs oracle_samples M >= 1"),
        ({"optim": {"lr": -1}}, "optim.lr=-1.0 must be > 0"),
        ({"loss": {"aggregation": "mean"}}, "loss.aggregation='mean' is not valid"),
        ({"scale": "std", "budget": {"samples_per_step": 8, "group_size": 1}, "baseline": "vanilla"}, "scale=std with "
         "ddof=1 needs"),
        ({"steps": 2.5}, "steps=2.5 must be an integer"),
        ({"eval": {"greedy": "yes"}}, "greedy='yes' must be true or false"),
    ],
)
def test_invalid_values_name_field_value_and_fix(data, needle):
    with pytest.raises(ValueError) as e:
        config_from_dict(data)
    assert needle in str(e.value)


def test_unknown_key_in_file_names_key_file_and_close_match(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("optim:\n  lrr: 0.1\n")
    with pytest.raises(ValueError) as e:
        load_config(p)
    assert "'optim.lrr'" in str(e.value) and str(p) in str(e.value) and "optim.lr" in str(e.value)
    p.write_text("stepz: 3\n")
    with pytest.raises(ValueError, match=r"unknown config key 'stepz' in .*bad.yaml; did you mean steps"):
        load_config(p)


def test_overrides_parse_yaml_scalars_and_reach_every_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("budget:\n  samples_per_step: 64\n  group_size: 8\noptim:\n  lr: 1.0e-5\n")
    cfg = load_config(p, ["--optim.lr", "1e-4", "--budget.group-size", "16", "--algorithm", "2",
                          "--loss.clip_high=0.28", "--optim.grad_clip", "null", "--optim.betas", "[0.9, 0.95]",
                          "--task.options.prompt_style", "compact", "--eval.greedy", "false"])
    assert cfg.optim.lr == 1e-4 and cfg.budget.group_size == 16 and cfg.prompts_per_step == 4
    assert cfg.algorithm == 2 and cfg.loss.clip_high == 0.28 and cfg.optim.grad_clip is None
    assert cfg.optim.betas == (0.9,
                               0.95) and cfg.task.options == {"prompt_style": "compact"} and cfg.eval.greedy is False
    with pytest.raises(ValueError, match=r"unknown config key 'optim.lrate' in the command-line overrides; did you "
                       r"mean optim.lr"):
        load_config(p, ["--optim.lrate", "1"])
    with pytest.raises(ValueError, match="has no value"):
        parse_overrides(["--steps"])


def test_every_field_is_overridable_from_the_command_line():
    """Each dotted field name parses through the real CLI parser and load_config without error."""
    from ugrpo.cli.commands.train import configure

    parser = argparse.ArgumentParser()
    configure(parser)
    defaults = config_from_dict({})
    for name in field_names():
        value = defaults
        for part in name.split("."):
            value = getattr(value, part)
        if isinstance(value, tuple):
            raw = "[" + ", ".join(map(str, value)) + "]"
        elif isinstance(value, dict):
            raw = "{}"
        else:
            raw = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        args = parser.parse_args(["--out", "x", f"--{name}", raw])
        assert load_config(None, args.overrides) == defaults, name


def test_config_is_frozen_and_b_is_derived():
    cfg = config_from_dict({"budget": {"samples_per_step": 96, "group_size": 32}})
    assert cfg.prompts_per_step == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 3  # type: ignore[misc]
    assert isinstance(cfg, TrainConfig)


@pytest.mark.parametrize("name", ["arith-tiny.yaml", "gsm8k-qwen1.5b.yaml", "math-qwen7b.yaml"])
def test_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    assert cfg.budget.samples_per_step % cfg.budget.group_size == 0


def test_lr_schedules():
    assert [lr_factor(k, steps=4, warmup=0, kind="constant") for k in range(4)] == [1, 1, 1, 1]
    assert [lr_factor(k, steps=4, warmup=0, kind="linear") for k in range(4)] == [1, 0.75, 0.5, 0.25]
    assert [lr_factor(k, steps=4, warmup=2, kind="constant") for k in range(4)] == [0.5, 1, 1, 1]
    cos = [lr_factor(k, steps=4, warmup=0, kind="cosine") for k in range(4)]
    assert cos[0] == 1 and cos[2] == pytest.approx(0.5) and all(c > 0 for c in cos)


def test_config_load_imports_first_without_a_cycle():
    """``import ugrpo.train.config.load`` in a fresh interpreter (before ugrpo.train.config) must work."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import ugrpo.train.config.load as c; print(c.load_config.__name__)"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "load_config"
