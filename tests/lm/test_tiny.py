"""The tiny model factory and the atomic, locked cache of warm models."""

import threading
import time

import pytest
import torch

import ugrpo.lm.pretrain as pretrain_mod
from ugrpo.lm.tiny import CACHE_VERSION, STRENGTHS, build_tiny_model, tiny_model_path


@pytest.mark.parametrize("size,lo,hi", [("1m", 0.9e6, 1.2e6), ("4m", 3.8e6, 4.6e6)])
def test_param_count_in_range(tokenizer, size, lo, hi):
    m = build_tiny_model(tokenizer, size=size, seed=0)
    n = sum(p.numel() for p in m.parameters())
    assert lo <= n <= hi, n
    c = m.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.tie_word_embeddings) == (4, 4, 4, True)
    assert c.vocab_size == len(tokenizer)
    assert c.eos_token_id == tokenizer.eos_token_id and c.pad_token_id == tokenizer.pad_token_id


def test_seeded_and_leaves_global_rng_alone(tokenizer):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(tokenizer, seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after)  # global RNG untouched
    b, c = build_tiny_model(tokenizer, seed=7), build_tiny_model(tokenizer, seed=8)
    w = "model.layers.0.self_attn.q_proj.weight"
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert torch.equal(sa[w], sb[w]) and not torch.equal(sa[w], sc[w])


def test_bad_size(tokenizer):
    with pytest.raises(ValueError, match="size='8m'"):
        build_tiny_model(tokenizer, size="8m")


def test_strength_targets_increase():
    assert list(STRENGTHS) == ["base", "instruct", "fewshot"]
    assert 0 < STRENGTHS["base"] < STRENGTHS["instruct"] < STRENGTHS["fewshot"] < 1
    assert 0.2 <= STRENGTHS["instruct"] <= 0.6  # leaves RL room to improve


def _fake_pretrain(calls, delay=0.0, fail=False):
    def fake(out_dir, *, strength, seed, progress):
        calls.append(strength)
        time.sleep(delay)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "model.safetensors").write_bytes(b"x")
        if fail:
            raise RuntimeError("build failed half-way")
        (out_dir / "ugrpo_tiny.json").write_text("{}")
    return fake


def test_cache_builds_once_atomically_even_when_racing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(pretrain_mod, "pretrain_tiny", _fake_pretrain(calls, delay=0.5))
    results = []
    threads = [threading.Thread(target=lambda: results.append(tiny_model_path("base",
                                                                              cache_dir=tmp_path))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = tmp_path / "tiny" / f"base-{CACHE_VERSION}"
    assert results == [expected] * 3 and calls == ["base"]
    assert (expected / "ugrpo_tiny.json").is_file()
    assert tiny_model_path("base", cache_dir=tmp_path) == expected and calls == ["base"]  # cached
    assert not list((tmp_path / "tiny").glob(".*tmp"))  # no temp folder left


def test_cache_env_variable_and_failed_build_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("UGRPO_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(pretrain_mod, "pretrain_tiny", _fake_pretrain(calls, fail=True))
    with pytest.raises(RuntimeError, match="half-way"):
        tiny_model_path("instruct")
    assert not (tmp_path / "tiny" / f"instruct-{CACHE_VERSION}").exists()
    assert not list((tmp_path / "tiny").glob(".*tmp"))
    monkeypatch.setattr(pretrain_mod, "pretrain_tiny", _fake_pretrain(calls))
    assert tiny_model_path("instruct") == tmp_path / "tiny" / f"instruct-{CACHE_VERSION}"


def test_unknown_strength():
    with pytest.raises(ValueError, match="choose one of base, instruct, fewshot"):
        tiny_model_path("strong")
