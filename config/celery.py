"""The Celery app. Queues: ``default`` (planning, selection, embeddings, bookkeeping), ``io`` (imports,
a finished round's export snapshot and notifications: they never wait behind a round's steps, issue 32
problem 4) and ``gpu`` (scoring and training; one worker per GPU, or two per GPU for the hf engine with
the loop option ``n_shards: 2``: a round's members and score shards are separate tasks). Downloads stream
from the web process. The workers' command lines are config/processes.py's."""

from __future__ import annotations

import os

from celery import Celery, bootsteps
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("alann")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("default"), Queue("io"), Queue("gpu"))
app.conf.task_default_queue = "default"
# An upload made while a round trains must not sit behind it: imports have their own queue, read by the
# io-worker and by the plain worker (so a one-worker install still imports).
# A finished round's export snapshot and notifications go there too: they never wait behind a round.
IO_TASKS = ("annotate.import_run", "annotate.round_finished", "annotate.notify_deliver")
app.conf.task_routes = {"annotate.gpu.*": {"queue": "gpu"}, **{name: {"queue": "io"} for name in IO_TASKS}}
# A GPU task holds an engine for minutes: take one message at a time and acknowledge it only when
# done, so a killed worker's task is redelivered instead of lost (every task is idempotent).
app.conf.worker_prefetch_multiplier = 1
app.conf.task_acks_late = True
app.conf.task_reject_on_worker_lost = True
app.conf.broker_transport_options = {"visibility_timeout": 3600}
app.conf.broker_connection_retry_on_startup = True
app.conf.task_serializer = "json"
app.conf.result_serializer = "json"
app.conf.accept_content = ["json"]
app.conf.result_expires = 3600
# Every worker also consumes its own queue (<node>.dq2), so that a task can go to one worker: a gpu
# worker's engine prewarm (annotate/tasks.py) must run in that worker, not in whichever takes it first.
app.conf.worker_direct = True


# Every worker sweeps this often (seconds; 0: never): the job engine's resume again, so that a unit whose
# worker died is taken up by a worker that stays up, not only when some worker starts or reconnects.
JOBS_SWEEP_S = float(os.environ.get("ALANN_JOBS_SWEEP_S", "120"))


def _send_resume(hostname: str, connected: str) -> None:
    from celery.utils import worker_direct

    app.send_task("annotate.jobs_resume", args=[connected], queue=worker_direct(hostname))


class ResumeOnConnect(bootsteps.StartStopStep):
    """Started each time a worker's consumer (re)connects to the broker: the job engine's resume
    (``annotate.jobs_resume``, annotate/services/jobs.py), sent by name to this worker's own queue
    (``worker_direct``: it runs in the process that connected, whatever queues it reads). Celery's
    ``worker_ready`` fires at the first connection only, so a broker restarted under running workers
    (the compose file's Redis keeps nothing) would leave every queued unit waiting forever.

    Then every ``JOBS_SWEEP_S`` the same resume again (the consumer's timer, in the worker's main process),
    with the same connection time: a unit held by a process that died since (a worker whose container is
    gone and never comes back, a child the OOM killer took) is sent again by whichever worker sweeps next;
    a queued unit whose message went out after this worker connected is left alone (its message may still
    be waiting in a queue), so a long queue gets no duplicates."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent: object, **kwargs: object) -> None:
        super().__init__(parent, **kwargs)
        self.sweep: object | None = None

    def start(self, c: object) -> None:
        from datetime import UTC, datetime

        hostname = str(c.hostname)  # type: ignore[attr-defined]
        connected = datetime.now(UTC).isoformat()
        _send_resume(hostname, connected)
        timer = getattr(c, "timer", None)
        if JOBS_SWEEP_S > 0 and timer is not None:
            self.sweep = timer.call_repeatedly(JOBS_SWEEP_S, _send_resume, (hostname, connected), priority=10)

    def stop(self, c: object) -> None:
        if self.sweep is not None:
            self.sweep.cancel()  # type: ignore[attr-defined]
            self.sweep = None


app.steps["consumer"].add(ResumeOnConnect)
app.autodiscover_tasks()
app.autodiscover_tasks(related_name="tasks_autolabel")  # the bulk auto-labelling job
