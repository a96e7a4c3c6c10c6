"""Settings for the test suite: the real settings with DEBUG on (no SECRET_KEY needed) and a
per-run VAR_DIR, so tests never touch the demo's database, adapters or caches."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="alann-test-var-"))
os.environ.setdefault("MODELS_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "models"))

from config.settings import *  # noqa: E402,F403
