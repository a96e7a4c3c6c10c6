"""30 annotators label 3,000 items at once through a real multi-process server (gunicorn, gthread):
no item is handed to or labelled by two annotators (overlap items: at most k, distinct), every
acknowledged submission is stored exactly once, none is lost and none is duplicated — double posts,
simultaneous double clicks and retries included.

Runs on SQLite (a temp file, IMMEDIATE transactions) in the normal suite and again on PostgreSQL
(SELECT ... FOR UPDATE SKIP LOCKED) with ``DATABASE_URL=postgres://... pytest -m postgres``."""

from __future__ import annotations

import functools
import random
import re
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.live_server import LiveServer, login_session

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

N_USERS = 30
LABELS_PER_USER = 100  # 3,000 labels in all
N_OVERLAP = 100  # batch items that need 2 distinct annotators
N_ITEMS = N_USERS * LABELS_PER_USER + 100  # a little slack: nobody runs dry near the end
SKIPS_PER_USER = 2
ITEM = re.compile(r'<input type="hidden" name="item" value="(\d+)">')
HTMX = {"HX-Request": "true"}


@dataclass
class Annotator:
    name: str
    session: requests.Session
    acked: dict[int, str] = field(default_factory=dict)  # item -> label the server acknowledged
    served: set[int] = field(default_factory=set)  # every item a response handed to this annotator
    skipped: set[int] = field(default_factory=set)
    refused: int = 0  # deliberate clashing resubmits answered 409


def shown_item(response: requests.Response, who: Annotator) -> int | None:
    assert response.status_code in (200, 409), f"{who.name}: HTTP {response.status_code}: {response.text[:300]}"
    match = ITEM.search(response.text)
    if match is None:
        return None
    item = int(match.group(1))
    who.served.add(item)
    return item


def work(who: Annotator, base: str, project: int, labels: dict[str, int], seed: int) -> None:
    """GET next → POST label, LABELS_PER_USER times, with every way a real client misbehaves."""
    rng = random.Random(seed)
    csrf = {"X-CSRFToken": str(who.session.cookies["csrftoken"]), "Referer": base + "/"}
    label_url, skip_url = f"{base}/p/{project}/annotate/label/", f"{base}/p/{project}/annotate/skip/"
    page_url = f"{base}/p/{project}/annotate/"
    item = shown_item(who.session.get(page_url, timeout=60), who)
    n = 0
    while len(who.acked) < LABELS_PER_USER:
        assert item is not None, f"{who.name} ran out of items after {len(who.acked)} labels"
        n += 1
        if len(who.skipped) < SKIPS_PER_USER and n % 37 == 0:
            who.skipped.add(item)
            skip = {"item": item, "queue": "batch", "reason": "unclear"}
            item = shown_item(who.session.post(skip_url, skip, headers={**csrf, **HTMX}, timeout=60), who)
            continue
        name = rng.choice(sorted(labels))
        data: dict[str, Any] = {"item": item, "label": labels[name], "queue": "batch"}
        mode = n % 10
        if mode == 3:  # no JavaScript: plain POST, 303 to the queue, GET the next item
            response = who.session.post(label_url, data, headers=csrf, allow_redirects=False, timeout=60)
            assert response.status_code == 303, response.text[:300]
            who.acked[item] = name
            item = shown_item(who.session.get(page_url, timeout=60), who)
            continue
        if mode == 5:  # double click: the same POST twice at the same moment
            post = functools.partial(
                requests.post,
                label_url,
                data,
                headers={**csrf, **HTMX},
                cookies={k: str(v) for k, v in who.session.cookies.get_dict().items()},
                timeout=60,
            )
            with ThreadPoolExecutor(2) as pool:
                twins = [f.result() for f in [pool.submit(post), pool.submit(post)]]
            assert [r.status_code for r in twins] == [200, 200]
            who.acked[item] = name
            items = {shown_item(r, who) for r in twins}
            assert len(items) == 1, f"one annotator, two next items at once: {items}"
            item = items.pop()
            continue
        response = who.session.post(label_url, data, headers={**csrf, **HTMX}, timeout=60)
        labelled, item = data["item"], shown_item(response, who)
        assert response.status_code == 200
        who.acked[labelled] = name
        if mode == 7:  # retry (response "lost"): same label again is a no-op; another label is refused
            again = who.session.post(label_url, data, headers={**csrf, **HTMX}, timeout=60)
            assert again.status_code == 200 and shown_item(again, who) == item
            other = {**data, "label": labels[next(n for n in sorted(labels) if n != name)]}
            clash = who.session.post(label_url, other, headers={**csrf, **HTMX}, timeout=60)
            assert clash.status_code == 409 and "press u to revise" in clash.text
            who.refused += 1


def test_concurrent_annotators_never_share_items_or_lose_labels() -> None:
    with LiveServer(kind="gunicorn", purpose="conc", workers=3, threads=8, debug=False) as live:
        users = [f"conc{i:02d}" for i in range(N_USERS)]
        seeded = live.call(
            "tests.live_server:seed_labeling_project", name="conc", n_items=N_ITEMS, n_overlap=N_OVERLAP, users=users
        )
        with ThreadPoolExecutor(N_USERS) as pool:  # log in concurrently too (password hashing is the slow part)
            sessions = list(pool.map(lambda u: login_session(live.url, u), users))
        annotators = [Annotator(u, s) for u, s in zip(users, sessions, strict=True)]
        errors: list[BaseException] = []

        def run(i: int, who: Annotator) -> None:
            try:
                work(who, live.url, seeded["project"], seeded["labels"], seed=i)
            except BaseException as exc:  # reported below, with the server log
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(annotators)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise AssertionError(f"{len(errors)} annotators failed; first: {errors[0]!r}\n{live.log_tail()}")
        state: dict[str, Any] = live.call("tests.live_server:labeling_state", project=seeded["project"])

    overlap = set(seeded["items"][:N_OVERLAP])
    rows = state["annotations"]
    stored = {(r["user"], r["item"]): r["label"] for r in rows}
    acked = {(a.name, item): label for a in annotators for item, label in a.acked.items()}
    assert len(acked) == N_USERS * LABELS_PER_USER == 3000
    assert len(rows) == len(stored), "an (annotator, item) pair stored twice"
    assert stored == acked, "a lost, extra or changed label"
    assert all(r["revisions"] == 0 for r in rows)
    assert sum(a.refused for a in annotators) > 0  # the clashing resubmits did happen, and were refused

    labellers: dict[int, set[str]] = defaultdict(set)
    for user, item in stored:
        labellers[item].add(user)
    assert all(len(labellers[i]) == 1 for i in labellers if i not in overlap), "a single item labelled twice"
    assert all(len(labellers[i]) <= 2 for i in overlap)
    assert any(len(labellers[i]) == 2 for i in overlap)

    # Handed out: a non-overlap item goes to one annotator, to a second only after the first skipped it.
    served: dict[int, set[str]] = defaultdict(set)
    for a in annotators:
        for item in a.served - a.skipped:
            served[item].add(a.name)
    assert all(len(served[i]) == 1 for i in served if i not in overlap), "an item handed to two annotators"
    assert all(len(served[i]) <= 2 for i in overlap)
    skipped = {(s["user"], s["item"]) for s in state["skips"]}
    assert skipped == {(a.name, i) for a in annotators for i in a.skipped}
    assert not skipped & set(stored), "a skip counted as a label"
    leased: dict[int, set[str]] = defaultdict(set)
    for item, user in state["leases"]:
        leased[item].add(user)
    assert all(len(users) == 1 for item, users in leased.items() if item not in overlap)
