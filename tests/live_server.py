"""The live server harness lives in devtools/live_server.py (bench/web_bench.py uses it too, and
bench/ must not import tests/). Tests import it from here; "tests.live_server:NAME" call strings
resolve through this module."""

from __future__ import annotations

from devtools.live_server import (  # noqa: F401  (re-exported)
    PASSWORD,
    ROOT,
    LiveServer,
    create_users,
    free_port,
    labeling_state,
    login_session,
    postgres_url,
    seed_labeling_project,
)
