"""Latency of the annotator's hot request — submit a label and get the next item (one htmx POST that
answers the next item's panel) — at 1, 10 and 50 concurrent annotators, against PostgreSQL and
gunicorn (gthread), printed as a markdown table.

    python bench/web_bench.py                                  # postgres://postgres@127.0.0.1:5432
    python bench/web_bench.py --think 2.0 --duration 30        # annotators pause between labels

Two load shapes: closed loop (`--think 0`: every annotator posts again the moment the answer arrives —
a stress test, latency is then mostly queueing for the CPUs) and paced (`--think S`: each annotator
reads for S seconds, exponentially distributed, like people do). Server and client share the machine."""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.live_server import LiveServer, login_session  # noqa: E402

ITEM = re.compile(r'<input type="hidden" name="item" value="(\d+)">')


def annotator_loop(
    session: object, url: str, labels: list[int], think: float, until: float, out: list[float], seed: int
) -> None:
    import requests

    assert isinstance(session, requests.Session)
    rng = random.Random(seed)
    headers = {"HX-Request": "true", "X-CSRFToken": str(session.cookies["csrftoken"]), "Referer": url}
    page = session.get(f"{url}/annotate/", timeout=60)
    match = ITEM.search(page.text)
    while match and time.perf_counter() < until:
        if think:
            time.sleep(rng.expovariate(1 / think))
        data = {"item": match.group(1), "label": rng.choice(labels), "queue": "batch"}
        started = time.perf_counter()
        response = session.post(f"{url}/annotate/label/", data, headers=headers, timeout=60)
        out.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text[:300]
        match = ITEM.search(response.text)


def run_level(live: LiveServer, project: dict, users: list[str], think: float, duration: float) -> dict:
    sessions = [login_session(live.url, u) for u in users]
    url = f"{live.url}/p/{project['project']}"
    labels = list(project["labels"].values())
    latencies: list[list[float]] = [[] for _ in users]
    until = time.perf_counter() + duration
    threads = [
        threading.Thread(target=annotator_loop, args=(s, url, labels, think, until, latencies[i], i))
        for i, s in enumerate(sessions)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    all_ms = sorted(x * 1000 for per in latencies for x in per)
    q = statistics.quantiles(all_ms, n=100) if len(all_ms) > 1 else all_ms * 99
    return {"n": len(all_ms), "p50": q[49], "p95": q[94], "p99": q[98], "rps": len(all_ms) / elapsed}


def vacuum_if_autovacuum_is_off(database_url: str) -> bool:
    """Stand in for autovacuum where the server has it off (this development box does; PostgreSQL's
    default is on): without it every row of the table leaves the next one dead lease and item
    versions to step over and no planner statistics, and the later rows measured that, not the app.
    Returns whether it vacuumed."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
        if row is None or row[0] == "on":
            return False
        conn.execute("VACUUM (ANALYZE)")
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/alann_bench")
    )
    parser.add_argument("--levels", default="1,10,50")
    parser.add_argument("--think", type=float, nargs="*", default=[0.0, 2.0], help="seconds; 0 = closed loop")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per level and think time")
    parser.add_argument("--workers", type=int, default=4)  # 2 cores: 2 processes per core hide I/O waits
    parser.add_argument("--threads", type=int, default=8)  # ... and threads hide the database round trips
    parser.add_argument("--pool", type=int, default=20000, help="pool items outside the batch")
    # 10,000: the six rows label about 4,000 items at today's speed; 3,000 ran dry in the third row.
    parser.add_argument("--batch", type=int, default=10000, help="items of the round being labelled")
    parser.add_argument("--no-vacuum", action="store_true", help="never VACUUM between rows")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    os.environ["DATABASE_URL"] = args.database_url  # LiveServer makes a dedicated alann_bench_<pid> on it
    live = LiveServer(kind="gunicorn", purpose="bench", workers=args.workers, threads=args.threads, debug=False)
    with live:
        users = [f"bench{i:02d}" for i in range(max(levels))]
        project = live.call(
            "devtools.live_server:seed_labeling_project",
            name="bench",
            n_items=args.batch,
            n_pool=args.pool,
            users=users,
        )
        rows = []
        vacuumed = False
        for think in args.think:
            for level in levels:
                if live.database_url and not args.no_vacuum:
                    vacuumed = vacuum_if_autovacuum_is_off(live.database_url) or vacuumed
                result = run_level(live, project, users[:level], think, args.duration)
                rows.append((think, level, result))
                print(f"think={think}s annotators={level}: {result}", file=sys.stderr, flush=True)
    print(
        f"\nsubmit label + next item (one htmx POST), gunicorn gthread {args.workers}x{args.threads}, "
        f"PostgreSQL, {os.cpu_count()} CPUs, {args.duration:.0f} s per row, "
        f"1-min load average at the end: {os.getloadavg()[0]:.1f}"
        f"{'; autovacuum off on the server: VACUUM ANALYZE before each row' if vacuumed else ''}\n"
    )
    print("| think time | annotators | requests | req/s | p50 ms | p95 ms | p99 ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for think, level, r in rows:
        shape = "none (closed loop)" if not think else f"{think:g} s"
        print(f"| {shape} | {level} | {r['n']} | {r['rps']:.0f} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} |")


if __name__ == "__main__":
    main()
