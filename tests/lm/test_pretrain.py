"""pretrain_tiny: a few steps, a loadable HF folder, the answer-only loss, and the CLI."""

import json

import pytest
import torch

from ugrpo.lm.loading import load_policy
from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.pretrain import _answer_loss, pretrain_tiny


def test_answer_loss_is_mean_nll_of_answer_and_eos(model, tokenizer):
    """Teacher forcing counts only answer tokens + EOS: equals -mean of completion_logprobs."""
    prompts, answers = ["1+2=", "9*9=", "7-8+1="], ["3", "81", "0"]
    loss = _answer_loss(model, tokenizer, prompts, answers)
    enc = tokenizer(prompts, padding=True, return_tensors="pt")
    T = max(len(a) for a in answers) + 1
    c_ids = torch.zeros(3, T, dtype=torch.long)
    c_mask = torch.zeros(3, T, dtype=torch.long)
    for i, a in enumerate(answers):
        seq = tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        c_ids[i, : len(seq)] = torch.tensor(seq)
        c_mask[i, : len(seq)] = 1
    with torch.no_grad():
        lp = completion_logprobs(model, enc["input_ids"], enc["attention_mask"], c_ids, c_mask)
    torch.testing.assert_close(loss.detach(), -lp.sum() / c_mask.sum(), atol=1e-5, rtol=0)


def test_a_few_steps_write_a_loadable_folder(tmp_path):
    out = tmp_path / "tiny"
    r = pretrain_tiny(out, target_accuracy=1.0, steps=3, batch_size=16, eval_every=3, eval_samples=1, progress=False)
    assert r.steps == 3 and not r.reached_target and r.strength == "custom"
    assert 0.0 <= r.sampled_accuracy <= 1.0 and 0.0 <= r.greedy_accuracy <= 1.0
    for f in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "ugrpo_tiny.json"):
        assert (out / f).is_file(), f
    meta = json.loads((out / "ugrpo_tiny.json").read_text())
    assert meta["steps"] == 3 and meta["task_options"]["prompt_style"] == "compact" and len(meta["history"]) == 1
    pol = load_policy(str(out))
    assert pol.tokenizer("12+7=")["input_ids"][0] == pol.tokenizer.bos_token_id
    assert sum(p.numel() for p in pol.model.parameters()) > 9e5


def test_training_lowers_the_loss(tmp_path):
    r = pretrain_tiny(tmp_path / "t", target_accuracy=1.0, steps=16, batch_size=16, eval_every=8, eval_samples=1,
                      progress=False)
    first, last = r.history[0]["loss"], r.history[-1]["loss"]
    assert last < first < 3.0  # log(22) = 3.09 at random init


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown strength"):
        pretrain_tiny(tmp_path, strength="huge")
    with pytest.raises(ValueError, match="target_accuracy"):
        pretrain_tiny(tmp_path, target_accuracy=1.5)
    with pytest.raises(ValueError, match="steps"):
        pretrain_tiny(tmp_path, steps=0)


def test_cli_runs_and_prints_accuracies(tmp_path, capsys):
    from ugrpo.cli import main

    rc = main(["pretrain-tiny", "--out", str(tmp_path / "cli"), "--steps", "2", "--batch-size", "8", "--eval-every",
               "2",
               "--target-accuracy", "1.0"])
    out = capsys.readouterr().out
    assert rc == 0 and "sampled accuracy" in out and "greedy accuracy" in out and "NOT reached" in out
    assert (tmp_path / "cli" / "model.safetensors").is_file()


def test_warmup_stream_avoids_every_eval_problem_and_has_correct_answers():
    """The warm-up excludes exactly the eval set; its answers equal Python's arithmetic; it covers * and /."""
    from ugrpo.lm.pretrain import TINY_TASK_OPTIONS, _training_batch, warmup_exclusions
    from ugrpo.tasks.arithmetic import generate_problems, make_arithmetic

    task = make_arithmetic(**TINY_TASK_OPTIONS)
    evals = {p.prompt for p in task.eval_problems()}
    excluded = warmup_exclusions(task)
    assert {t + "=" for t in excluded} == evals and len(excluded) == TINY_TASK_OPTIONS["n_eval"]
    seen: set[str] = set()
    for step in range(1, 31):  # 30 x 128 draws with repeats: easy has only 81 products, so a distinct draw would fail
        prompts, answers = _training_batch(generate_problems, 128, 0, step, excluded)
        assert len(prompts) == len(answers) == 128
        seen.update(prompts)
        for p, a in zip(prompts, answers):
            assert p.endswith("=") and int(a) == _value(p[:-1])
    assert not seen & evals
    assert any("*" in p for p in seen) and any("/" in p for p in seen)
    assert _training_batch(generate_problems, 128, 0, 7, excluded) == _training_batch(generate_problems, 128, 0, 7,
                                                                                      excluded)


