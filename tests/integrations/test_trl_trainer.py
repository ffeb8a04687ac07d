"""UGRPOTrainer: a real TRL GRPOTrainer run whose advantages are ugrpo's (issue 6).

Each test runs a few TRL steps on the tiny model (built in code, random weights, CPU) with a dense
reward, records TRL's generation batches (before TRL shuffles them into optimizer steps) and the
rewards the reward function returned, and checks that the advantages TRL trained on are exactly
``compute_advantages`` of those rewards laid out (B, G), and that the rows the loss saw carry them.
"""

from __future__ import annotations

import warnings

import pytest
import torch

trl = pytest.importorskip("trl", reason="the TRL integration needs `trl` (pip install 'ugrpo[trl]')")

from datasets import Dataset  # noqa: E402

from tests.integrations.trl_helpers import PROMPTS, Recorder, digit_reward, grpo_config  # noqa: E402
from ugrpo.integrations.trl import AdvantageSpec, UGRPOTrainer, grouped_rewards  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402
from ugrpo.stats.advantages import compute_advantages  # noqa: E402

G = 4


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def _run(tok, tmp_path, spec, *, steps=2, value_fn=None, reward=digit_reward, **config):
    rec = Recorder(reward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = UGRPOTrainer(
            model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=rec,
            args=grpo_config(tmp_path, max_steps=steps, num_generations=G, per_device_train_batch_size=16, **config),
            train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tok,
            advantages=spec, value_fn=value_fn,
        )
    rec.attach(trainer)
    trainer.train()
    assert len(rec.batches) == steps == len(rec.rewards)
    return trainer, rec, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _check(rec, spec, values=None):
    for batch, rewards, used in zip(rec.batches, rec.rewards, rec.loss_advantages):
        Z = torch.tensor(rewards, dtype=torch.float64).view(-1, G)  # (B, G), TRL's prompt-major layout
        want = compute_advantages(Z, baseline=spec.baseline, values=None if values is None else values(batch, Z),
                                  scale=spec.scale, ddof=spec.ddof, eps=spec.eps, zero_std=spec.zero_std)
        got = batch["advantages"].double()
        assert torch.allclose(got, want.advantages.reshape(-1), atol=1e-6, rtol=0)
        # the rows TRL's loss saw (shuffled) carry exactly these advantages
        assert torch.allclose(used.double().sort().values, got.sort().values, atol=0, rtol=0)


@pytest.mark.parametrize("spec", [AdvantageSpec(baseline="vanilla"), AdvantageSpec(baseline="grpo"),
                                  AdvantageSpec(baseline="grpo_mean", scale="std", ddof=0, eps=1e-3)],
                         ids=["vanilla", "grpo", "grpo_mean_std"])
def test_trl_trains_on_ugrpo_advantages(spec, tok, tmp_path):
    trainer, rec, warned = _run(tok, tmp_path, spec, scale_rewards="batch")
    _check(rec, spec)
    # power: TRL's own default advantages (group std scaling, full mean) differ from these on this batch
    Z = torch.tensor(rec.rewards[0], dtype=torch.float64).view(-1, G)
    trl_default = compute_advantages(Z, baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps").advantages
    assert (trl_default.reshape(-1) - rec.batches[0]["advantages"].double()).abs().max() > 1e-2
    # it said, once, which TRL options it overrides
    said = [w for w in warned if "replaces TRL's advantages" in w]
    assert len(said) == 1 and "scale_rewards='batch'" in said[0]
    assert any("ugrpo/frac_zero_std" in row for row in trainer.state.log_history)


def test_oracle_baseline_uses_value_fn(tok, tmp_path):
    value = {p: 0.1 * (i % 7) for i, p in enumerate(PROMPTS)}
    spec = AdvantageSpec(baseline="oracle")
    calls = []

    def value_fn(prompts):
        calls.append(len(prompts))
        return [value[p] for p in prompts]

    trainer, rec, _ = _run(tok, tmp_path, spec, value_fn=value_fn, steps=1)
    assert calls == [16]

    def values(batch, Z):
        text = trainer.processing_class.batch_decode(batch["prompt_ids"][::G], skip_special_tokens=True)
        return torch.tensor([value[t] for t in text], dtype=torch.float64)

    _check(rec, spec, values)


def test_trl_equivalent_spec_matches_trl_own_advantages(tok, tmp_path):
    """advantages=None keeps TRL's advantages; the spec documented as TRL's default reproduces them."""
    _, rec, warned = _run(tok, tmp_path, None, steps=1)
    assert not any("replaces TRL's advantages" in w for w in warned)
    _check(rec, AdvantageSpec(baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps"))


def test_grouped_rewards_weights_and_unscorable():
    nan = float("nan")
    rpf = torch.tensor([[1.0, nan], [nan, nan], [0.5, 2.0], [0.0, 1.0]])  # (N=4, F=2)
    Z, bad = grouped_rewards(rpf, torch.tensor([1.0, 0.5]), 2)
    assert torch.equal(Z, torch.tensor([[1.0, 0.0], [1.5, 0.5]], dtype=torch.float64))
    assert bad.tolist() == [[False, True], [False, False]]
    with pytest.raises(ValueError, match="whole groups"):
        grouped_rewards(rpf, torch.tensor([1.0, 0.5]), 3)


def test_bad_specs_are_clear_errors(tok, tmp_path):
    with pytest.raises(ValueError, match="baseline='loo'.*choose one of"):
        AdvantageSpec(baseline="loo")
    with pytest.raises(ValueError, match="ddof"):
        AdvantageSpec(ddof=2)
    with pytest.raises(ValueError, match=r"needs the trainer.s value_fn: UGRPOTrainer\(\.\.\., value_fn=lambda"):
        UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=digit_reward,
                     args=grpo_config(tmp_path), train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
                     processing_class=tok, advantages=AdvantageSpec(baseline="oracle"))


def sometimes_none(prompts, completions, **kwargs):
    """A second reward: completion length / 8, None (unscorable) when the completion holds a '0'."""
    return [None if "0" in c else len(c) / 8 for c in completions]


def test_two_reward_functions_weighted_sum_overrides_normalize_then_sum(tok, tmp_path):
    """TRL's reward_weights are honoured, None is skipped per function, multi_objective_aggregation is overridden."""
    r1, r2 = Recorder(digit_reward), Recorder(sometimes_none)
    with pytest.warns(UserWarning, match="multi_objective_aggregation='normalize_then_sum' are ignored"):
        trainer = UGRPOTrainer(
            model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=[r1, r2],
            args=grpo_config(tmp_path, max_steps=1, num_generations=G, per_device_train_batch_size=16,
                             reward_weights=[1.0, 0.5], multi_objective_aggregation="normalize_then_sum"),
            train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tok, advantages=AdvantageSpec(),
        )
    r1.attach(trainer)
    trainer.train()
    a = torch.tensor(r1.rewards[0], dtype=torch.float64)
    b = torch.tensor([float("nan") if v is None else v for v in r2.rewards[0]], dtype=torch.float64)
    assert torch.isnan(b).any() and not torch.isnan(b).all()  # the batch exercises None
    Z = (a + 0.5 * torch.nan_to_num(b)).view(-1, G)
    want = compute_advantages(Z, baseline="grpo").advantages.reshape(-1)
    assert torch.allclose(r1.batches[0]["advantages"].double(), want, atol=1e-6, rtol=0)
