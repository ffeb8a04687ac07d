"""GroupSizeMonitor inside a real TRL run: logged keys, agreement with an independent ugrpo pilot, errors.

The agreement test freezes the policy (learning_rate = 0), so every TRL generation batch is a fresh,
independent pilot at the same theta. The monitor's c1 and c3 (averaged over its measurements, each
from a new batch and a new sketch projection) are compared with a pilot that ugrpo draws itself with
``sample_groups`` on the same prompts, scored with *exact* per-sample gradients
(``per_sample_scores``, no sketch) over the same parameters. Both are unbiased for the same
constants (docs/math.md M14-M19); the tolerance is 3.5 combined standard errors, and the
comparison resolves c3 to 25% (a sketch mis-scaled by k^-0.1, a bug seen once, fails it).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import pytest
import torch

trl = pytest.importorskip("trl", reason="the TRL integration needs `trl` (pip install 'ugrpo[trl]')")

from datasets import Dataset  # noqa: E402

from tests.integrations.trl_helpers import PROMPTS, first_digit_reward, grpo_config  # noqa: E402
from ugrpo.integrations.trl import GroupSizeMonitor, UGRPOTrainer  # noqa: E402
from ugrpo.integrations.trl_monitor import trl_metrics  # noqa: E402
from ugrpo.lm.sampling import completion_mask_from_ids  # noqa: E402
from ugrpo.lm.scores import ScoreSpec, per_sample_scores  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402
from ugrpo.stats.components import estimate_components  # noqa: E402

# one attention output projection and the final norm: D = 128*128 + 128, small enough for exact scores
SPEC = ScoreSpec(select="modules", patterns=("*.layers.3.self_attn.o_proj.weight", "model.norm.weight"))
# the agreement test's prompt set: 160 distinct two-digit sums (more prompts -> a tighter c3 comparison)
MANY = [f"{a}+{b}=" for a in range(10, 90, 5) for b in range(11, 91, 8)]
KEYS = ["ugrpo/c1", "ugrpo/c2", "ugrpo/c3", "ugrpo/g_star_low", "ugrpo/g_recommended", "ugrpo/g_decided",
        "ugrpo/g_band_low", "ugrpo/g_band_high"]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def _trainer(tok, tmp_path, monitor, prompts=PROMPTS, **config):
    return UGRPOTrainer(
        model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=first_digit_reward,
        args=grpo_config(tmp_path, **config), train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok, advantages=None, monitor=monitor,
    )


def test_monitor_logs_keys_through_trl(tok, tmp_path):
    mon = GroupSizeMonitor(every=2, sketch_dim=128, n_boot=200, params=SPEC, seed=3)
    trainer = _trainer(tok, tmp_path, mon, max_steps=3, per_device_train_batch_size=256, num_generations=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    rows = [r for r in trainer.state.log_history if "loss" in r]
    assert [("ugrpo/c1" in r) for r in rows] == [True, False, True]  # generation steps 0 and 2
    assert len(mon.history) == 2 and mon.N == 256 and mon.candidates == [2, 4, 8, 16, 32, 64, 128, 256]
    logged = {k for r in rows for k in r if k.startswith("ugrpo/")}
    assert set(KEYS) <= logged, f"missing {set(KEYS) - logged}"
    for r, rec in zip([rows[0], rows[2]], mon.history):
        assert r["ugrpo/c3"] == pytest.approx(rec.c3.estimate) and rec.c3.ci_low <= rec.c3.estimate <= rec.c3.ci_high
        if "ugrpo/g_star" in r:
            assert r["ugrpo/g_star_low"] <= r["ugrpo/g_star"] <= r["ugrpo/g_star_high"]
        assert r["ugrpo/g_band_low"] <= r["ugrpo/g_recommended"] <= r["ugrpo/g_band_high"]
        assert (r["ugrpo/g_band_low"], r["ugrpo/g_band_high"]) == rec.g_band
        assert r["ugrpo/g_decided"] == float(rec.decided)
    # a warning exactly when a batch that decides puts G = 4 outside its band, naming the G to try
    said = [str(w.message) for w in caught if "num_generations = 4 is" in str(w.message)]
    outside = [rec for rec in mon.history if rec.decided and not rec.g_band[0] <= 4 <= rec.g_band[1]]
    assert len(said) == (1 if outside else 0)
    if outside:
        assert f"try num_generations = {outside[0].g_recommended}" in said[0]
    assert all(s > 0 for s in mon.seconds)


def _sample(model, tok, prompts, G0):
    """G0 completions per prompt from ``model.generate`` (plain ancestral sampling at temperature 1)."""
    torch.manual_seed(1234)
    enc = tok(prompts, padding=True, return_tensors="pt")
    prompt_ids, prompt_mask = enc["input_ids"].repeat_interleave(G0, 0), enc["attention_mask"].repeat_interleave(G0, 0)
    with torch.no_grad():
        out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=8, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
    completion_ids = out[:, prompt_ids.shape[1]:]
    completion_mask, _ = completion_mask_from_ids(completion_ids, [tok.eos_token_id])
    texts = [tok.decode(c[m.bool()], skip_special_tokens=True) for c, m in zip(completion_ids, completion_mask)]
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "texts": texts}


@pytest.mark.slow  # ~20 s of CPU: 10 TRL steps of 160 completions + 800 exact per-sample gradients
def test_monitor_agrees_with_independent_pilot(tok, tmp_path):
    K = 10
    mon = GroupSizeMonitor(every=1, sketch_dim=256, n_boot=200, params=SPEC, seed=11, warn=False, pool=1)
    trainer = _trainer(tok, tmp_path, mon, prompts=MANY, max_steps=K, per_device_train_batch_size=160,
                       num_generations=4, learning_rate=0.0)
    trainer.train()
    assert len(mon.history) == K
    # the independent pilot: fresh samples (HF sampling, its own seed) and exact scores at the same weights
    model = build_tiny_model(tok, size="1m", seed=0)
    G0 = 5
    roll = _sample(model, tok, MANY, G0)
    Z = torch.tensor(first_digit_reward([p for p in MANY for _ in range(G0)], roll["texts"]), dtype=torch.float64)
    W = per_sample_scores(model, tuple(roll[k] for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                                          "completion_mask")), params=SPEC).double()  # (N, D) exact
    ref = estimate_components(Z.view(len(MANY), G0), scores=W.view(len(MANY), G0, -1), n_boot=400,
                              generator=torch.Generator().manual_seed(0))
    for name in ("c1", "c3"):
        vals = torch.tensor([getattr(r, name).estimate for r in mon.history], dtype=torch.float64)
        m, se_m = float(vals.mean()), float(vals.std()) / math.sqrt(K)
        r = getattr(ref, name)
        z = abs(m - r.estimate) / math.hypot(se_m, r.se)
        assert z < 3.5, f"{name}: monitor {m:.4g} +- {se_m:.2g} vs pilot {r.estimate:.4g} +- {r.se:.2g} ({z:.1f} SE)"
        assert r.ci_low > 0, f"{name} of the reference pilot must be distinguishable from 0 for the test to have power"
    se_c3 = math.hypot(float(torch.tensor([r.c3.estimate for r in mon.history]).std()) / math.sqrt(K), ref.c3.se)
    assert se_c3 < 0.25 * ref.c3.estimate, f"power: c3 must be resolved to 25% (combined SE {se_c3:.3g})"


def test_undecided_batches_are_pooled_and_said_in_words():
    """One batch that cannot tell c1 from 0 -> the message says so and the estimate pools the recent batches."""
    gen = torch.Generator().manual_seed(0)

    def batch(B, spread):  # prompts differ by `spread` in their score direction: small spread -> c1 ~ 0
        u = spread * torch.randn(B, 1, 8, generator=gen, dtype=torch.float64)
        return ((torch.rand(B, 4, generator=gen) < 0.5).double(),
                u + torch.randn(B, 4, 8, generator=gen, dtype=torch.float64))

    mon = GroupSizeMonitor(every=1, n_boot=200, pool=3)
    mon.N, mon.candidates = 64, [2, 4, 8, 16, 32, 64]
    recs = [mon.measure_pooled(*batch(8, 0.0), step=s, seed=s) for s in range(4)]
    first, later = recs[0], recs[1:]
    assert first.n_batches == 1 and "cannot decide" not in first.message  # nothing to pool yet
    for s, rec in enumerate(later, start=1):
        if rec.n_batches > 1:
            assert rec.n_batches == min(s + 1, 3) and rec.n_prompts == 8 * rec.n_batches
            assert f"the batch at step {s} cannot decide" in rec.message and "biases c1 up and G* down" in rec.message
            z = torch.cat([b[0] for b in mon._pool]) if s == 3 else None
            if z is not None:
                assert z.shape == (24, 4)
    assert any(r.n_batches > 1 for r in later), "identical prompts must leave c1 undecided in some batch"
    mon1 = GroupSizeMonitor(every=1, n_boot=200, pool=3)
    mon1.N, mon1.candidates = 64, [2, 4, 8, 16, 32, 64]
    decided = mon1.measure_pooled(*batch(64, 10.0), step=0, seed=0)
    decided2 = mon1.measure_pooled(*batch(64, 10.0), step=1, seed=1)
    assert decided.decided and decided2.decided and decided2.n_batches == 1  # a batch that decides is used alone


def test_no_warning_from_a_batch_that_cannot_decide():
    """The previous callback's first warning ("try 8") came from a batch whose c1 estimate was below 0."""
    import warnings

    from ugrpo.envs.generate import random_env

    env = random_env("softmax_bandit", n_prompts=64, n_actions=4, reward_spread=0.3, seed=78)
    b = env.sample(env.theta0, 16, 4, torch.Generator().manual_seed(6))
    mon = GroupSizeMonitor(every=1, n_boot=200)
    mon.N, mon.candidates = 128, [2, 4, 8, 16, 32, 64, 128]
    rec = mon.measure_pooled(b.rewards, b.scores, step=0, seed=6)
    assert rec.c1.estimate < 0 and not rec.decided
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mon._maybe_warn(rec)  # no UserWarning
    assert not mon._warned
    logged = trl_metrics(rec)
    assert logged["ugrpo/g_decided"] == 0.0 and logged["ugrpo/g_recommended"] == float(rec.g_recommended)
    assert "ugrpo/g_star" not in logged  # c1's interval reaches 0: no point G*