def _value(text: str) -> int:
    """Independent oracle: Python's own integer arithmetic on the checked character set (exact division)."""
    assert set(text) <= set("0123456789+-*/()"), text
    return eval(text.replace("/", "//"))  # noqa: S307 - digits and operators only, asserted above


def test_progress_bar_total_is_the_measured_step_count_and_ends_full(tmp_path, monkeypatch, capsys):
    """The bar starts at the strength's measured step count (a meaningful ETA), grows when the warm-up runs longer,
    and ends at 100% when the warm-up stops (the issue: a bar frozen at '22% 650/3000')."""
    import ugrpo.lm.pretrain as pretrain_mod

    monkeypatch.setitem(pretrain_mod.EXPECTED_STEPS, "base", 2)
    pretrain_tiny(tmp_path / "b", strength="base", steps=5, batch_size=8, eval_every=5, eval_samples=1, progress=True)
    err = capsys.readouterr().err
    assert "/2 [" in err and "5/5 [" in err and "100%" in err and "/3000" not in err
    assert "pretrain-tiny base (until sampled accuracy 0.15)" in err


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _without_seconds(history):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


class _CountingLoss:
    """Wraps pretrain._answer_loss (called once per step); raises KeyboardInterrupt at call ``die_at`` (Ctrl-C)."""

    def __init__(self, real, die_at=None):
        self.real, self.die_at, self.n = real, die_at, 0

    def __call__(self, *a, **k):
        self.n += 1
        if self.n == self.die_at:
            raise KeyboardInterrupt
        return self.real(*a, **k)


