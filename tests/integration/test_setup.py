"""Project setup by ML staff: label codes are checked against the real tokenizer (colliding labels are
named and working codes pre-filled), ranges are validated, few-shot examples freeze with the first round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from annotate.forms_setup import parse_few_shot, parse_label_lines
from annotate.models import Annotation, Project, Round
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ml(smollm2_dir: Path, settings: Any) -> Client:
    settings.LLM_DIR = smollm2_dir
    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    return client


def form_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "news topics",
        "labels_text": "Sports | games and athletes | Sports\nPolitics | elections, government | P",
        "few_shot_text": "The match ended 2-1 | Sports",
        "guidelines": "Pick the **main** topic.",
        "instructions": "Classify the news text into exactly one topic.",
        "model_dir": "",
        "engine": "hf",
        "seed": 0,
        "batch_size": 50,
        "oversample": 4,
        "random_share": 0.15,
        "mass_threshold": 0.05,
        "uncertainty": "margin",
        "cold_start_batches": 2,
        "ensemble_k": 4,
        "overlap_share": 0.1,
        "overlap_annotators": 2,
        "test_set_size": 200,
        "lease_seconds": 600,
    }
    data.update(overrides)
    return data


def test_label_and_few_shot_lines_report_the_offending_line() -> None:
    labels = parse_label_lines("A | first\n\nB | second | b\n")
    assert [(lab.name, lab.description, lab.code) for lab in labels] == [("A", "first", ""), ("B", "second", "b")]
    with pytest.raises(ValidationError) as exc:
        parse_label_lines("A\n | no name\nA | again\nC | x | y | z")
    assert exc.value.messages == [
        "line 2: the label name is empty",
        "line 3: the label 'A' appears twice",
        "line 4: expected `name | description | code`, found 3 '|'",
    ]
    assert parse_few_shot("a | b | A", ["A", "B"]) == [{"text": "a | b", "label": "A"}]
    with pytest.raises(ValidationError, match="line 1: unknown label 'Sprots'"):
        parse_few_shot("goal! | Sprots", ["Sports"])


def test_ml_creates_a_project_and_empty_codes_get_working_suggestions(ml: Client) -> None:
    data = form_data(labels_text="Sports | games\nScience | research\nSociety | people")
    response = ml.post(reverse("setup_new"), data)
    assert response.status_code == 302, response.context["form"].errors
    project = Project.objects.get(name="news topics")
    codes = list(project.labels.values_list("code", flat=True))
    assert len(set(codes)) == 3 and all(codes)
    assert project.few_shot == [{"text": "The match ended 2-1", "label": "Sports"}]
    assert (project.batch_size, project.ensemble_k, project.overlap_share) == (50, 4, 0.1)
    assert response["Location"] == reverse("import_upload", args=[project.pk])  # the next step: upload the texts


def test_codes_that_differ_only_by_case_are_flagged(ml: Client) -> None:
    data = form_data(labels_text="Politics | | P\nPeople | | p", few_shot_text="")
    response = ml.post(reverse("setup_new"), data, follow=True)
    page = response.content.decode()
    assert Project.objects.filter(name="news topics").exists()  # valid tokens: saved, with a warning
    assert "The codes “P” (Politics) and “p” (People) differ only by case" in page


def test_new_project_form_defaults_to_a_round_that_finishes_by_itself(ml: Client) -> None:
    page = ml.get(reverse("setup_new")).content.decode()
    assert 'name="auto_retrain_share" value="1.0"' in page
    assert "Start training when this share of the batch is done" in page
    for words in ("Candidates per batch item", "Review threshold (label mass)", "Models in the ensemble",
                  "Time an annotator holds an item (seconds)", "BALD: disagreement between the ensemble"):  # fmt: skip
        assert words in page  # human words and help text, not internal names


def test_a_new_project_on_a_cpu_starts_with_the_quick_defaults(ml: Client, settings: Any) -> None:
    """Issue 32, problem 5: new projects defaulted to K=4, batch 50 and two cold-start batches, and scored
    the whole pool, which on a CPU made a round take minutes. Under the CPU profile (the default) the
    setup page starts from one adapter, batches of 20, one cold-start round and 300 scored candidates;
    under the GPU profile from the model's defaults."""
    settings.LOOP_OPTIONS = {}
    page = ml.get(reverse("setup_new")).content.decode()
    for name, value in (("ensemble_k", 1), ("batch_size", 20), ("cold_start_batches", 1)):
        assert f'name="{name}" value="{value}"' in page, name
    quick = {"ensemble_k": 1, "batch_size": 20, "cold_start_batches": 1}
    assert ml.post(reverse("setup_new"), form_data(**quick)).status_code == 302
    project = Project.objects.get(name="news topics")
    assert (project.ensemble_k, project.batch_size, project.cold_start_batches) == (1, 20, 1)
    assert project.candidate_sample == 300

    settings.LOOP_OPTIONS = {"profile": "gpu"}
    page = ml.get(reverse("setup_new")).content.decode()
    assert 'name="ensemble_k" value="4"' in page and 'name="batch_size" value="50"' in page
    assert ml.post(reverse("setup_new"), form_data(name="on a gpu")).status_code == 302
    assert Project.objects.get(name="on a gpu").candidate_sample == Project().candidate_sample


