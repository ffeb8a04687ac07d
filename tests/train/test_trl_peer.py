"""ugrpo against TRL's ``GRPOTrainer``: same advantages, same parameter gradient (issue 3).

TRL's numbers come from TRL's own code paths, not from a re-derivation: a real
``GRPOTrainer`` is built on the tiny model, only its generation call
(``_generate_single_turn``) is replaced so that it returns a fixed batch of completions,
and TRL then tokenises the prompts, pads, scores the rewards, computes the advantages
(``_generate_and_score_completions``) and the loss (``compute_loss``) itself. ugrpo computes
the same batch with ``ugrpo.stats.advantages.compute_advantages``,
``ugrpo.lm.completion_logprobs`` and ``ugrpo.train.loss.policy_loss`` on a copy of the same
weights; both losses are backpropagated and every parameter gradient is compared.

The settings that make the two agree are documented in ``docs/trl-equivalence.md``:

=====================================  ==============================================
TRL (``GRPOConfig``)                    ugrpo
=====================================  ==============================================
``scale_rewards="group"`` (default)     ``baseline="grpo_mean", scale="std", ddof=1,
                                        eps=1e-4, zero_std="eps"``
``loss_type="dapo"`` (default), 1 proc  ``aggregation="token_mean"``
``loss_type="bnpo"``                    ``aggregation="token_mean"``
``loss_type="grpo"``                    ``aggregation="seq_mean"``
``loss_type="dr_grpo"``                 ``aggregation="seq_sum"``, loss divided by
                                        ``max_completion_length`` (= ``denominator=N*L``)
``epsilon``, ``epsilon_high``           ``clip_low``, ``clip_high``
``beta``                                ``kl_coef`` (K3 estimate, paper eq. (13))
=====================================  ==============================================

The batch: B = 3 prompts of different lengths (so TRL left-pads), G = 4 completions each,
``max_completion_length`` L = 6; completions end in EOS at different positions, two are
truncated at L without EOS, one is EOS alone; one group has all-equal rewards (zero std).
"""

from __future__ import annotations

import copy

import pytest
import torch

trl = pytest.importorskip("trl", reason="the TRL peer test needs `trl` (pip install 'ugrpo[trl]')")

from ugrpo.lm.logprobs import completion_logprobs  # noqa: E402
from ugrpo.lm.sampling import completion_mask_from_ids  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402
from ugrpo.stats.advantages import compute_advantages  # noqa: E402
from ugrpo.train.loss import policy_loss  # noqa: E402

TOL = 1e-5  # max |grad_TRL - grad_ugrpo| over every entry of every parameter (the bar)

PROMPTS = ["12+7=", "3*4=", "(8-5)*2="]
G = 4
L = 6  # TRL max_completion_length = ugrpo max_new_tokens
# completions as text; "|" marks EOS; no "|" and L characters = truncated at L
COMPLETIONS = [
    ["19|", "20|", "191919", "|"],
    ["12|", "1|", "7|", "123456"],
    ["6|", "6|", "6|", "6|"],
]
REWARDS = [
    [1.0, 0.0, 0.25, 0.0],
    [1.0, 0.5, 0.0, 0.0],
    [1.0, 1.0, 1.0, 1.0],  # all equal: std 0, TRL gives 0 / (0 + 1e-4) = 0
]
B = len(PROMPTS)
N = B * G


# --------------------------------------------------------------------------------------
# the fixed batch
# --------------------------------------------------------------------------------------


def _completion_token_lists(tok) -> list[list[int]]:
    """Completion token ids, row b*G+g, cut after the first EOS (what TRL's generation returns)."""
    out = []
    for group in COMPLETIONS:
        for text in group:
            body, eos, _ = text.partition("|")
            ids = tok(body, add_special_tokens=False)["input_ids"] if body else []
            if eos:
                ids = ids + [tok.eos_token_id]
            assert len(ids) <= L, f"fixed completion {text!r} is longer than L={L} tokens"
            out.append(ids)
    return out


