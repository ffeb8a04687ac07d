"""The per-prompt history (ugrpo.stats.history, docs/math.md M14, M46-M49): its sums against a hand count, the JSON
round trip of the trainer's checkpoints, what it hands the predictor, and bad input."""

import json

import numpy as np
import pytest
import torch

from ugrpo.envs import random_env
from ugrpo.stats.history import PromptHistory, check_unit_rewards
from ugrpo.stats.predict import posterior_means, predict, reward_variance


def test_history_sums_match_a_hand_count():
    env = random_env("softmax_bandit", n_prompts=2, n_actions=2, logit_scale=0.7, reward_spread=1.5, seed=2)
    W = env.score_table()
    h = PromptHistory(2)
    prompts, sizes = np.array([1, 0, 1]), np.array([2, 3, 2])
    acts = [(1, 1.0), (0, 0.0), (0, 1.0), (1, 1.0), (1, 0.0), (0, 1.0), (0, 1.0)]
    owner = [1, 1, 0, 0, 0, 1, 1]
    rewards = torch.tensor([z for _, z in acts], dtype=torch.float64)
    scores = torch.stack([W[x, a] for x, (a, _) in zip(owner, acts)])
    h.update(prompts, sizes, rewards.numpy(), scores.numpy())
    w2 = (scores**2).sum(1)
    assert h.sums["visits"].tolist() == [1.0, 2.0]
    assert h.sums["samples"].tolist() == [3.0, 4.0]
    assert h.sums["successes"].tolist() == [2.0, 3.0]
    torch.testing.assert_close(torch.from_numpy(h.sums["w2_success"]), torch.stack([w2[2] + w2[3],
                                                                                     w2[0] + w2[5] + w2[6]]))
    # per visit, T0 = (||sum z W||^2 - sum z^2 ||W||^2) / (G (G-1)) (M14)
    t_first = ((scores[0] * 1).pow(2).sum() - w2[0]) / 2
    t_last = ((scores[5] + scores[6]).pow(2).sum() - w2[5] - w2[6]) / 2
    torch.testing.assert_close(torch.tensor(h.sums["t0_sum"][1]), t_first + t_last)
    st = h.stats(np.arange(2), scores=True)
    want = predict(h.sums, np.arange(2), scores=True)                   # the history is the predictor's input
    for key in ("value", "c2", "c3", "g_norm2"):
        np.testing.assert_array_equal(getattr(st, key), getattr(want, key))
    empty = PromptHistory(2).stats(np.arange(2), scores=True)
    assert empty.c2[0] == empty.c2[1] > 0 and empty.c3[0] == empty.c3[1] > 0  # no history: even, not starved


def test_history_counts_and_json_round_trip():
    h = PromptHistory(4)
    z = np.array([1.0, 0.0, 0.5, 1.0, 1.0, 0.0])
    h.update(np.array([2, 0, 2]), np.array([2, 2, 2]), z, np.ones((6, 3)))
    assert h.sums["visits"].tolist() == [1, 0, 2, 0]
    assert h.sums["samples"].tolist() == [2, 0, 4, 0]
    assert h.sums["successes"].tolist() == [1.5, 0, 2.0, 0]  # fractional rewards count as fractional successes
    assert h.sums["w2_success"][0] == pytest.approx(4.5) and h.sums["w2_failure"][0] == pytest.approx(1.5)
    back = PromptHistory.from_json(json.loads(json.dumps(h.to_json())), 4, "x")
    assert all(np.array_equal(back.sums[k], h.sums[k]) for k in h.sums) and back.second
    assert h.sums["w4_success"][0] == pytest.approx(1.0 * 9 + 0.5 * 9)  # z ||W||^4 with ||W||^2 = 3
    old = {k: v for k, v in h.to_json().items() if k not in ("w4_success", "w4_failure", "t0_sq", "second_moments")}
    legacy = PromptHistory.from_json(old, 4, "x")  # a history.json from before the certificate's sums
    assert not legacy.second and not legacy.from_json(legacy.to_json(), 4, "x").second
    # the legacy file's second-moment sums are not handed to the predictor (they would cover part of the run only)
    assert set(legacy.sums_for_prediction()) == {"visits", "samples", "successes", "w2_success", "w2_failure",
                                                 "t0_sum"}
    assert set(h.sums_for_prediction()) == set(h.sums)
    post = h.posterior(np.array([0, 2]), scores=False)
    np.testing.assert_allclose(h.reward_variance(np.array([0, 2])), reward_variance(post), rtol=1e-12)
    np.testing.assert_allclose(posterior_means(post).c2, reward_variance(post), rtol=1e-12)  # no scores: E p(1-p)
    with pytest.raises(ValueError, match="for 4 train prompts but this run has 5"):
        PromptHistory.from_json(h.to_json(), 5, "x")
    with pytest.raises(ValueError, match="sample 1 of this step has reward 2.0"):
        check_unit_rewards(np.array([0.5, 2.0]), "ustat")