def test_colliding_codes_name_the_labels_and_prefill_codes_that_work(ml: Client) -> None:
    data = form_data(labels_text="Sports | games | S\nScience | research | S\nPolitics | votes | P")
    response = ml.post(reverse("setup_new"), data)
    page = response.content.decode()
    assert response.status_code == 400 and not Project.objects.exists()
    assert "“Sports” and “Science” share a first token" in page
    assert 'id="suggested-codes"' in page
    form = response.context["form"]
    suggested = form.suggested_codes
    assert set(suggested) == {"Sports", "Science", "Politics"} and suggested["Sports"] != suggested["Science"]
    prefilled = form["labels_text"].value()
    assert f"Sports | games | {suggested['Sports']}" in prefilled
    assert f"Science | research | {suggested['Science']}" in prefilled
    # Accepting the pre-filled suggestions creates the project with those codes.
    assert ml.post(reverse("setup_new"), form_data(labels_text=prefilled)).status_code == 302
    project = Project.objects.get()
    assert dict(project.labels.values_list("name", "code")) == suggested


def test_multi_token_code_is_named(ml: Client) -> None:
    data = form_data(labels_text="Sports | | xqzvbnmqx\nPolitics | | P")
    page = ml.post(reverse("setup_new"), data).content.decode()
    assert "the code of “Sports” is not a single token" in page


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_size", 0, "batch size B must be at least 1; got 0"),
        ("oversample", 0.5, "oversample factor M/B must be at least 1"),
        ("random_share", 1.5, "random-slice share must be between 0 and 1; got 1.5"),
        ("mass_threshold", -0.1, "label-mass threshold must be between 0 and 1"),
        ("ensemble_k", 0, "ensemble size K must be between 1 and 32; got 0"),
        ("overlap_share", 2, "overlap share must be between 0 and 1; got 2.0"),
        ("overlap_annotators", 1, "annotators per overlapped item must be between 2 and 20; got 1"),
        ("test_set_size", 0, "test-set size must be at least 1"),
        ("lease_seconds", 5, "lease must be between 30 seconds and one day; got 5"),
    ],
)
def test_out_of_range_settings_are_refused_with_a_precise_message(
    ml: Client, field: str, value: Any, message: str
) -> None:
    response = ml.post(reverse("setup_new"), form_data(**{field: value}))
    assert response.status_code == 400
    assert message in response.context["form"].errors[field][0]
    assert not Project.objects.exists()


def test_unknown_few_shot_label_is_a_form_error(ml: Client) -> None:
    response = ml.post(reverse("setup_new"), form_data(few_shot_text="Parliament votes today | Politcs"))
    assert response.status_code == 400
    assert "unknown label &#x27;Politcs&#x27;" in response.content.decode()


def test_guidelines_preview_is_sanitised_markdown(ml: Client) -> None:
    data = form_data(guidelines="**Main** topic <script>alert(1)</script> [x](javascript:alert(1))", batch_size=0)
    page = ml.post(reverse("setup_new"), data).content.decode()
    preview = page.split('class="preview">', 1)[1].split("</div>", 1)[0]
    assert "<strong>Main</strong>" in preview and "<script" not in preview and "javascript:" not in preview


def _existing(name: str = "news topics") -> Project:
    labels = [LabelInput("Sports", "Sports", "games"), LabelInput("Politics", "P", "elections")]
    return project_create(name=name, labels=labels, few_shot=[{"text": "The match ended 2-1", "label": "Sports"}])


def test_editing_labels_before_the_first_round(ml: Client) -> None:
    project = _existing()
    url = reverse("project_setup", args=[project.pk])
    assert "Sports | games | Sports" in ml.get(url).content.decode()
    labels = "Politics | government | P\nSports | games and athletes | Sports\nScience | research |"
    response = ml.post(url, form_data(labels_text=labels))
    assert response.status_code == 302, response.context["form"].errors
    rows = list(project.labels.order_by("order").values_list("name", "description"))
    assert rows == [("Politics", "government"), ("Sports", "games and athletes"), ("Science", "research")]


