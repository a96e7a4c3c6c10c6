"""scoring/batch_manifest.py: a results line's logprobs become the answer's distribution over the labels
(top logprobs normalised over the codes, with the label mass; the answered code's probability alone
spreads the rest evenly; no logprobs, no distribution), and a malformed logprob refuses the file."""

from __future__ import annotations

import json
import math

import pytest

from scoring.batch_manifest import ManifestError, parse_results, prompt_version
from scoring.prompts import LabelSpec, PromptSpec

SPEC = PromptSpec(
    "Classify.", (LabelSpec("a", "", "A"), LabelSpec("b", "", "B"), LabelSpec("c", "", "C")), (), "{text}"
)


def line(item_id: int, **fields: object) -> str:
    return json.dumps({"custom_id": f"{prompt_version(SPEC)}:{item_id}", **fields})


def chat(item_id: int, code: str, logprobs: object) -> str:
    choice = {"message": {"content": code}, "logprobs": logprobs}
    return line(item_id, response={"body": {"choices": [choice]}})


def test_top_logprobs_become_a_distribution_over_the_labels_with_its_mass() -> None:
    top = [{"token": "B", "logprob": math.log(0.6)}, {"token": " A", "logprob": math.log(0.2)}]
    top.append({"token": "Hello", "logprob": math.log(0.1)})  # not a label: outside the mass
    (answer,) = parse_results(
        [chat(7, "B", {"content": [{"token": "B", "logprob": math.log(0.6), "top_logprobs": top}]})], SPEC
    )
    assert answer.item_id == 7 and answer.label_index == 1
    assert answer.probs == pytest.approx((0.25, 0.75, 0.0)) and answer.mass == pytest.approx(0.8)
    (plain,) = parse_results([line(8, label="C", logprobs={"C": math.log(0.9), "A": math.log(0.1)})], SPEC)
    assert plain.probs == pytest.approx((0.1, 0.0, 0.9)) and plain.mass == pytest.approx(1.0)


def test_the_answered_codes_probability_alone_spreads_the_rest_and_no_logprobs_means_no_distribution() -> None:
    only, bare = parse_results([line(1, label="A", logprob=math.log(0.8)), line(2, label="B")], SPEC)
    assert only.probs == pytest.approx((0.8, 0.1, 0.1)) and only.mass is None
    assert bare.probs == () and bare.mass is None and bare.label_index == 1
    (no_lp,) = parse_results([chat(3, "C", None)], SPEC)
    assert no_lp.probs == () and no_lp.label_index == 2


@pytest.mark.parametrize("bad", [0.5, "x", float("nan")])
def test_a_logprob_that_is_not_one_refuses_the_file(bad: object) -> None:
    with pytest.raises(ManifestError, match="logprob"):
        parse_results([line(1, label="A", logprob=math.log(0.5)), line(2, label="A", logprobs={"A": bad})], SPEC)