def test_an_interrupted_build_resumes_from_its_checkpoint_and_equals_an_uninterrupted_one(tmp_path, monkeypatch,
                                                                                          capsys):
    """Interrupted at step 5, the rerun continues from the step-4 checkpoint and ends with the bit-identical weights,
    accuracies and history of a build that never stopped."""
    import ugrpo.lm.pretrain as pretrain_mod

    kw = dict(target_accuracy=1.0, steps=7, batch_size=8, eval_every=3, eval_samples=1, checkpoint_every=2,
              progress=False)
    whole = pretrain_tiny(tmp_path / "whole", **kw)
    real = pretrain_mod._answer_loss
    monkeypatch.setattr(pretrain_mod, "_answer_loss", _CountingLoss(real, die_at=5))
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        pretrain_tiny(out, **kw)
    ckpt = out / pretrain_mod.CHECKPOINT
    assert ckpt.is_file() and not (out / "model.safetensors").exists()
    assert torch.load(ckpt, weights_only=True)["state"]["step"] == 4
    counting = _CountingLoss(real)
    monkeypatch.setattr(pretrain_mod, "_answer_loss", counting)
    capsys.readouterr()
    resumed = pretrain_tiny(out, **kw)
    assert f"resuming from step 4 ({ckpt})" in capsys.readouterr().err
    assert counting.n == 3  # steps 5, 6, 7 only
    assert not ckpt.exists()  # removed once the model is saved
    a, b = _weights(tmp_path / "whole"), _weights(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (resumed.steps, resumed.sampled_accuracy, resumed.greedy_accuracy) == (
        whole.steps, whole.sampled_accuracy, whole.greedy_accuracy)
    assert _without_seconds(resumed.history) == _without_seconds(whole.history) and len(whole.history) == 3


def test_a_checkpoint_of_other_settings_or_a_broken_one_is_refused(tmp_path, monkeypatch):
    import ugrpo.lm.pretrain as pretrain_mod

    kw = dict(target_accuracy=1.0, steps=4, batch_size=8, eval_every=50, eval_samples=1, checkpoint_every=1,
              progress=False)
    real = pretrain_mod._answer_loss
    monkeypatch.setattr(pretrain_mod, "_answer_loss", _CountingLoss(real, die_at=2))
    with pytest.raises(KeyboardInterrupt):
        pretrain_tiny(tmp_path, **kw)
    assert (tmp_path / pretrain_mod.CHECKPOINT).is_file()
    monkeypatch.setattr(pretrain_mod, "_answer_loss", real)
    with pytest.raises(ValueError, match=r"other settings \(seed: checkpoint 0, now 1\).*delete it"):
        pretrain_tiny(tmp_path, **{**kw, "seed": 1})
    (tmp_path / pretrain_mod.CHECKPOINT).write_bytes(b"truncated")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        pretrain_tiny(tmp_path, **kw)


def test_lr_factor_matches_its_closed_form_and_leaves_the_early_steps_alone():
    """Before ``decay_start`` (and for any cap at or below it) the schedule is the old 20-step linear warm-up exactly,
    so base/instruct, which stop before step 1000, are built as before; after it, the cosine hits its closed-form
    values: 1 at decay_start, (1 + final) / 2 half-way, final at the cap, and never rises."""
    from ugrpo.lm.pretrain import DECAY_START, FINAL_LR_FRACTION, lr_factor

    assert (DECAY_START, FINAL_LR_FRACTION) == (1000, 0.1)
    for steps in (150, 775, 1000, 3000):
        assert all(lr_factor(s, steps=steps) == min(1.0, (s + 1) / 20) for s in range(min(steps, DECAY_START)))
    assert [lr_factor(s, steps=5, decay_start=10) for s in range(5)] == [k / 20 for k in range(1, 6)]  # cap <= start
    f = [lr_factor(s, steps=3000) for s in range(3000)]  # f[s] is the factor of step s + 1
    assert f[999] == 1.0 and f[1999] == pytest.approx((1 + 0.1) / 2, abs=1e-12) and f[2999] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[999:], f[1000:]))
    k = 1500  # the cosine at one more point: 0.1 + 0.9 * (1 + cos(pi/4)) / 2
    assert f[k - 1] == pytest.approx(0.1 + 0.45 * (1 + 2 ** -0.5), abs=1e-12)
    assert lr_factor(2999, steps=3000, final=0.0) == pytest.approx(0.0, abs=1e-12)


def test_the_warmup_follows_lr_factor_and_its_checkpoint_records_the_decay(tmp_path, monkeypatch):
    """The optimiser's lr is ``lr * lr_factor``: with decay_start=2 and a cap of 4, the step-3 checkpoint holds the
    lr of step 4, the end of the cosine (final_lr_fraction * lr); a checkpoint of another decay is refused."""
    import ugrpo.lm.pretrain as pretrain_mod

    kw = dict(target_accuracy=1.0, steps=4, batch_size=8, eval_every=50, eval_samples=1, checkpoint_every=1,
              progress=False, decay_start=2, final_lr_fraction=0.25)
    real = pretrain_mod._answer_loss
    monkeypatch.setattr(pretrain_mod, "_answer_loss", _CountingLoss(real, die_at=4))
    with pytest.raises(KeyboardInterrupt):
        pretrain_tiny(tmp_path, **kw)
    payload = torch.load(tmp_path / pretrain_mod.CHECKPOINT, weights_only=True)
    assert payload["state"]["step"] == 3
    assert payload["opt"]["param_groups"][0]["lr"] == pytest.approx(1e-3 * 0.25, rel=1e-12)
    monkeypatch.setattr(pretrain_mod, "_answer_loss", real)
    with pytest.raises(ValueError, match=r"other settings \(decay_start: checkpoint 2, now 3\)"):
        pretrain_tiny(tmp_path, **{**kw, "decay_start": 3})
    for bad in (dict(decay_start=-1), dict(decay_start=1.5), dict(final_lr_fraction=1.5)):
        with pytest.raises(ValueError, match="decay_start=.*final_lr_fraction="):
            pretrain_tiny(tmp_path / "bad", **{**kw, **bad})