def test_few_shot_and_label_codes_freeze_once_a_round_exists(ml: Client) -> None:
    project = _existing()
    Round.objects.create(project=project, number=1)
    url = reverse("project_setup", args=[project.pk])
    response = ml.post(url, form_data(few_shot_text="Polls open at nine | Politics"))
    assert response.status_code == 400
    error = response.context["form"].errors["few_shot_text"][0]
    assert "Few-shot examples are frozen" in error and "prompt hash" in error
    labels = "Sports | games | S\nPolitics | elections | P"
    response = ml.post(url, form_data(labels_text=labels))
    assert "Label names and codes are frozen" in response.context["form"].errors["labels_text"][0]
    # Descriptions and knobs may still change.
    labels = "Sports | ball games | Sports\nPolitics | elections | P"
    response = ml.post(url, form_data(labels_text=labels, batch_size=20))
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.batch_size == 20 and project.labels.get(name="Sports").description == "ball games"


def test_a_label_in_use_cannot_be_removed(ml: Client) -> None:
    project = _existing()
    it = project.items.create(external_id="1", text="goal", text_hash="h")
    annotator = user_create(username="ann", password="pw-12345678", roles=["annotator"])
    Annotation.objects.create(item=it, annotator=annotator, label=project.labels.get(name="Sports"))
    response = ml.post(
        reverse("project_setup", args=[project.pk]),
        form_data(labels_text="Politics | | P\nScience | |", few_shot_text=""),
    )
    assert response.status_code == 400
    assert "label 'Sports' is in use" in response.context["form"].non_field_errors()[0]
    assert project.labels.filter(name="Sports").exists()


# ---- ML page: rounds, polling, learning curve, test set --------------------------------------------


def test_ml_page_requests_a_round_and_polls_only_while_one_is_active(ml: Client) -> None:
    project = _existing()
    home, rounds = reverse("ml_home", args=[project.pk]), reverse("ml_rounds", args=[project.pk])
    page = ml.get(home).content.decode()
    assert 'id="learning-curve"' in page and "No rounds evaluated yet" in page
    assert 'hx-trigger="every 2s"' not in page
    assert ml.get(rounds, headers={"HX-Request": "true"}).status_code == 286  # nothing active: stop polling
    response = ml.post(reverse("ml_round_start", args=[project.pk]), headers={"HX-Request": "true"})
    new = Round.objects.get(project=project)
    assert new.requested_by is not None
    assert (new.number, new.status, new.requested_by.username) == (1, "pending", "mia")
    assert "Round 1 requested." in response.content.decode() and 'hx-trigger="every 2s"' in response.content.decode()
    assert ml.get(rounds, headers={"HX-Request": "true"}).status_code == 200  # keeps polling
    again = ml.post(reverse("ml_round_start", args=[project.pk]), headers={"HX-Request": "true"})
    assert "round 1 is still pending" in again.content.decode() and Round.objects.count() == 1
    svg = "<svg xmlns='http://www.w3.org/2000/svg'/>"
    Round.objects.filter(pk=new.pk).update(status="done", metrics={"curve_svg": svg, "accuracy": 0.75, "test_n": 40})
    final = ml.get(rounds, headers={"HX-Request": "true"})
    body = final.content.decode()
    assert final.status_code == 286 and "Test accuracy: <strong>75.0 %</strong>" in body
    assert 'src="data:image/svg+xml;base64,' in body  # the polled answer carries the new curve: no reload
    assert 'src="data:image/svg+xml;base64,' in ml.get(home).content.decode()


def test_retrain_without_a_round_says_why(ml: Client) -> None:
    project = _existing()
    response = ml.post(reverse("ml_round_retrain", args=[project.pk]))
    assert response.status_code == 302
    page = ml.get(response["Location"]).content.decode()
    assert "there is no round to retrain yet" in page


def test_ml_page_shows_test_set_size_and_gold_labels(ml: Client) -> None:
    project = _existing()
    sports = project.labels.get(name="Sports")
    for i in range(4):
        project.items.create(
            external_id=str(i),
            text=f"t{i}",
            text_hash=str(i),
            is_test=True,
            gold_label=sports if i < 2 else None,
            final_label=sports if i < 3 else None,  # the third: agreed by annotators, no gold label
        )
    project.items.create(external_id="pool", text="p", text_hash="p")
    page = ml.get(reverse("ml_home", args=[project.pk])).content.decode()
    assert "3 of 4 test items have a final label (75 %)" in page  # what evaluation measures on


def test_the_cold_start_mode_is_a_project_setting(ml: Client) -> None:
    page = ml.get(reverse("setup_new")).content.decode()
    assert "How cold-start rounds pick" in page and "safer when they do not (sentiment, question type)" in page
    response = ml.post(reverse("setup_new"), form_data(cold_mode="sometimes"))
    assert response.status_code == 400 and "cold_mode" in response.context["form"].errors
    assert not Project.objects.exists()
    response = ml.post(reverse("setup_new"), form_data(cold_mode="random"))
    assert response.status_code == 302, response.context["form"].errors
    assert Project.objects.get(name="news topics").cold_mode == "random"
