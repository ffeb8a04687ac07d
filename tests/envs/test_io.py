"""Loader errors (one malformed file per row), save/load round trip, built-in instances."""

import json

import pytest
import torch

from ugrpo.envs import (
    EnvFormatError,
    LinearSoftmax,
    SoftmaxBandit,
    builtin_env,
    list_builtin_envs,
    load_env,
    random_env,
    save_env,
)

GOOD_BANDIT = {"kind": "softmax_bandit", "prompts": [{"logits": [0.0, 1.0], "reward_mean": [0.2, 0.7]},
                                                    {"logits": [0.1, 0.2, 0.3], "reward_mean": [0.5, 0.5, 0.9]}]}
GOOD_LINEAR = {"kind": "linear_softmax", "theta": [0.1, -0.2],
               "prompts": [{"features": [[1.0, 0.0], [0.0, 1.0]], "reward_mean": [0.3, 0.6]},
                           {"features": [[1.0, 1.0], [0.5, 0.0], [0.0, 2.0]], "reward_mean": [0.1, 0.4, 0.8]}]}


def _edit(base, fn):
    d = json.loads(json.dumps(base))
    fn(d)
    return d


def _set(path, value):
    def fn(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return fn


# (case id, document or raw text, substrings the message must contain)
CASES = [
    ("missing kind", _edit(GOOD_BANDIT, lambda d: d.pop("kind")), ["kind", "missing", "softmax_bandit"]),
    ("unknown kind", _edit(GOOD_BANDIT, _set(["kind"], "mdp")), ["kind", "'mdp'", "unknown"]),
    ("unknown top key", _edit(GOOD_BANDIT, _set(["temperature"], 1.0)), ["temperature", "not allowed"]),
    ("reward > 1", _edit(GOOD_BANDIT, _set(["prompts", 1, "reward_mean", 1], 1.7)),
     ["prompts[1].reward_mean[1] = 1.7 is outside [0, 1]"]),
    ("reward < 0", _edit(GOOD_BANDIT, _set(["prompts", 0, "reward_mean", 0], -0.1)),
     ["prompts[0].reward_mean[0] = -0.1 is outside [0, 1]"]),
    ("K mismatch", _edit(GOOD_BANDIT, _set(["prompts", 1, "reward_mean"], [0.1, 0.2])),
     ["prompts[1].reward_mean", "2 entries", "prompts[1].logits has 3"]),
    ("NaN logit", "NAN", ["prompts[0].logits[1]", "not finite"]),
    ("string reward", _edit(GOOD_BANDIT, _set(["prompts", 0, "reward_mean", 1], "0.5")),
     ["prompts[0].reward_mean[1]", "not a number"]),
    ("bool logit", _edit(GOOD_BANDIT, _set(["prompts", 0, "logits", 0], True)), ["prompts[0].logits[0]",
                                                                                 "not a number"]),
    ("one arm", _edit(GOOD_BANDIT, _set(["prompts", 0], {"logits": [0.0], "reward_mean": [0.5]})),
     ["prompts[0].logits", "at least 2"]),
    ("missing logits", _edit(GOOD_BANDIT, _set(["prompts", 1], {"reward_mean": [0.5, 0.5]})),
     ["prompts[1].logits", "missing"]),
    ("unknown prompt "
     "key", _edit(GOOD_BANDIT, _set(["prompts", 0, "answer"], 3)), ["prompts[0]", "answer", "not allowed"]),
    ("empty prompts", _edit(GOOD_BANDIT, _set(["prompts"], [])), ["prompts", "non-empty"]),
    ("prompt not object", _edit(GOOD_BANDIT, _set(["prompts", 1], [1, 2])), ["prompts[1]", "object"]),
    ("linear no theta", _edit(GOOD_LINEAR, lambda d: d.pop("theta")), ["theta", "missing"]),
    ("linear row length", _edit(GOOD_LINEAR, _set(["prompts", 1, "features", 2], [0.0, 2.0, 1.0])),
     ["prompts[1].features[2]", "3 entries, expected 2"]),
    ("linear K mismatch", _edit(GOOD_LINEAR, _set(["prompts", 0, "reward_mean"], [0.3])),
     ["prompts[0].reward_mean", "1 entries", "prompts[0].features has 2"]),
    ("linear logits "
     "key", _edit(GOOD_LINEAR, _set(["prompts", 0, "logits"], [0.0, 1.0])), ["prompts[0]", "logits", "not allowed"]),
    ("bandit theta key", _edit(GOOD_BANDIT, _set(["theta"], [0.0])), ["theta", "not allowed"]),
    ("name not string", _edit(GOOD_BANDIT, _set(["name"], 3)), ["name", "string"]),
    ("not an object", [1, 2, 3], ["top level", "JSON object"]),
    ("invalid json", "{\"kind\": ", ["not valid JSON", "line 1"]),
]


@pytest.mark.parametrize("case,doc,needles", CASES, ids=[c[0] for c in CASES])
def test_malformed_files_name_the_file_field_and_index(tmp_path, case, doc, needles):
    path = tmp_path / "bad_env.json"
    if doc == "NAN":
        path.write_text(json.dumps(GOOD_BANDIT).replace("1.0]", "NaN]", 1))
    elif isinstance(doc, str):
        path.write_text(doc)
    else:
        path.write_text(json.dumps(doc))
    with pytest.raises(EnvFormatError) as info:
        load_env(path)
    msg = str(info.value)
    assert str(path) in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_good_files_load():
    b = load_env_dict(GOOD_BANDIT)
    assert isinstance(b, SoftmaxBandit) and b.dim == 5 and b.n_actions.tolist() == [2, 3]
    lin = load_env_dict(GOOD_LINEAR)
    assert isinstance(lin, LinearSoftmax) and lin.dim == 2 and lin.n_prompts == 2


def load_env_dict(d):
    from ugrpo.envs import env_from_dict
    return env_from_dict(d)


@pytest.mark.parametrize("env", [
    random_env("softmax_bandit", n_prompts=5, n_actions=3, seed=1, name="b", description="d"),
    random_env("linear_softmax", n_prompts=4, n_actions=3, dim=2, seed=2),
    load_env_dict(GOOD_BANDIT),
], ids=["bandit", "linear", "ragged"])
def test_save_load_round_trip(tmp_path, env):
    save_env(env, tmp_path / "e.json")
    back = load_env(tmp_path / "e.json")
    assert type(back) is type(env) and back.name == env.name and back.description == env.description
    for attr in ("theta0", "features", "reward_mean", "action_mask"):
        assert torch.equal(getattr(back, attr), getattr(env, attr)), attr
    save_env(back, tmp_path / "f.json")
    assert (tmp_path / "e.json").read_text() == (tmp_path / "f.json").read_text()


def test_missing_file_and_unknown_builtin():
    with pytest.raises(FileNotFoundError, match="no such environment file"):
        load_env("/nonexistent/env.json")
    with pytest.raises(ValueError, match="unknown built-in environment 'nope'.*demo"):
        builtin_env("nope")


def test_builtin_demo_loads():
    assert "demo" in list_builtin_envs()
    env = builtin_env("demo")
    assert env.name == "demo" and 20 <= env.n_prompts <= 60 and 4 <= int(env.n_actions.max()) <= 8


def test_bandit_score_scale_round_trips_and_is_checked(tmp_path):
    from ugrpo.envs.io import env_from_dict

    env = random_env("softmax_bandit", n_prompts=6, n_actions=3, seed=2, score_scale_spread=50.0)
    save_env(env, tmp_path / "s.json")
    back = load_env(tmp_path / "s.json")
    assert all("score_scale" in p for p in json.loads((tmp_path / "s.json").read_text())["prompts"])
    torch.testing.assert_close(back.probs(), env.probs())
    torch.testing.assert_close(back.score_table(), env.score_table())
    doc = {"kind": "softmax_bandit", "prompts": [{"logits": [0, 1], "reward_mean": [0.2, 0.8], "score_scale": 0}]}
    with pytest.raises(EnvFormatError, match=r"prompts\[0\].score_scale = 0.0 must be > 0"):
        env_from_dict(doc)
