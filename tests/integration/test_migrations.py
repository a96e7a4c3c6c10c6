"""Upgrading a database made by the first release's schema: 0002 adds the hot path's columns and
marks batch rows of already-finished items done (the queue walk skips them by index)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_0002_backfills_done_for_finished_items() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("annotate", "0001_initial")])
    old = executor.loader.project_state([("annotate", "0001_initial")]).apps
    Project, Label, Item = (old.get_model("annotate", n) for n in ("Project", "Label", "Item"))
    Round, BatchItem = old.get_model("annotate", "Round"), old.get_model("annotate", "BatchItem")
    project = Project.objects.create(name="before the upgrade")
    yes = Label.objects.create(project=project, name="yes", code="A", order=0)
    items = [
        Item.objects.create(project=project, external_id=f"i{i}", text=f"t{i}", text_hash=f"h{i}") for i in range(3)
    ]
    Item.objects.filter(pk=items[0].pk).update(final_label=yes)
    Item.objects.filter(pk=items[1].pk).update(state="review")
    labeling = Round.objects.create(project=project, number=1, status="labeling")
    for rank, item in enumerate(items):
        BatchItem.objects.create(round=labeling, item=item, source="random", rank=rank)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    new = executor.loader.project_state(executor.loader.graph.leaf_nodes()).apps
    done = dict(new.get_model("annotate", "BatchItem").objects.values_list("item_id", "done"))
    assert done == {items[0].pk: True, items[1].pk: True, items[2].pk: False}
    assert new.get_model("annotate", "Project").objects.get(pk=project.pk).updated_at is not None


def test_0012_backfills_the_history_of_labels_skips_and_decisions() -> None:
    """Issue 32, problem 6: history starts with what the database already holds."""
    before = [("annotate", "0011_merge_pool_end_first_day")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Project, Label, Item = (old.get_model("annotate", n) for n in ("Project", "Label", "Item"))
    User = old.get_model("auth", "User")
    alice, lena = User.objects.create(username="alice"), User.objects.create(username="lena")
    project = Project.objects.create(name="before history")
    yes = Label.objects.create(project=project, name="yes", code="A", order=0)
    item = Item.objects.create(project=project, external_id="i0", text="t0", text_hash="h0")
    old.get_model("annotate", "Annotation").objects.create(item=item, annotator=alice, label=yes, revisions=2)
    old.get_model("annotate", "Skip").objects.create(item=item, annotator=lena, reason="unclear")
    old.get_model("annotate", "Adjudication").objects.create(item=item, label=yes, decided_by=lena, note="ok")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    new = executor.loader.project_state(executor.loader.graph.leaf_nodes()).apps
    events = new.get_model("annotate", "ItemEvent").objects.filter(item_id=item.pk).order_by("id")
    assert [(e.kind, e.actor_id, e.label_id, e.note) for e in events] == [
        ("label", alice.pk, yes.pk, ""),
        ("revision", alice.pk, yes.pk, "2 revision(s) before history was kept"),
        ("skip", lena.pk, None, "unclear"),
        ("decision", lena.pk, yes.pk, "ok"),
    ]