def test_a_batch_that_decides_warns_once_and_logs_decided():
    """A steep bandit (exact band {4}) measured with num_generations = 32: the batch decides, says so in
    ``ugrpo/g_decided`` and the one warning names the G to use; a later batch does not warn again."""
    import warnings

    from ugrpo.envs.generate import random_env

    env = random_env("softmax_bandit", n_prompts=64, n_actions=4, reward_spread=2.0, seed=4000)
    mon = GroupSizeMonitor(every=1, n_boot=200)
    mon.N, mon.candidates = 128, [2, 4, 8, 16, 32, 64, 128]
    gen = torch.Generator().manual_seed(1)
    b = env.sample(env.theta0, 256, 8, gen)
    rec = replace(mon.measure_pooled(b.rewards, b.scores, step=0, seed=1), num_generations=32)
    assert rec.decided and not rec.g_band[0] <= 32 <= rec.g_band[1]
    assert trl_metrics(rec)["ugrpo/g_decided"] == 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mon._maybe_warn(rec)
        mon._maybe_warn(rec)
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and f"try num_generations = {rec.g_recommended}" in said[0]


def test_monitor_bad_inputs(tok, tmp_path):
    with pytest.raises(ValueError, match="num_generations >= 4.*num_generations = 2"):
        _trainer(tok, tmp_path, GroupSizeMonitor(every=1), num_generations=2, per_device_train_batch_size=8)
    with pytest.raises(ValueError, match="every=0"):
        GroupSizeMonitor(every=0)
    from trl import GRPOTrainer

    plain = GRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=first_digit_reward,
                        args=grpo_config(tmp_path, max_steps=1), train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
                        processing_class=tok, callbacks=[GroupSizeMonitor(every=1)])
    with pytest.raises(RuntimeError, match="use ugrpo.integrations.trl.UGRPOTrainer"):
        plain.train()
