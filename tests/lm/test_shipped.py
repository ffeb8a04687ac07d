"""The tiny models shipped in ugrpo/data/tiny: loaded with no build, files as in the manifest, accuracies as
recorded; ``pretrain-tiny`` rebuilds into a folder of its own and says whether it equals the shipped model."""

from __future__ import annotations

import functools
import json

import pytest
import torch

import ugrpo.lm.pretrain as pretrain_mod
import ugrpo.lm.tiny_cache as tiny_cache
from ugrpo.lm.loading import load_policy
from ugrpo.lm.tiny_shipped import (
    MANIFEST,
    MODEL_FILES,
    SHIPPED_NAMES,
    SHIPPED_ROOT,
    check_shipped,
    compare_weights,
    difference_cause,
    shipped_model_path,
)


def _no_build(*a, **k):
    raise AssertionError("a shipped tiny model must load with no build")


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((SHIPPED_ROOT / MANIFEST).read_text())


def test_tiny_instruct_loads_with_no_build_and_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("UGRPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrain_mod, "pretrain_tiny", _no_build)
    monkeypatch.setattr(tiny_cache, "_build_random", _no_build)
    pol = load_policy("tiny:instruct")
    assert pol.name == "tiny:instruct" and sum(p.numel() for p in pol.model.parameters()) > 9e5
    assert pol.tokenizer("12+7=")["input_ids"][0] == pol.tokenizer.bos_token_id
    assert not (tmp_path / "cache").exists()


def test_shipped_files_match_the_manifest(manifest):
    assert check_shipped() == []
    assert sorted(manifest["models"]) == sorted(SHIPPED_NAMES)
    for name, entry in manifest["models"].items():
        assert sorted(entry["files"]) == sorted(MODEL_FILES)
        meta = json.loads((SHIPPED_ROOT / name / "ugrpo_tiny.json").read_text())
        assert entry["recipe"] == {k: v for k, v in meta.items() if k != "history"}
        assert meta["strength"] == name and meta["seed"] == 0 and meta["size"] == "1m"
    build = manifest["build"]
    assert {"commands", "torch", "transformers", "date", "torch_threads"} <= set(build)


def test_a_changed_file_is_caught(tmp_path):
    import shutil

    root = tmp_path / "tiny"
    shutil.copytree(SHIPPED_ROOT, root)
    data = bytearray((root / "base" / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one bit of one weight
    (root / "base" / "model.safetensors").write_bytes(bytes(data))
    assert check_shipped(root) == ["base/model.safetensors"]


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_greedy_accuracy_on_the_held_out_problems_equals_the_recorded_one(name):
    """The shipped weights reproduce the greedy accuracy their build recorded (all 100 held-out problems, the
    warm-up's own evaluation code)."""
    from ugrpo.lm.pretrain import TINY_TASK_OPTIONS, _greedy
    from ugrpo.tasks.arithmetic import make_arithmetic
    from ugrpo.tasks.base import score

    meta = json.loads((shipped_model_path(name) / "ugrpo_tiny.json").read_text())
    pol = load_policy(f"tiny:{name}")
    problems = make_arithmetic(**TINY_TASK_OPTIONS).eval_problems()
    texts = _greedy(pol.model, pol.tokenizer, [p.prompt for p in problems])
    rewards = score(make_arithmetic(**TINY_TASK_OPTIONS), texts, problems).rewards
    assert len(problems) == 100 and sum(rewards) / len(rewards) == meta["greedy_accuracy"]
    assert meta["greedy_accuracy"] == meta["history"][-1]["greedy_accuracy"]


def test_an_incomplete_install_says_how_to_fix_it(tmp_path):
    (tmp_path / "instruct").mkdir()
    with pytest.raises(FileNotFoundError, match=r"lacks config.json.*reinstall ugrpo.*pretrain-tiny --out DIR"):
        shipped_model_path("instruct", root=tmp_path)
    with pytest.raises(ValueError, match="not a shipped tiny model"):
        shipped_model_path("random")


def test_compare_weights():
    same, diff = compare_weights(SHIPPED_ROOT / "instruct", "instruct")
    assert same and diff == 0.0
    same, diff = compare_weights(SHIPPED_ROOT / "base", "instruct")
    assert not same and 0 < diff < float("inf")


@pytest.fixture
def fast_pretrain(monkeypatch):
    """The real warm-up cut to 2 steps (the CLI's defaults otherwise)."""
    fast = functools.partial(pretrain_mod.pretrain_tiny, steps=2, batch_size=8, eval_every=2, eval_samples=1)
    monkeypatch.setattr(pretrain_mod, "pretrain_tiny", lambda out, **kw: fast(out, **{
        k: v for k, v in kw.items() if k not in ("steps", "batch_size", "eval_every")}))


def test_a_rebuild_says_it_differs_from_the_shipped_model_and_how_to_use_it(tmp_path, capsys, fast_pretrain):
    from ugrpo.cli import main

    assert main(["pretrain-tiny", "--out", str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out
    assert "differs from the shipped tiny:instruct" in out and "stopped at step 2" in out
    # the fixture's warm-up uses batches of 8: the message names that setting, not the CPU's float32 kernels
    assert "the recipe differs: batch_size 8 here, 128 in the shipped model" in out and "kernels" not in out
    assert f"tiny:instruct stays the shipped model; use this one with model.name: {tmp_path / 'mine'}" in out


def test_pretrain_tiny_all_rebuilds_into_a_folder_with_a_manifest_and_keeps_finished_models(tmp_path, capsys,
                                                                                          fast_pretrain):
    from ugrpo.cli import main

    root = tmp_path / "tiny"
    assert main(["pretrain-tiny", "--all", "--out", str(root)]) == 0
    cap = capsys.readouterr()
    assert check_shipped(root) == [] and f"wrote {root / MANIFEST}" in cap.out
    m = json.loads((root / MANIFEST).read_text())
    assert m["build"]["commands"] == [f"ugrpo pretrain-tiny --all --out {root}"]
    assert {n: e["recipe"]["steps"] for n, e in m["models"].items()} == dict.fromkeys(SHIPPED_NAMES, 2)
    before = (root / "base" / "model.safetensors").stat().st_mtime_ns
    assert main(["pretrain-tiny", "--all", "--out", str(root)]) == 0
    assert "tiny:base: already built" in capsys.readouterr().out
    assert (root / "base" / "model.safetensors").stat().st_mtime_ns == before


def test_removed_and_conflicting_flags_are_clear_errors(tmp_path, capsys):
    from ugrpo.cli import main

    assert main(["pretrain-tiny", "--cache", "--out", str(tmp_path)]) == 2
    assert "ship with ugrpo and are never built" in capsys.readouterr().err
    assert main(["pretrain-tiny", "--all", "--seed", "3", "--out", str(tmp_path)]) == 2
    assert "drop --seed" in capsys.readouterr().err


def test_shipped_model_is_float32_and_small():
    from safetensors.torch import load_file

    w = load_file(str(SHIPPED_ROOT / "instruct" / "model.safetensors"))
    assert {t.dtype for t in w.values()} == {torch.float32}
    total = sum((SHIPPED_ROOT / n / f).stat().st_size for n in SHIPPED_NAMES for f in MODEL_FILES)
    assert total < 16e6


def test_difference_cause_names_a_changed_setting_and_the_decay_only_past_its_start():
    shipped = json.loads((SHIPPED_ROOT / "base" / "ugrpo_tiny.json").read_text())  # stopped at 150, no decay fields
    rebuilt = {**shipped, "decay_start": 1000, "final_lr_fraction": 0.1}  # today's recipe, before the decay: the same
    assert difference_cause(rebuilt, shipped).startswith("same recipe")
    assert difference_cause({**rebuilt, "seed": 3}, shipped) == (
        "the recipe differs: seed 3 here, 0 in the shipped model")
    late = {**rebuilt, "steps": 1500}
    assert "decay_start 1000 here, None in the shipped model" in difference_cause(late, shipped)
    moved = {**rebuilt, "history": [dict(h) for h in shipped["history"]]}
    moved["history"][2]["loss"] += 1e-6
    assert f"first differs at step {shipped['history'][2]['step']}" in difference_cause(moved, shipped)
