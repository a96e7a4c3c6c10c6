"""Settings for the test suite: the real settings with DEBUG on (no SECRET_KEY needed) and a
per-run VAR_DIR, so tests never touch the demo's database, adapters or caches."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="alann-test-var-"))
os.environ.setdefault("MODELS_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "models"))

from config.settings import *  # noqa: E402,F403

# In-process tests count progress synchronously (a background thread would race the test's own
# transaction); tests/integration/test_progress_counts.py turns it on, and the live-server tests run
# the real settings, where it is on.
PROGRESS_RECOUNT_IN_BACKGROUND = False