def _ugrpo_batch(tok) -> dict[str, torch.Tensor]:
    """The same batch laid out the ugrpo way (``Rollout``): prompt-major rows, left/right padding."""
    enc = tok(PROMPTS, padding=True, return_tensors="pt")
    prompt_ids = enc["input_ids"].repeat_interleave(G, dim=0)  # (N, P)
    prompt_mask = enc["attention_mask"].repeat_interleave(G, dim=0)  # (N, P)
    lists = _completion_token_lists(tok)
    T = max(len(c) for c in lists)
    completion_ids = torch.full((N, T), tok.pad_token_id, dtype=torch.long)
    for i, c in enumerate(lists):
        completion_ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
    completion_mask, truncated = completion_mask_from_ids(completion_ids, [tok.eos_token_id])  # as sample_groups
    assert all(len(c) == L for c, t in zip(lists, truncated) if t), "a row without EOS must have L tokens"
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "truncated": truncated,
        "rewards": torch.tensor(REWARDS, dtype=torch.float32),  # (B, G)
    }


# --------------------------------------------------------------------------------------
# TRL's side
# --------------------------------------------------------------------------------------


def _reward_from_row(prompts, completions, row, **kwargs):
    """TRL reward function: the fixed reward of each row (``row`` is a dataset column)."""
    flat = [r for group in REWARDS for r in group]
    return [flat[i] for i in row]


def _trl_trainer(model, tok, tmp_path, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=N,  # counts completions (B*G), RUNTIME.md
        num_generations=G,
        max_completion_length=L,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        seed=0,
        **config,
    )
    data = Dataset.from_dict({"prompt": PROMPTS, "row": [0, G, 2 * G]})
    trainer = GRPOTrainer(
        model=model, reward_funcs=_reward_from_row, args=args, train_dataset=data, processing_class=tok
    )
    fixed = _completion_token_lists(tok)

    def fixed_generation(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # only the sampler is replaced; everything downstream is TRL's own code
        assert len(prompt_ids) == N and num_generations == G
        return [list(c) for c in fixed], None

    trainer._generate_single_turn = fixed_generation
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what Trainer's loop sets for gradient_accumulation_steps=1
    return trainer


def _trl_inputs(trainer) -> dict:
    """TRL's own ``_generate_and_score_completions`` on the fixed batch (prompt-major rows)."""
    rows = [{"prompt": PROMPTS[b], "row": b * G + g} for b in range(B) for g in range(G)]
    return trainer._generate_and_score_completions(rows)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _max_grad_diff(g1: dict, g2: dict) -> float:
    assert g1.keys() == g2.keys(), f"different parameters got gradients: {sorted(g1.keys() ^ g2.keys())}"
    return max(float((g1[n] - g2[n]).abs().max()) for n in g1)


def _grad_norm(g: dict) -> float:
    return float(torch.sqrt(sum((v.double() ** 2).sum() for v in g.values())))


# --------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def base_model(tok):
    return build_tiny_model(tok, size="1m", seed=0)  # float32, random init


@pytest.fixture(scope="module")
def saved_dir(tok, base_model, tmp_path_factory):
    """The base model and tokenizer in a local folder (TRL builds its reference model from a path)."""
    path = tmp_path_factory.mktemp("trl_ref")
    base_model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def batch(tok):
    return _ugrpo_batch(tok)


def _ugrpo_grads(model, batch, advantages, *, aggregation, scale=1.0, **loss_kw):
    model.zero_grad(set_to_none=True)
    model.train()
    logp = completion_logprobs(
        model, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
    )  # (N, T)
    out = policy_loss(logp, advantages, batch["completion_mask"], aggregation=aggregation, **loss_kw)
    (out.loss * scale).backward()
    return _grads(model), out


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------


def test_fixed_batch_is_laid_out_like_trl(tok, base_model, batch, tmp_path):
    """TRL's padded tensors for the batch equal ugrpo's (so the gradients compare like with like)."""
    trainer = _trl_trainer(copy.deepcopy(base_model), tok, tmp_path)
    inputs = _trl_inputs(trainer)
    assert torch.equal(inputs["prompt_ids"], batch["prompt_ids"])
    assert torch.equal(inputs["prompt_mask"], batch["prompt_mask"])
    assert torch.equal(inputs["completion_mask"].long(), batch["completion_mask"])
    m = batch["completion_mask"].bool()
    assert torch.equal(inputs["completion_ids"][m], batch["completion_ids"][m])
    # the batch exercises what it claims: left padding, EOS at several positions, truncation, an empty body
    assert (batch["prompt_mask"] == 0).any()
    assert sorted(set(batch["completion_mask"].sum(1).tolist())) == [1, 2, 3, 6]
    assert int(batch["truncated"].sum()) == 2


def test_advantages_match_trl_group_scaling(tok, base_model, batch, tmp_path):
    """scale_rewards='group' == grpo_mean / std (ddof=1) / (std + 1e-4); zero-std group -> 0."""
    trainer = _trl_trainer(copy.deepcopy(base_model), tok, tmp_path)
    trl_adv = _trl_inputs(trainer)["advantages"]  # (N,)
    res = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps")
    assert torch.allclose(res.advantages.reshape(-1), trl_adv, atol=TOL, rtol=0)
    # ugrpo's default zero-std policy gives the same numbers here (the group's numerator is exactly 0)
    res0 = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="zero")
    assert torch.allclose(res0.advantages.reshape(-1), trl_adv, atol=TOL, rtol=0)
    assert res.n_zero_std == 1
    # power: ddof=0 (population std) or ugrpo's default eps would not match TRL
    res_ddof0 = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="std", ddof=0, eps=1e-4)
    assert (res_ddof0.advantages.reshape(-1) - trl_adv).abs().max() > 1e-2


