from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scoring.labels import MAX_LABELS, LabelCodeError, label_token_ids, suggest_codes


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_letter_codes_map_to_their_single_token(tokenizer: Any) -> None:
    ids = label_token_ids(tokenizer, ["A", "B", "C"], ["sports", "business", "world"])
    assert ids == [tokenizer.encode(c, add_special_tokens=False)[0] for c in "ABC"]
    assert len(set(ids)) == 3


def test_colliding_labels_are_named_and_codes_proposed(tokenizer: Any) -> None:
    with pytest.raises(LabelCodeError) as info:
        label_token_ids(tokenizer, ["A", "B", "A"], ["sports", "business", "science"])
    err = info.value
    assert err.collisions == [("sports", "science")]
    assert "'sports' and 'science'" in str(err)
    assert set(err.suggestions) == {"sports", "business", "science"}
    label_token_ids(tokenizer, list(err.suggestions.values()), list(err.suggestions))  # the proposal works


def test_multi_token_code_is_rejected(tokenizer: Any) -> None:
    code = "Xyzzyqwv"
    assert len(tokenizer.encode(code, add_special_tokens=False)) > 1
    with pytest.raises(LabelCodeError) as info:
        label_token_ids(tokenizer, ["A", code], ["one", "two"])
    assert info.value.multi_token == ["two"]


def test_codes_colliding_only_after_a_leading_space_are_rejected(tokenizer: Any) -> None:
    # A code with its own leading space ' A' is another token than 'A', but it is the spaced form of 'A'.
    with pytest.raises(LabelCodeError):
        label_token_ids(tokenizer, ["A", " A"], ["one", "two"])


def test_suggest_codes_covers_the_largest_label_set(tokenizer: Any) -> None:
    names = [f"label number {i}" for i in range(MAX_LABELS)]
    codes = suggest_codes(tokenizer, names)
    assert len(set(codes)) == MAX_LABELS
    assert len(set(label_token_ids(tokenizer, codes, names))) == MAX_LABELS
    with pytest.raises(LabelCodeError, match=f"between 1 and {MAX_LABELS}"):
        label_token_ids(tokenizer, codes + ["zz"], names + ["extra"])


def test_suggestions_prefer_words_of_the_name(tokenizer: Any) -> None:
    codes = suggest_codes(tokenizer, ["Sports", "Business", "Sci/Tech"])
    assert codes[0] == "Sports" and codes[1] == "Business"
