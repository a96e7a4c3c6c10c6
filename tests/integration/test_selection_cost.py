"""What makes a large round's selection cheaper (bench/select_round_cost.py) keeps what it selects and
writes: the predictions upsert writes, and on a rerun updates, exactly the rows the ORM's bulk_create
upsert wrote; a proxy fitted once is the proxy a new fit gives; the items' texts are read once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from annotate.models import Item, Prediction, Project, Round
from annotate.selectors import loop as loop_sel
from annotate.services import proxy, selection
from annotate.services.projects import LabelInput, project_create
from predictor.embedding_proxy import fit_proxy

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

VALUES = ("item_id", "round_id", "prompt_hash", "adapter_set_hash", "model_version", "label_id", "probs", "mass")


@pytest.fixture
def project() -> Project:
    project = project_create(
        name="sel-cost", labels=[LabelInput(n, c) for n, c in (("a", "A"), ("b", "B"), ("c", "C"))]
    )
    Item.objects.bulk_create(Item(project=project, external_id=f"e{i}", text=f"text {i}") for i in range(7))
    return project


def _orm_upsert(*, round: Round, item_ids: np.ndarray, probs: np.ndarray, mass_mean: np.ndarray, **kw: Any) -> None:
    """The ORM path the upsert replaced (bulk_create with update_conflicts): the reference."""
    label_ids = list(loop_sel.label_index(project=round.project))
    top = np.argmax(probs, axis=1)
    values = np.round(np.asarray(probs, dtype=np.float64), 5).tolist()
    unc = kw["uncertainty"]
    Prediction.objects.bulk_create(
        [
            Prediction(
                item_id=int(item_id),
                round=round,
                prompt_hash=kw["prompt_hash"],
                adapter_set_hash=kw["adapter_set_hash"],
                model_version=kw["model_version"],
                label_id=label_ids[int(top[i])],
                probs=values[i],
                mass=float(mass_mean[i]),
                uncertainty=None if unc is None else float(unc[i]),
            )
            for i, item_id in enumerate(item_ids)
        ],
        update_conflicts=True,
        unique_fields=["item", "prompt_hash", "adapter_set_hash"],
        update_fields=["round", "model_version", "label", "probs", "mass", "uncertainty"],
    )


def _two_upserts(project: Project, upsert: Any) -> list[tuple[Any, ...]]:
    """Predictions of 5 items, then a rerun over 4 of them (2 new) by a later round with other scores and
    no uncertainty; the rows as values, created_at aside (a clock reading)."""
    Prediction.objects.all().delete()
    ids = np.array(sorted(Item.objects.filter(project=project).values_list("id", flat=True)), dtype=np.int64)
    first, second = (Round.objects.get_or_create(project=project, number=n, defaults={"seed": n})[0] for n in (1, 2))
    rng = np.random.default_rng(3)
    for row, rows, unc in ((first, ids[:5], rng.uniform(0, 1, 5)), (second, ids[3:], None)):
        upsert(
            round=row,
            item_ids=rows,
            probs=rng.dirichlet(np.full(3, 0.5), size=len(rows)).astype(np.float32),
            mass_mean=rng.uniform(0, 1, len(rows)).astype(np.float32),
            uncertainty=unc,
            prompt_hash="p",
            adapter_set_hash="a",
            model_version=f"v{row.number}",
        )
    return list(Prediction.objects.order_by("item_id").values_list(*VALUES, "uncertainty"))


def test_the_predictions_upsert_writes_and_updates_the_rows_the_orm_upsert_wrote(project: Project) -> None:
    fast = _two_upserts(project, selection.predictions_upsert)
    assert not Prediction.objects.filter(created_at__isnull=True).exists()
    assert fast == _two_upserts(project, _orm_upsert)
    assert len(fast) == 7 and [r[4] for r in fast] == ["v1"] * 3 + ["v2"] * 4
    assert [r[-1] is None for r in fast] == [False] * 3 + [True] * 4  # the rerun's rows lost their uncertainty


def test_a_proxy_is_fitted_once_for_the_same_rows_and_is_the_proxy_a_new_fit_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import predictor.embedding_proxy

    rng = np.random.default_rng(0)
    emb, y = rng.normal(size=(40, 8)).astype(np.float32), np.arange(40) % 4
    fits: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        fits.append(1)
        return fit_proxy(*args, **kwargs)

    monkeypatch.setattr(predictor.embedding_proxy, "fit_proxy", counted)
    monkeypatch.setattr(proxy, "_FITTED", {})
    first = proxy.proxy_probabilities(emb, y.tolist(), emb[:5], 4)
    again = proxy.proxy_probabilities(emb.copy(), list(y), emb[:5], 4)
    assert len(fits) == 1 and np.array_equal(first, again)
    assert np.array_equal(first, fit_proxy(emb, y, 4).predict_proba(emb[:5]))  # what the unkept fit gives
    proxy.proxy_probabilities(emb, ((y + 1) % 4).tolist(), emb[:5], 4)  # other labels: another fit
    assert len(fits) == 2
    for n in range(proxy.FITTED_KEPT + 1):  # the oldest fit goes first
        proxy.fitted_proxy(emb[n:], y[n:], 4)
    assert len(proxy._FITTED) == proxy.FITTED_KEPT


def test_one_selection_reads_an_items_text_once(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[list[int]] = []
    real = selection.item_texts

    def counted(ids: list[int]) -> dict[int, tuple[str, str]]:
        reads.append(list(ids))
        return real(ids)

    monkeypatch.setattr(selection, "item_texts", counted)
    ids = np.array(sorted(Item.objects.filter(project=project).values_list("id", flat=True)), dtype=np.int64)
    known: dict[int, tuple[str, str]] = {}
    texts, hashes = selection._texts(ids, known)
    assert selection._texts(ids[::2], known) == (texts[::2], hashes[::2])
    assert reads == [ids.tolist()] and texts == [f"text {i}" for i in range(7)]
    assert selection._texts(ids[2:4]) == (texts[2:4], hashes[2:4]) and len(reads) == 2  # no map: read afresh