def test_advantages_match_trl_no_scaling(tok, base_model, batch, tmp_path):
    """scale_rewards='none' (Dr. GRPO) == grpo_mean without scaling == (G-1)/G * the paper's LOO (eq. 4)."""
    trainer = _trl_trainer(copy.deepcopy(base_model), tok, tmp_path, scale_rewards="none")
    trl_adv = _trl_inputs(trainer)["advantages"]
    res = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="none")
    assert torch.allclose(res.advantages.reshape(-1), trl_adv, atol=TOL, rtol=0)
    loo = compute_advantages(batch["rewards"], baseline="grpo", scale="none").advantages
    assert torch.allclose(loo.reshape(-1) * (G - 1) / G, trl_adv, atol=TOL, rtol=0)


# TRL loss_type -> (ugrpo aggregation, factor on ugrpo's loss)
LOSS_MAP = {
    "dapo": ("token_mean", 1.0),  # TRL default; tokens of the whole generation batch (1 process, no accumulation)
    "bnpo": ("token_mean", 1.0),
    "grpo": ("seq_mean", 1.0),
    "dr_grpo": ("seq_sum", 1.0 / L),  # TRL divides the token sum by N * max_completion_length
}


@pytest.mark.parametrize("loss_type", list(LOSS_MAP))
def test_gradient_matches_trl_on_policy(loss_type, tok, base_model, batch, tmp_path):
    """One on-policy update (num_iterations=1, ratio = 1, beta = 0): every parameter gradient agrees."""
    trainer = _trl_trainer(copy.deepcopy(base_model), tok, tmp_path, loss_type=loss_type)
    assert trainer.beta == 0.0 and trainer.num_iterations == 1
    inputs = _trl_inputs(trainer)
    assert "old_per_token_logps" not in inputs  # on-policy: TRL uses logp.detach(), ratio = 1
    trainer.model.zero_grad(set_to_none=True)
    trainer.compute_loss(trainer.model, inputs).backward()
    g_trl = _grads(trainer.model)

    aggregation, factor = LOSS_MAP[loss_type]
    adv = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps")
    model = copy.deepcopy(base_model)
    g_u, _ = _ugrpo_grads(model, batch, adv.advantages.reshape(-1), aggregation=aggregation, scale=factor)
    assert _grad_norm(g_trl) > 1e-2  # the comparison is not between two near-zero gradients
    diff = _max_grad_diff(g_trl, g_u)
    assert diff <= TOL, f"loss_type={loss_type}: max |grad diff| = {diff:.3g} > {TOL}"


def test_wrong_aggregation_is_detected(tok, base_model, batch, tmp_path):
    """Power check: TRL's default 'dapo' is not ugrpo's 'seq_mean' or 'seq_sum' on this batch."""
    trainer = _trl_trainer(copy.deepcopy(base_model), tok, tmp_path)  # default loss_type
    assert trainer.loss_type == "dapo"
    inputs = _trl_inputs(trainer)
    trainer.model.zero_grad(set_to_none=True)
    trainer.compute_loss(trainer.model, inputs).backward()
    g_trl = _grads(trainer.model)
    adv = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps")
    for wrong in ("seq_mean", "seq_sum"):
        g_u, _ = _ugrpo_grads(copy.deepcopy(base_model), batch, adv.advantages.reshape(-1), aggregation=wrong)
        assert _max_grad_diff(g_trl, g_u) > 100 * TOL, wrong


