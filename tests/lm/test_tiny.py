"""The tiny model factory, `tiny:` names and the locked cache of tiny:random (lm/tiny.py, lm/tiny_cache.py)."""

import ast
import json
import threading
import time
from pathlib import Path

import pytest
import torch

import ugrpo.lm.tiny_cache as tiny_cache
from ugrpo.lm.tiny import STRENGTHS, build_tiny_model
from ugrpo.lm.tiny_cache import CACHE_VERSION, tiny_model_path


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


def _fake_build(calls, delay=0.0, fail=False):
    def fake(out_dir):
        calls.append(out_dir.name)
        time.sleep(delay)
        (out_dir / "model.safetensors").write_bytes(b"x")
        if fail:
            raise RuntimeError("build failed half-way")
        (out_dir / "ugrpo_tiny.json").write_text("{}")
    return fake


def test_cache_builds_once_atomically_even_when_racing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(tiny_cache, "_build_random", _fake_build(calls, delay=0.5))
    results = []
    threads = [threading.Thread(target=lambda: results.append(tiny_model_path("random", cache_dir=tmp_path,
                                                                              log=lambda _: None)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = tmp_path / "tiny" / f"random-{CACHE_VERSION}"
    assert results == [expected] * 3 and len(calls) == 1
    assert (expected / "ugrpo_tiny.json").is_file()
    assert tiny_model_path("random", cache_dir=tmp_path) == expected and len(calls) == 1  # cached
    assert not list((tmp_path / "tiny").glob(".*tmp"))  # no temp folder left


def test_cache_env_variable_and_failed_build_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("UGRPO_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(tiny_cache, "_build_random", _fake_build(calls, fail=True))
    with pytest.raises(RuntimeError, match="half-way"):
        tiny_model_path("random", log=lambda _: None)
    assert not (tmp_path / "tiny" / f"random-{CACHE_VERSION}").exists()
    assert not list((tmp_path / "tiny").glob(".*tmp"))
    monkeypatch.setattr(tiny_cache, "_build_random", _fake_build(calls))
    assert tiny_model_path("random", log=lambda _: None) == tmp_path / "tiny" / f"random-{CACHE_VERSION}"


def test_unknown_strength():
    with pytest.raises(ValueError, match="choose one of random, base, instruct, fewshot"):
        tiny_model_path("strong")


def _imports(module: str) -> set[str]:
    """Every ``ugrpo.*`` module a module imports, at the top or inside a function."""
    import ugrpo

    path = Path(ugrpo.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("ugrpo.")}


def test_tiny_pretrain_cache_imports_run_one_way():
    """tiny <- pretrain <- tiny_cache: no cycle, and no PEP 562 shim that would hide one."""
    assert not _imports("ugrpo.lm.tiny") & {"ugrpo.lm.pretrain", "ugrpo.lm.tiny_cache"}
    assert "ugrpo.lm.tiny" in _imports("ugrpo.lm.pretrain")
    assert not any(m.startswith("ugrpo.lm.tiny_cache") for m in _imports("ugrpo.lm.pretrain"))
    import ugrpo.lm.tiny as tiny_mod

    assert not hasattr(tiny_mod, "__getattr__")


def test_build_says_what_where_and_how_long_and_removes_stale_temp_folders(tmp_path, monkeypatch):
    """A killed build's .tmp folder is removed by the next build; the build prints what it builds and where."""
    root = tmp_path / "tiny"
    stale = root / f".random-{CACHE_VERSION}.k1ll3d.tmp"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    other = root / f".other-{CACHE_VERSION}.x.tmp"  # not this name's build: not its to touch
    other.mkdir()
    calls, lines = [], []
    monkeypatch.setattr(tiny_cache, "_build_random", _fake_build(calls))
    path = tiny_model_path("random", cache_dir=tmp_path, log=lines.append)
    assert path == root / f"random-{CACHE_VERSION}" and len(calls) == 1
    assert not stale.exists() and other.exists() and not list(root.glob(".random-*.tmp"))
    text = "\n".join(lines)
    assert f"removed {stale}" in text
    assert "building tiny:random (random weights, no warm-up" in text
    assert f"into {path}" in text and "a few seconds" in text and "$UGRPO_CACHE (default ~/.cache/ugrpo)" in text
    assert lines[-1].startswith("built tiny:random in ")
    lines.clear()
    assert tiny_model_path("random", cache_dir=tmp_path, log=lines.append) == path and lines == []  # cached: silent


def test_build_message_goes_to_stderr_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tiny_cache, "_build_random", _fake_build([]))
    tiny_model_path("random", cache_dir=tmp_path)
    cap = capsys.readouterr()
    assert cap.out == "" and "building tiny:random" in cap.err


def test_random_model_builds_in_place_and_loads(tmp_path):
    """tiny:random (the smoke scale's model) is the seed-0 random init with the tiny task's options."""
    from ugrpo.lm.loading import load_policy

    path = tiny_model_path("random", cache_dir=tmp_path, log=lambda _: None)
    meta = json.loads((path / "ugrpo_tiny.json").read_text())
    assert meta["strength"] == "random" and meta["steps"] == 0 and meta["task_options"]["prompt_style"] == "compact"
    pol = load_policy(str(path))
    ref = build_tiny_model(pol.tokenizer, seed=0).state_dict()
    got = pol.model.state_dict()
    assert all(torch.equal(got[k], ref[k]) for k in ref)


def test_warm_names_resolve_to_the_shipped_folders_with_no_cache(tmp_path, monkeypatch):
    from ugrpo.lm.tiny_shipped import SHIPPED_ROOT

    monkeypatch.setenv("UGRPO_CACHE", str(tmp_path))
    for name in ("base", "instruct", "fewshot"):
        assert tiny_model_path(name) == SHIPPED_ROOT / name
    assert not (tmp_path / "tiny").exists()  # nothing written to the cache
