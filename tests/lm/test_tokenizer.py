import pytest
from transformers import AutoTokenizer

from ugrpo.lm.tokenizer import DEFAULT_CHARS, SPECIAL_TOKENS, build_char_tokenizer


def test_special_ids_and_padding_side(tokenizer):
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1,
                                                                                                                2, 3)
    assert tokenizer.padding_side == "left"
    assert len(tokenizer) == len(SPECIAL_TOKENS) + len(DEFAULT_CHARS)


@pytest.mark.parametrize("text", ["12+7-3=", "25-(10+5)=", "168/12=", "3*4=-96", " 7 = 7 "])
def test_bos_plus_one_id_per_character_and_decode_round_trip(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert ids[1:] == [len(SPECIAL_TOKENS) + DEFAULT_CHARS.index(c) for c in text]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(ids + [tokenizer.eos_token_id, tokenizer.pad_token_id], skip_special_tokens=True) == text
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids[1:]


def test_every_arithmetic_character_is_in_the_vocabulary(tokenizer):
    from ugrpo.tasks.arithmetic import ARITH_CHARS

    ids = tokenizer(ARITH_CHARS, add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids and len(ids) == len(ARITH_CHARS)


def test_unknown_character_maps_to_unk(tokenizer):
    assert tokenizer("1a", add_special_tokens=False)["input_ids"] == [tokenizer.convert_tokens_to_ids("1"),
                                                                      tokenizer.unk_token_id]


def test_batch_is_left_padded(tokenizer):
    enc = tokenizer(["1+2=", "12+37="], padding=True, return_tensors="pt")
    assert enc["input_ids"][0, :2].tolist() == [0, 0] and enc["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert enc["attention_mask"][1].tolist() == [1] * 7


def test_save_and_load_offline_round_trip(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "25-(10+5)=15"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)
    assert loaded.padding_side == "left"


def test_custom_chars_and_bad_chars():
    tok = build_char_tokenizer("01+=")
    assert len(tok) == 8 and tok.decode(tok("10+1=")["input_ids"], skip_special_tokens=True) == "10+1="
    with pytest.raises(ValueError, match="duplicate"):
        build_char_tokenizer("0123+-+")
    with pytest.raises(ValueError, match="empty"):
        build_char_tokenizer("")
    with pytest.raises(ValueError, match="newline"):
        build_char_tokenizer("12\n")