def test_dr_grpo_equals_seq_sum_with_denominator(tok, base_model, batch, tmp_path):
    """dr_grpo's constant written as ugrpo's ``denominator`` argument: N * max_completion_length."""
    trainer = _trl_trainer(copy.deepcopy(base_model), tok, tmp_path, loss_type="dr_grpo", scale_rewards="none")
    inputs = _trl_inputs(trainer)
    trainer.model.zero_grad(set_to_none=True)
    trainer.compute_loss(trainer.model, inputs).backward()
    g_trl = _grads(trainer.model)
    adv = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="none").advantages.reshape(-1)
    g_u, _ = _ugrpo_grads(copy.deepcopy(base_model), batch, adv, aggregation="seq_sum", denominator=N * L)
    assert _grad_norm(g_trl) > 1e-3
    assert _max_grad_diff(g_trl, g_u) <= TOL


def _perturbed(model, scale: float, seed: int):
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return out


@pytest.mark.parametrize("bias_correction_kl", [False, True])
def test_gradient_with_ratio_clip_and_kl(bias_correction_kl, tok, base_model, saved_dir, batch, tmp_path):
    """Algorithm 2 pieces: token ratio against given old log-probs, asymmetric clipping, K3 KL.

    TRL builds its reference model itself (from the saved folder); the policy is then moved
    away from it, and the old log-probs come from a third, perturbed copy, so that ratios
    leave [1 - 0.2, 1 + 0.28] on both sides and the KL gradient is not zero.

    ``use_bias_correction_kl=False``: the gradients agree. TRL's default ``True`` multiplies
    the per-token K3 term by the (differentiable) ratio, which changes the KL gradient even
    on-policy; ugrpo implements the paper's plain K3 (eq. (13)) and has no such option, so
    there the gradients must differ (documented in docs/trl-equivalence.md).
    """
    beta, eps_lo, eps_hi = 0.05, 0.2, 0.28
    trainer = _trl_trainer(
        str(saved_dir), tok, tmp_path, beta=beta, epsilon=eps_lo, epsilon_high=eps_hi,
        use_bias_correction_kl=bias_correction_kl,
    )
    assert trainer.ref_model is not None
    policy = _perturbed(base_model, 0.02, seed=1)
    trainer.model.load_state_dict(policy.state_dict())
    old = _perturbed(base_model, 0.05, seed=2).eval()
    with torch.no_grad():
        logp_old = completion_logprobs(
            old, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
        )
        logp_ref = completion_logprobs(
            base_model, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
        )
    inputs = _trl_inputs(trainer)
    assert torch.allclose(inputs["ref_per_token_logps"] * batch["completion_mask"], logp_ref, atol=1e-5)
    inputs["old_per_token_logps"] = logp_old  # as TRL stores it when num_iterations > 1
    trainer.model.zero_grad(set_to_none=True)
    trainer.compute_loss(trainer.model, inputs).backward()
    g_trl = _grads(trainer.model)

    adv = compute_advantages(batch["rewards"], baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps")
    g_u, out = _ugrpo_grads(
        copy.deepcopy(policy),
        batch,
        adv.advantages.reshape(-1),
        aggregation="token_mean",
        logp_old=logp_old,
        logp_ref=logp_ref,
        clip_low=eps_lo,
        clip_high=eps_hi,
        kl_coef=beta,
    )
    m = batch["completion_mask"].bool()
    with torch.no_grad():
        logp_new = completion_logprobs(
            policy, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
        )
    ratio = torch.exp(logp_new - logp_old)[m]
    assert (ratio < 1 - eps_lo).any() and (ratio > 1 + eps_hi).any(), "both clip bounds must be crossed"
    assert float(out.clip_frac) > 0.05, "the clipped branch must be active on some tokens"
    assert float(out.kl) > 1e-4
    diff = _max_grad_diff(g_trl, g_u)
    if bias_correction_kl:
        assert diff > 100 * TOL, "TRL's ratio-weighted KL should not match ugrpo's plain K3"
    else:
        assert diff <= TOL, f"max |grad diff| = {diff:.3g} > {TOL}"
