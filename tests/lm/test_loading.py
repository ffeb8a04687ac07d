"""load_policy: local folders, offline hub ids, errors, LoRA; format_prompt."""

import pytest
import torch

from ugrpo.lm.loading import LoraSettings, format_prompt, load_policy
from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.sampling import sample_groups


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory, model, tokenizer):
    d = tmp_path_factory.mktemp("tiny_saved")
    model.save_pretrained(d, safe_serialization=True)
    tokenizer.save_pretrained(d)
    return d


def test_loads_a_local_folder_with_same_weights(saved_tiny, model, tokenizer):
    pol = load_policy(str(saved_tiny))
    assert pol.tokenizer.padding_side == "left" and pol.tokenizer.pad_token_id == tokenizer.pad_token_id
    # same tokenization (AutoTokenizer would pick Qwen2Tokenizer here and drop the spaces)
    for text in ["12 + 7=", "25-(10+5)="]:
        assert pol.tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert len(pol.tokenizer) == len(tokenizer)
    ids = torch.tensor([tokenizer("12+7=")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(pol.model(ids).logits, model(ids).logits)
    assert (saved_tiny / "model.safetensors").is_file()


@pytest.mark.parametrize("bars_on", [True, False])
def test_loading_shows_no_transformers_bar_and_keeps_the_callers_setting(saved_tiny, capfd, bars_on):
    """A library caller (``train``, ``load_policy``) with transformers' bars on sees no "Loading weights" bar;
    the caller's setting is the same afterwards."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if bars_on else hf_logging.disable_progress_bar)()
    try:
        capfd.readouterr()
        load_policy(str(saved_tiny))
        out, err = capfd.readouterr()
        assert "Loading weights" not in out + err and "it/s" not in out + err, err
        assert hf_logging.is_progress_bar_enabled() is bars_on
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()


def test_missing_local_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_policy(str(missing))
    with pytest.raises(FileNotFoundError, match="not a loadable model folder"):
        load_policy(str(tmp_path))  # exists, but no config.json


def test_hub_id_not_in_cache_says_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        load_policy("nobody/no-such-model-ugrpo")
    msg = str(err.value)
    # both readings of the name: a hub id to download, or a local folder (relative to the working directory) to fill
    assert "`hf download nobody/no-such-model-ugrpo`" in msg
    assert f"no {tmp_path / 'nobody' / 'no-such-model-ugrpo'}" in msg
    assert "--local-dir nobody/no-such-model-ugrpo" in msg


def test_bad_names_and_dtype():
    with pytest.raises(ValueError, match="unknown tiny model strength 'huge'"):
        load_policy("tiny:huge")
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny:instruct", dtype="float64")
    with pytest.raises(ValueError):
        load_policy("")


def test_pad_token_is_set_when_missing(saved_tiny, tmp_path):
    import json
    import shutil

    d = tmp_path / "nopad"
    shutil.copytree(saved_tiny, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("pad_token", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["padding"] = None  # a tokenizer that was used with padding=True stores its pad token here too
    (d / "tokenizer.json").write_text(json.dumps(tj))
    pol = load_policy(str(d))
    assert pol.tokenizer.pad_token_id == pol.tokenizer.eos_token_id


def test_lora_wraps_and_only_lora_params_train(saved_tiny, tokenizer):
    pol = load_policy(str(saved_tiny), lora=LoraSettings(r=4, alpha=8.0), seed=5)
    trainable = [n for n, p in pol.model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in pol.model.named_parameters() if not p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any(n.endswith("q_proj.lora_A.default.weight") for n in trainable)
    assert any(n.endswith("down_proj.lora_B.default.weight") for n in trainable)
    assert frozen and not any("lora_" in n for n in frozen)
    # seeded adapter init: same seed -> same adapter, another seed -> another
    again = load_policy(str(saved_tiny), lora=LoraSettings(r=4, alpha=8.0), seed=5)
    other = load_policy(str(saved_tiny), lora=LoraSettings(r=4, alpha=8.0), seed=6)
    a = dict(pol.model.named_parameters())
    b, c = dict(again.model.named_parameters()), dict(other.model.named_parameters())
    name = next(n for n in trainable if "lora_A" in n)
    assert torch.equal(a[name], b[name]) and not torch.equal(a[name], c[name])
    # the wrapped model samples and gives differentiable log-probs (LoRA B = 0: same as base)
    r = sample_groups(pol.model, pol.tokenizer, ["1+2="], 2, seeds=[0], max_new_tokens=4)
    lp = completion_logprobs(pol.model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    lp.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in pol.model.parameters() if p.requires_grad)


def test_lora_settings_validation():
    with pytest.raises(ValueError, match="r=0"):
        LoraSettings(r=0)
    with pytest.raises(ValueError, match="dropout"):
        LoraSettings(dropout=1.0)
    with pytest.raises(TypeError, match="tuple"):
        LoraSettings(target_modules="q_proj")


def test_lora_bad_target_is_a_clear_error(saved_tiny):
    with pytest.raises(ValueError, match="target_modules"):
        load_policy(str(saved_tiny), lora=LoraSettings(r=2, target_modules=("no_such_proj",)))


def test_format_prompt(tokenizer):
    assert format_prompt(tokenizer, "12+7=", chat=True) == "12+7="  # no template: unchanged
    assert format_prompt(tokenizer, "12+7=", chat=False) == "12+7="
    tok = __import__("copy").deepcopy(tokenizer)
    tok.chat_template = ("{% for m in messages %}U:{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}A:{% endif %}")
    assert format_prompt(tok, "12+7=", chat=True) == "U:12+7=A:"
    assert format_prompt(tok, "12+7=", chat=False) == "12+7="
