"""The data model. Every table that several helpers/processes write has a unique constraint that makes
the write idempotent (one label per (item, annotator), one batch row per (round, item), one shard row
per (round, shard), one adapter per (round, arm, k), one prediction per (item, prompt, adapter set)).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Project(models.Model):
    """A labelling task: a pool of texts, a closed label set, a prompt, and the loop's knobs."""

    class Engine(models.TextChoices):
        HF = "hf", "Transformers (CPU or GPU)"
        VLLM = "vllm", "vLLM (GPU)"

    name = models.CharField(max_length=200, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    # Bumped by every save of the project or of one of its labels: the version of what the web
    # process caches per project (the label buttons).
    updated_at = models.DateTimeField(auto_now=True)
    guidelines = models.TextField(blank=True, help_text="Markdown, rendered safely on the annotate page.")
    # Prompt: instructions + label descriptions + frozen few-shot examples form the shared prefix.
    instructions = models.TextField(blank=True, default="Classify the text into exactly one label.")
    item_template = models.TextField(default="Text: {text}\nLabel:")
    few_shot = models.JSONField(default=list, blank=True, help_text='[{"text": ..., "label": name}, ...]')
    # Model and engine. Empty model_dir: settings.LLM_DIR (the bundled SmolLM2).
    model_dir = models.CharField(max_length=500, blank=True)
    engine = models.CharField(max_length=8, choices=Engine.choices, default=Engine.HF)
    seed = models.PositiveIntegerField(default=0)
    # Selection knobs.
    batch_size = models.PositiveIntegerField(default=50)  # B
    oversample = models.FloatField(default=4.0)  # M / B: top-M by uncertainty before k-center
    random_share = models.FloatField(default=0.15)  # share of B drawn uniformly from the eligible pool
    mass_threshold = models.FloatField(default=0.05)  # ensemble-mean label mass under this: review bucket
    uncertainty = models.CharField(max_length=16, default="margin")  # margin | entropy | bald
    cold_start_batches = models.PositiveIntegerField(default=2)  # rounds before the model chooses
    # How those rounds pick: "" follows the deployment (loop option cold_mode, "typical" by default).
    # "random" suits labels the text embeddings do not group (sentiment, question type: bench/RESULTS.md,
    # session 9); a project run as random always starts uniformly (services.planning.cold_mode).
    cold_mode = models.CharField(
        max_length=12,
        blank=True,
        default="",
        choices=[
            ("", "Deployment default"),
            ("typical", "Typical items"),
            ("random", "Random"),
            ("diversity", "Farthest-first"),
            ("hedged", "Half typical, half random"),
        ],
    )
    # Ensemble / training.
    ensemble_k = models.PositiveSmallIntegerField(default=4)
    scratch_every = models.PositiveSmallIntegerField(default=5)  # from-scratch retrain every R rounds
    auto_retrain_share = models.FloatField(default=0.0)  # 0: off; else retrain when this share is labeled
    # Cheap rescoring.
    candidate_sample = models.PositiveIntegerField(default=20000)  # 0: score the whole pool
    carry_top_share = models.FloatField(default=0.1)  # last round's top share always rescored
    first_pass_share = models.FloatField(default=1.0)  # <1: one adapter first, all K on this top share
    # People.
    overlap_share = models.FloatField(default=0.0)  # share of batch items labelled by several annotators
    overlap_annotators = models.PositiveSmallIntegerField(default=2)
    lease_seconds = models.PositiveIntegerField(default=600)
    show_suggestion = models.BooleanField(default=False)  # off by default: it biases annotators
    # Off by default: a lead deciding a disagreement they are part of is judge in their own case.
    lead_adjudicates_own = models.BooleanField(default=False)
    test_set_size = models.PositiveIntegerField(default=500)
    # Set: the project leaves the home page's list (ML staff find it under "Archived"); nothing is deleted.
    archived_at = models.DateTimeField(null=True, blank=True)
    # Notifications (annotate/services/notify.py) when a round finishes or reviews wait: a JSON POST to
    # this URL and/or an email to these addresses (comma-separated). Empty: none.
    notify_webhook_url = models.CharField(max_length=500, blank=True)
    notify_emails = models.CharField(max_length=1000, blank=True)

    def __str__(self) -> str:
        return self.name


class ProjectMembership(models.Model):
    """A user's role in one project. A project without any membership row is open to every user with
    the global role (the groups); once it has one, only its members (and superusers) open it, each
    with the role of their membership. See README, "Who can open a project"."""

    class Role(models.TextChoices):
        ANNOTATOR = "annotator"
        LEAD = "lead"
        ML = "ml", "ML staff"

    project = models.ForeignKey(Project, related_name="memberships", on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="memberships", on_delete=models.CASCADE)
    role = models.CharField(max_length=12, choices=Role.choices)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project}: {self.role}"


class Label(models.Model):
    project = models.ForeignKey(Project, related_name="labels", on_delete=models.CASCADE)
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    code = models.CharField(max_length=32, help_text="Single-token code the model answers with.")
    order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["order", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="label_unique_name"),
            models.UniqueConstraint(fields=["project", "code"], name="label_unique_code"),
        ]

    def __str__(self) -> str:
        return self.name


class ImportJob(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey(Project, related_name="imports", on_delete=models.CASCADE)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    filename = models.CharField(max_length=500)
    path = models.CharField(max_length=1000, blank=True)
    as_gold_for_test = models.BooleanField(default=False)  # labels are gold labels of test-set items
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    total_bytes = models.BigIntegerField(default=0)
    processed_bytes = models.BigIntegerField(default=0)
    rows_done = models.PositiveIntegerField(default=0)
    rows_created = models.PositiveIntegerField(default=0)
    duplicate_texts = models.PositiveIntegerField(default=0)
    duplicates_sample = models.JSONField(default=list, blank=True)  # [[line, id, first_id, first_line], ...]
    # On (the upload form's default): a row whose normalised text is already in the project, or earlier
    # in the file, is skipped and counted in rows_skipped (its sample in duplicates_sample).
    skip_duplicates = models.BooleanField(default=True)
    rows_skipped = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)


class Item(models.Model):
    class State(models.TextChoices):
        POOL = "pool"  # eligible for selection (unless test / labeled / leased)
        REVIEW = "review"  # low label mass: a lead looks at it, never selected
        UNLABELABLE = "unlabelable"  # a lead confirmed a skip: out of the loop

    project = models.ForeignKey(Project, related_name="items", on_delete=models.CASCADE)
    external_id = models.CharField(max_length=200)
    text = models.TextField()
    text_hash = models.CharField(max_length=64, db_index=True)  # sha256 of the text, hex
    metadata = models.JSONField(default=dict, blank=True)
    import_job = models.ForeignKey(ImportJob, null=True, blank=True, on_delete=models.SET_NULL)
    gold_label = models.ForeignKey(Label, null=True, blank=True, related_name="+", on_delete=models.PROTECT)
    is_test = models.BooleanField(default=False)
    state = models.CharField(max_length=12, choices=State.choices, default=State.POOL)
    review_reason = models.CharField(max_length=200, blank=True)
    # How many distinct annotators must label it (1, or project.overlap_annotators for overlap items).
    required_labels = models.PositiveSmallIntegerField(default=1)
    # Set by services when labels agree or a lead adjudicates; None while open or in disagreement.
    final_label = models.ForeignKey(Label, null=True, blank=True, related_name="+", on_delete=models.PROTECT)
    finalized_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="item_unique_external_id"),
        ]
        indexes = [
            models.Index(fields=["project", "is_test", "state"]),
            models.Index(fields=["project", "final_label"]),
        ]

    def __str__(self) -> str:
        return f"{self.external_id}: {self.text[:40]}"


class Round(models.Model):
    """One turn of the loop. Status moves forward only through ``round_transition``
    (annotate/services/round_state.py), one guarded UPDATE along ``TRANSITIONS``:

        pending → scoring → selecting → labeling → training → evaluating → done      (any active → failed)
        pending → selecting             (cold-start, random and kcenter-only rounds: nothing to score)
        selecting → training            (nothing left to select, ``pool_exhausted``, or a final-model
                                         round: no batch, the K adapters retrained from scratch on every label)
    """

    class TrainingMode(models.TextChoices):
        WARM = "warm"  # each prod member continued from the previous round's member k
        SCRATCH = "scratch"  # fresh adapters on every label: the model is a function of the labelled set

    class Status(models.TextChoices):  # the stored codes stay as they were; the labels are what people read
        PENDING = "pending", "Waiting to start"
        SCORING = "scoring", "Scoring"
        SELECTING = "selecting", "Selecting"
        LABELING = "labeling", "Labelling"
        TRAINING = "training", "Training"
        EVALUATING = "evaluating", "Evaluating"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    ACTIVE_STATUSES = (
        Status.PENDING,
        Status.SCORING,
        Status.SELECTING,
        Status.LABELING,
        Status.TRAINING,
        Status.EVALUATING,
    )
    TRANSITIONS: dict[str, frozenset[str]] = {
        Status.PENDING: frozenset({Status.SCORING, Status.SELECTING}),
        Status.SCORING: frozenset({Status.SELECTING}),
        Status.SELECTING: frozenset({Status.LABELING, Status.TRAINING}),
        Status.LABELING: frozenset({Status.TRAINING}),
        Status.TRAINING: frozenset({Status.EVALUATING}),
        Status.EVALUATING: frozenset({Status.DONE}),
    }

    project = models.ForeignKey(Project, related_name="rounds", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    failure_reason = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    seed = models.PositiveIntegerField(default=0)
    strategy = models.CharField(max_length=24, default="active")  # active | random | cold-start | ...
    prompt_hash = models.CharField(max_length=64, blank=True)
    adapter_set_hash = models.CharField(max_length=64, blank=True)  # adapters that scored this round
    retrain_requested = models.BooleanField(default=False)
    # Selection found no pool item left: the round labelled nothing, trained the final model (from
    # scratch) and is the project's last until more items are imported. A success, not a failure.
    pool_exhausted = models.BooleanField(default=False)
    # A user asked for the final model: the round selects nothing and retrains from scratch.
    final_requested = models.BooleanField(default=False)
    # How the round's prod members were trained, fixed with its training plan ("" before that).
    training_mode = models.CharField(max_length=8, choices=TrainingMode.choices, blank=True)
    # The round's full effective configuration, resolved once when it was requested
    # (annotate.loopconfig.freeze_config: profile, prompt, model, engine and its options, K, selection,
    # rescoring, training) and read by every process that works on it; its sha256 beside it.
    config = models.JSONField(default=dict, blank=True)
    config_fingerprint = models.CharField(max_length=64, blank=True)
    # Progress counters, polled by the UI.
    items_to_score = models.PositiveIntegerField(default=0)
    items_scored = models.PositiveIntegerField(default=0)
    train_steps_total = models.PositiveIntegerField(default=0)
    train_steps_done = models.PositiveIntegerField(default=0)
    # The evaluation's prompts (every adapter set over the test, stop and held-out items).
    eval_items_total = models.PositiveIntegerField(default=0)
    eval_items_done = models.PositiveIntegerField(default=0)
    # The ETA's rate for the step running now: seconds per unit (a training step, an evaluation prompt)
    # as the worker measured it (training.eta.seconds_per_unit); 0: not measured yet. Training's
    # finished runs (start-up included) are summed beside it, so the rate holds still between runs.
    unit_seconds = models.FloatField(default=0.0)
    train_runs_seconds = models.FloatField(default=0.0)
    train_runs_steps = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)  # evaluation, active vs random arms
    cost = models.JSONField(default=dict, blank=True)  # seconds per step, tokens, labels, minutes

    class Meta:
        ordering = ["project", "number"]
        constraints = [models.UniqueConstraint(fields=["project", "number"], name="round_unique_number")]

    def __str__(self) -> str:
        return f"{self.project} round {self.number} ({self.status})"


class BatchItem(models.Model):
    """An item selected into a round's batch. One row per (round, item): re-running selection is a no-op."""

    class Source(models.TextChoices):
        ACTIVE = "active"  # picked by the round's strategy (not the random slice)
        RANDOM = "random"  # the uniform random slice (the random arm trains on these)
        COLD = "cold", "Cold start"  # cold-start (random / diversity-only) rounds
        CASCADE = "cascade"  # the autolabel cascade was unsure: people label it
        AUDIT = "audit"  # a random share of auto-accepted items, checked by people
        GOLD = "gold"  # the stratified gold set, double-labelled blind
        CALIBRATION = "calib", "Calibration"  # the calibration split: random pool items auto-accept is fitted on

    round = models.ForeignKey(Round, related_name="batch_items", on_delete=models.CASCADE)
    item = models.ForeignKey(Item, related_name="batch_rows", on_delete=models.CASCADE)
    source = models.CharField(max_length=8, choices=Source.choices)
    rank = models.PositiveIntegerField(default=0)
    uncertainty = models.FloatField(null=True, blank=True)
    # The item has its final label (or a lead took it out of the pool): the queue walk skips the row by
    # index instead of visiting it. Kept by the labelling and review services; only ever a shortcut (the
    # walk still checks the item), so a row left False by some other path costs time, never an item.
    done = models.BooleanField(default=False)

    class Meta:
        ordering = ["round", "rank"]
        constraints = [models.UniqueConstraint(fields=["round", "item"], name="batchitem_unique")]
        # The batch queue walks a round's open rows in rank order and stops at the first open item:
        # without `done`, it visited every finished row before it (3,000 of them added ~15 ms).
        indexes = [
            models.Index(fields=["round", "rank", "item"], name="batchitem_queue_open", condition=Q(done=False)),
        ]


class WaitingItem(models.Model):
    """An item people must label outside the loop's selection (auto-labelling's cascade, audit, gold,
    calibration split) that arrived while the project's one active round was busy (planning, scoring,
    selecting, training, evaluating): it waits here and joins the batch of the next round that reaches
    labelling, or, once no round is active, a round opened for it (annotate/services/people_queue.py)."""

    project = models.ForeignKey(Project, related_name="waiting_items", on_delete=models.CASCADE)
    item = models.ForeignKey(Item, related_name="waiting", on_delete=models.CASCADE)
    source = models.CharField(max_length=8, choices=BatchItem.Source.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "item"], name="waitingitem_unique")]


class Lease(models.Model):
    """An item handed to one annotator until expires_at. Non-overlap items have at most one live lease."""

    item = models.ForeignKey(Item, related_name="leases", on_delete=models.CASCADE)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="leases", on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    # A lead assigned the item to this annotator (item browser, bulk "assign"): it is served to them
    # before their queue and kept for them; it does not run out (expires_at far ahead) and taking
    # another item does not let go of it. Their label or skip ends it, like any lease.
    assigned = models.BooleanField(default=False, db_default=False)  # db_default: raw INSERTs may omit it

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="lease_unique")]


class Annotation(models.Model):
    """One annotator's label for one item. Revising (undo) updates this row; it never adds a second."""

    item = models.ForeignKey(Item, related_name="annotations", on_delete=models.CASCADE)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="annotations", on_delete=models.CASCADE)
    label = models.ForeignKey(Label, on_delete=models.PROTECT)
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    revisions = models.PositiveSmallIntegerField(default=0)
    seconds_spent = models.FloatField(null=True, blank=True)  # time from item shown to submit

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="annotation_unique")]
        indexes = [models.Index(fields=["annotator", "created_at"])]


class Skip(models.Model):
    """An annotator passed on an item. Not a label; leads review skips."""

    item = models.ForeignKey(Item, related_name="skips", on_delete=models.CASCADE)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="skips", on_delete=models.CASCADE)
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="skip_unique")]


class Adjudication(models.Model):
    """A lead's final word on an item (disagreement, skip or review bucket)."""

    item = models.OneToOneField(Item, related_name="adjudication", on_delete=models.CASCADE)
    label = models.ForeignKey(Label, null=True, blank=True, on_delete=models.PROTECT)  # None: unlabelable
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decided_at = models.DateTimeField(auto_now=True)
    note = models.TextField(blank=True)


class ItemEvent(models.Model):
    """What happened to an item, append-only: every label, revision, skip, lead decision (with its
    note) and return to the pool, with who and when. Rows are never updated or deleted; an undo is a
    row of its own pointing at the row it undoes (one undo per row: the unique key). A lead's decision
    keeps in ``before`` the item's state it replaced, which its undo restores."""

    class Kind(models.TextChoices):
        LABEL = "label"
        REVISION = "revision"  # label: the new one, previous_label: the one it replaced
        SKIP = "skip"  # note: the reason
        DECISION = "decision"  # a lead's final label (label None: unlabelable), note: the lead's note
        RETURN = "return"  # a lead sent the item back to the pool
        REVIEW = "review"  # a lead sent the item to the review bucket (note: the reason)
        ASSIGN = "assign"  # a lead assigned the item to an annotator (note: to whom; before: its leases)
        UNDO = "undo"  # undoes: the decision, return, review, assignment or skip taken back

    item = models.ForeignKey(Item, related_name="events", on_delete=models.CASCADE)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="+", on_delete=models.PROTECT)
    at = models.DateTimeField(db_index=True)
    label = models.ForeignKey(Label, null=True, blank=True, related_name="+", on_delete=models.PROTECT)
    previous_label = models.ForeignKey(Label, null=True, blank=True, related_name="+", on_delete=models.PROTECT)
    note = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    undoes = models.OneToOneField("self", null=True, blank=True, related_name="undone_by", on_delete=models.PROTECT)

    class Meta:
        ordering = ["item", "at", "id"]
        indexes = [models.Index(fields=["item", "id"]), models.Index(fields=["actor", "kind", "id"])]

    def __str__(self) -> str:
        return f"{self.item_id}: {self.kind} by {self.actor_id} at {self.at}"


class SavedFilter(models.Model):
    """A user's named item-browser query in one project (the browser's query string, as is)."""

    project = models.ForeignKey(Project, related_name="saved_filters", on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="saved_filters", on_delete=models.CASCADE)
    name = models.CharField(max_length=100)
    query = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "user", "name"], name="saved_filter_unique")]

    def __str__(self) -> str:
        return self.name


class BulkAction(models.Model):
    """An item-browser action on many items (annotate/services/bulk.py): drafted with the items it
    applies to (the confirmation shows their count), applied (one history event per item, listed in
    ``event_ids``), perhaps undone (every item as it was before). Status moves forward only."""

    class Kind(models.TextChoices):
        REVIEW = "review", "Send to review"
        ASSIGN = "assign", "Assign"
        RELABEL = "relabel", "Relabel"

    class Status(models.TextChoices):
        DRAFT = "draft"
        APPLIED = "applied"
        UNDONE = "undone"

    project = models.ForeignKey(Project, related_name="bulk_actions", on_delete=models.CASCADE)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="+", on_delete=models.PROTECT)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    label = models.ForeignKey(Label, null=True, blank=True, related_name="+", on_delete=models.PROTECT)  # relabel
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.PROTECT
    )  # assign
    note = models.CharField(max_length=500, blank=True)
    item_ids = models.JSONField(default=list)  # the items it applies to
    left_out = models.JSONField(default=dict, blank=True)  # {why: count} of selected items it leaves alone
    event_ids = models.JSONField(default=list, blank=True)  # applied: the history event per item
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    undone_at = models.DateTimeField(null=True, blank=True)


class AdapterVersion(models.Model):
    """A trained LoRA adapter on disk. Its pk is the engine's integer LoRA id; its name is unique too,
    so vLLM never reuses prefix-cache entries of older weights."""

    class Arm(models.TextChoices):
        PROD = "prod"  # the production ensemble member k
        SCRATCH = "scratch"  # from-scratch retrain, compared with the warm-started one
        ACTIVE = "active"  # trained on an equal-size sample of actively selected labels
        RANDOM = "random"  # trained on the random-slice labels only

    project = models.ForeignKey(Project, related_name="adapters", on_delete=models.CASCADE)
    round = models.ForeignKey(Round, related_name="adapters", on_delete=models.CASCADE)
    arm = models.CharField(max_length=8, choices=Arm.choices)
    k = models.PositiveSmallIntegerField(default=0)
    path = models.CharField(max_length=1000)
    content_hash = models.CharField(max_length=64)
    warm_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    n_labels = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["round", "arm", "k"], name="adapter_unique")]

    @property
    def lora_name(self) -> str:
        return f"p{self.project_id}-r{self.round_id}-{self.arm}{self.k}-{self.content_hash[:12]}"


class WorkStatus(models.TextChoices):
    """A unit of round work (a ScoreShard or a WorkClaim), claimed by one live process at a time
    (annotate/services/jobs.py): pending → queued (a message was sent) → running (worker = host:pid)
    → done; failed, or running on a dead process, is claimed again."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class ScoreShard(models.Model):
    """A slice of a round's pool scoring (items whose id hashes to `shard`). Checkpointed: a done
    shard is never rescored; a crashed one is retried."""

    Status = WorkStatus

    round = models.ForeignKey(Round, related_name="shards", on_delete=models.CASCADE)
    shard = models.PositiveIntegerField()
    n_shards = models.PositiveIntegerField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    n_items = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=1000, blank=True)  # .npz with item ids, p[K,N,C], mass[K,N]
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    seconds = models.FloatField(default=0.0)
    tokens = models.BigIntegerField(default=0)
    error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["round", "shard"], name="shard_unique")]


class WorkClaim(models.Model):
    """A unit of a round's work other than a score shard, claimed like one (annotate/services/jobs.py)
    so that one live process does it: planning (``plan``), choosing the batch (``select``), freezing
    the training sets (``train_plan``), training one adapter (``train``, key "arm:k"), a slice of the
    evaluation's scoring (``eval_shard``, key its number: the gpu workers score the test set side by side
    before ``evaluate`` reads their scores), the evaluation (``evaluate``), ``finish`` (once the round is
    done or failed: its export snapshot and its notifications), ``arms_eval`` (the comparison arms'
    evaluation when they are trained after the round: loop option ``arms_timing`` "deferred"; the row
    exists from the training plan on while they are owed, and is done once their points are in the
    round's metrics or they were given up), and ``drive``: the whole round held by a synchronous driver
    (``round run-sync``, the simulation), which workers then leave alone."""

    class Kind(models.TextChoices):
        PLAN = "plan"
        SELECT = "select"
        TRAIN_PLAN = "train_plan"
        TRAIN = "train"
        EVALUATE = "evaluate"
        EVAL_SHARD = "eval_shard"  # key: its number; a slice of the evaluation's scoring (loop option eval_shards)
        DRIVE = "drive"
        FINISH = "finish"  # after done or failed: the export snapshot and notifications (io queue)
        ARMS_EVAL = "arms_eval"  # after done: the deferred comparison arms' evaluation (loop option arms_timing)

    Status = WorkStatus

    round = models.ForeignKey(Round, related_name="claims", on_delete=models.CASCADE)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    key = models.CharField(max_length=40, blank=True)  # train: "arm:k"; empty for the others
    status = models.CharField(max_length=8, choices=WorkStatus.choices, default=WorkStatus.PENDING)
    worker = models.CharField(max_length=200, blank=True)  # host:pid of the process holding it
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)
    # drive: refreshed by the driver while it runs, so a process on another host (no pid to check,
    # no Celery node to ping) can tell a live driver from a dead one.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["round", "kind", "key"], name="workclaim_unique")]


class Prediction(models.Model):
    """The predictor's prediction for an item (predictor/model.py: the adapters' mean blended with
    the embedding proxy) under one prompt and one adapter set."""

    item = models.ForeignKey(Item, related_name="predictions", on_delete=models.CASCADE)
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.SET_NULL)
    prompt_hash = models.CharField(max_length=64)
    adapter_set_hash = models.CharField(max_length=64)
    model_version = models.CharField(max_length=64, blank=True)  # the predictor's fingerprint ("" before 0019)
    label = models.ForeignKey(Label, on_delete=models.PROTECT)  # argmax of the distribution
    probs = models.JSONField()  # the predictor's distribution over labels, in label order
    mass = models.FloatField()  # ensemble-mean label mass
    uncertainty = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "prompt_hash", "adapter_set_hash"], name="prediction_unique"),
        ]


class ApiToken(models.Model):
    """Token for the small REST endpoint (stored as a sha256 digest, shown once)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="api_tokens", on_delete=models.CASCADE)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    name = models.CharField(max_length=100, blank=True)


class GoldItem(models.Model):
    """A held-out item people label and the loop never trains on (the loop's labeled set, its pool
    and the auto-label run all exclude it). Two purposes:

    - gold: topped up until each *true* class has a minimum of labelled items (drawn by the latest
      predictions of the classes still short, counted by their final labels), double-labelled blind,
      disagreements adjudicated; it measures (per-class accuracy, κ);
    - calibration: a uniform random sample of the pool, labelled once; auto-accept thresholds are
      fitted on it and on nothing else, so their bound is a bound on fresh items.
    """

    class Purpose(models.TextChoices):
        GOLD = "gold"
        CALIBRATION = "calibration"

    project = models.ForeignKey(Project, related_name="gold_items", on_delete=models.CASCADE)
    item = models.OneToOneField(Item, related_name="gold", on_delete=models.CASCADE)
    stratum = models.ForeignKey(Label, null=True, blank=True, related_name="+", on_delete=models.SET_NULL)
    purpose = models.CharField(max_length=12, choices=Purpose.choices, default=Purpose.GOLD)
    created_at = models.DateTimeField(auto_now_add=True)


class StopSetItem(models.Model):
    """An item of the project's stop set: a fixed uniform sample of the non-test items, drawn once
    (annotate/services/projects.py, ``stop_set_draw``). Every round's prod ensemble predicts it, and
    Cohen's κ between consecutive rounds' predictions is the stabilizing-predictions stopping
    criterion (Bloodgood & Vijay-Shanker 2009). Its items stay in the pool and may be labelled like
    any other: the criterion needs the set fixed, not unlabelled."""

    project = models.ForeignKey(Project, related_name="stop_set_items", on_delete=models.CASCADE)
    item = models.OneToOneField(Item, related_name="stop_set", on_delete=models.CASCADE)


class Calibration(models.Model):
    """A calibrator and per-class auto-accept thresholds fitted on human-labelled evaluation items for
    one (prompt hash, adapter set). ``fingerprint`` holds what the prompt hash is made of (tokenizer,
    chat template, instructions, model revision), so a run can say which of them drifted."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey(Project, related_name="calibrations", on_delete=models.CASCADE)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    target = models.FloatField(default=0.95)  # precision auto labels must reach, per class
    delta = models.FloatField(default=0.05)  # chance a class's threshold misses the target (fixed-sequence test)
    cascade = models.CharField(max_length=16, default="agreement")  # none | agreement | permuted | second_model
    second_model_dir = models.CharField(max_length=500, blank=True)
    prompt_hash = models.CharField(max_length=64, blank=True)
    adapter_set_hash = models.CharField(max_length=64, blank=True)
    fingerprint = models.JSONField(default=dict, blank=True)
    # The (uncalibrated) predictor the calibrator and thresholds were fitted on: its fingerprint, the
    # drift key, and its parts (predictor/model.py), so a refused run can say which part changed.
    model_version = models.CharField(max_length=64, blank=True)
    predictor = models.JSONField(default=dict, blank=True)
    n_items = models.PositiveIntegerField(default=0)  # evaluation items (test set + gold): the calibrator
    n_calibration = models.PositiveIntegerField(default=0)  # calibration-split items: the thresholds
    worker = models.CharField(max_length=200, blank=True)  # host:pid holding it (annotate/services/jobs.py)
    attempts = models.PositiveSmallIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)
    calibrator = models.JSONField(default=dict, blank=True)  # predictor.calibrate.Calibrator.to_json()
    before = models.JSONField(default=dict, blank=True)  # ECE, NLL, reliability bins, uncalibrated
    after = models.JSONField(default=dict, blank=True)
    thresholds = models.JSONField(default=dict, blank=True)  # {tier: [ClassThreshold as dict, ...]}
    tier_calibrators = models.JSONField(default=dict, blank=True)  # {tier: Calibrator json}
    bias = models.JSONField(default=dict, blank=True)  # label-order flip rate and code prior
    gold_report = models.JSONField(default=dict, blank=True)  # per-class P/R, confusion, kappas
    rate = models.JSONField(default=dict, blank=True)  # measured: tokens/s, items/s, device, engine
    blocked = models.JSONField(default=dict, blank=True)  # {label name: why} (audit alarm)


class AutolabelRun(models.Model):
    """One "label the pool" job. Shards are checkpoints; results are keyed by (item, prompt hash,
    adapter set), so a re-run skips finished work."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        REFUSED = "refused"  # template drift: nothing auto-accepted, reason says why

    class Source(models.TextChoices):
        ENGINE = "engine"  # the adapters scored the items on our GPUs (or CPU)
        BATCH_API = "batch_api"  # a managed batch API answered them (annotate/services/batch_api.py)

    project = models.ForeignKey(Project, related_name="autolabel_runs", on_delete=models.CASCADE)
    calibration = models.ForeignKey(Calibration, related_name="runs", on_delete=models.PROTECT)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ENGINE)
    reason = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)
    prompt_hash = models.CharField(max_length=64, blank=True)
    adapter_set_hash = models.CharField(max_length=64, blank=True)
    model_version = models.CharField(max_length=64, blank=True)  # the calibrated predictor's fingerprint
    audit_share = models.FloatField(default=0.02)
    seed = models.PositiveIntegerField(default=0)
    max_shards_in_flight = models.PositiveSmallIntegerField(default=4)  # backpressure on the gpu queue
    max_shards_per_worker = models.PositiveSmallIntegerField(default=2)  # one worker never holds more at once
    chunk_size = models.PositiveIntegerField(default=256)  # requests in flight per worker (one engine call)
    shard_items = models.PositiveIntegerField(default=2000)  # items per shard (checkpoint granularity)
    n_items = models.PositiveIntegerField(default=0)
    n_shards = models.PositiveIntegerField(default=0)
    items_done = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)  # {tier: {tried, accepted, escalated}}
    seconds = models.FloatField(default=0.0)
    tokens = models.BigIntegerField(default=0)
    computed_tokens = models.BigIntegerField(default=0)  # tokens the engine ran (prefix reuse skips some)


class AutolabelShard(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    run = models.ForeignKey(AutolabelRun, related_name="shards", on_delete=models.CASCADE)
    shard = models.PositiveIntegerField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    n_items = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    node = models.CharField(max_length=200, blank=True)  # the Celery node holding it: the per-worker cap counts these
    seconds = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "shard"], name="autolabel_shard_unique")]


class AutoLabel(models.Model):
    """The decision for one item under one (prompt hash, adapter set): the unique key makes a
    redelivered shard's write an upsert of the same row."""

    class Decision(models.TextChoices):
        ACCEPTED = "accepted"
        ESCALATED = "escalated"  # to people (cascade batch source): under every tier's threshold,
        # or a class with no threshold (too little evidence) or blocked by the audit alarm

    class Audit(models.TextChoices):
        NONE = ""
        PENDING = "pending"
        PASSED = "passed"
        FAILED = "failed"

    item = models.ForeignKey(Item, related_name="auto_labels", on_delete=models.CASCADE)
    prompt_hash = models.CharField(max_length=64)
    adapter_set_hash = models.CharField(max_length=64)
    model_version = models.CharField(max_length=64, blank=True)  # the calibrated predictor's fingerprint
    run = models.ForeignKey(AutolabelRun, related_name="labels", on_delete=models.CASCADE)
    label = models.ForeignKey(Label, on_delete=models.PROTECT)  # the deciding tier's label
    confidence = models.FloatField()  # calibrated, of the deciding tier
    probs = models.JSONField()  # calibrated tier-1 distribution in label order
    tier = models.CharField(max_length=16)  # model | agreement | permuted | second_model
    decision = models.CharField(max_length=10, choices=Decision.choices)
    audit = models.CharField(max_length=8, choices=Audit.choices, default=Audit.NONE, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "prompt_hash", "adapter_set_hash"], name="autolabel_unique"),
        ]
        indexes = [models.Index(fields=["run", "decision"]), models.Index(fields=["audit"])]


class BatchApiAnswer(models.Model):
    """An item's label from a managed batch API (scoring/batch_manifest.py), keyed by (item, prompt
    version): a results file imported twice writes nothing the second time, and an answer to another
    prompt version is never mixed in."""

    project = models.ForeignKey(Project, related_name="batch_api_answers", on_delete=models.CASCADE)
    item = models.ForeignKey(Item, related_name="batch_api_answers", on_delete=models.CASCADE)
    prompt_version = models.CharField(max_length=32)
    label = models.ForeignKey(Label, on_delete=models.PROTECT)
    # The answer's distribution over the labels (label order, summing to 1) from the provider's logprobs;
    # empty when it returned the label alone: such an answer has no confidence to hold to a threshold.
    probs = models.JSONField(default=list, blank=True)
    mass = models.FloatField(null=True, blank=True)  # probability on the label codes; None: not reported
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "prompt_version"], name="batch_api_answer_unique"),
        ]


class DeadLetter(models.Model):
    """An item a run could not decide: failed repeatedly, over the context, or under the label-mass
    threshold. Leads see the reason and retry; the run goes on without it."""

    class Reason(models.TextChoices):
        FAILED = "failed"
        OVER_CONTEXT = "over_context"
        LOW_MASS = "low_mass"

    run = models.ForeignKey(AutolabelRun, related_name="dead_letters", on_delete=models.CASCADE)
    item = models.ForeignKey(Item, related_name="dead_letters", on_delete=models.CASCADE)
    reason = models.CharField(max_length=16, choices=Reason.choices)
    detail = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=1)
    resolved = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "item"], name="deadletter_unique")]


class LabelSuspect(models.Model):
    """A human label that a predictor judging out of sample contradicts with confidence
    (predictor/label_errors.py, queued by annotate/services/label_errors.py). Nothing changes the label
    but a lead: ``kept`` leaves it, ``relabelled`` went through the lead's decision (an Adjudication)."""

    class Decision(models.TextChoices):
        OPEN = "open"
        KEPT = "kept"
        RELABELLED = "relabelled"

    project = models.ForeignKey(Project, related_name="label_suspects", on_delete=models.CASCADE)
    item = models.ForeignKey(Item, related_name="label_suspects", on_delete=models.CASCADE)
    given = models.ForeignKey(Label, related_name="+", on_delete=models.CASCADE)  # the human label judged
    suggested = models.ForeignKey(Label, related_name="+", on_delete=models.CASCADE)
    p_given = models.FloatField()  # the out-of-sample probability of the human label
    p_suggested = models.FloatField()
    method = models.CharField(max_length=60)  # e.g. "proxy out-of-fold (5 folds), confident learning"
    labels_seen = models.IntegerField()  # labelled items the scan judged
    decision = models.CharField(max_length=12, choices=Decision.choices, default=Decision.OPEN)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # the same human label is judged once: a label a lead kept is not queued again by a later scan
            models.UniqueConstraint(fields=["item", "given"], name="label_suspect_once_per_label"),
        ]


class NotificationDelivery(models.Model):
    """One notification to one channel (a webhook POST or an email), sent by a task on the ``io`` queue
    with retries (annotate/services/notify.py). One row per (round, event, channel): a redelivered
    message or a second finish of the same round never notifies twice. A failing receiver only ever
    fails its row (status, attempts, last error), never the round."""

    class Event(models.TextChoices):
        ROUND_DONE = "round_done", "Round finished"
        ROUND_FAILED = "round_failed", "Round failed"
        REVIEWS_WAITING = "reviews_waiting", "Reviews wait for a lead"

    class Channel(models.TextChoices):
        WEBHOOK = "webhook"
        EMAIL = "email"

    class Status(models.TextChoices):
        PENDING = "pending"  # queued, or waiting for its next retry
        SENT = "sent"
        FAILED = "failed"  # every attempt failed

    project = models.ForeignKey(Project, related_name="notifications", on_delete=models.CASCADE)
    round = models.ForeignKey(Round, related_name="notifications", on_delete=models.CASCADE)
    event = models.CharField(max_length=16, choices=Event.choices)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=1000)  # the URL, or the comma-separated addresses
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["round", "event", "channel"], name="notification_once_per_round"),
        ]


class ExportSnapshot(models.Model):
    """The labels export as it stood when a round finished (annotate/services/snapshots.py): written
    once to EXPORT_DIR, never rewritten; one per round. A snapshot that could not be written keeps
    its error here (the round is not failed for it)."""

    class Status(models.TextChoices):
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey(Project, related_name="snapshots", on_delete=models.CASCADE)
    round = models.OneToOneField(Round, related_name="snapshot", on_delete=models.CASCADE)
    status = models.CharField(max_length=8, choices=Status.choices)
    fmt = models.CharField(max_length=8, default="jsonl")
    path = models.CharField(max_length=1000, blank=True)
    rows = models.PositiveIntegerField(default=0)
    size_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    model_version = models.CharField(max_length=64, blank=True)  # the round's prod adapter set ("": none)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-round__number"]


class LabelErrorScan(models.Model):
    """One possible-label-errors scan (annotate/services/label_errors.py), run by a worker: the page
    polls this row. At most one is pending or running per project (a second request gets that one);
    claimed like a shard (``worker``, ``attempts``: annotate/services/jobs.py), so a worker killed
    mid-scan leaves it running on a dead process, and the next worker start takes it over."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Step(models.IntegerChoices):
        WAITING = 0, "waiting for a worker"
        READING = 1, "reading the labels"
        EMBEDDING = 2, "embedding the labelled texts"
        JUDGING = 3, "judging every label out of fold"
        QUEUEING = 4, "queueing the suspects"

    project = models.ForeignKey(Project, related_name="label_error_scans", on_delete=models.CASCADE)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    step = models.PositiveSmallIntegerField(choices=Step.choices, default=Step.WAITING)
    worker = models.CharField(max_length=200, blank=True)  # host:pid holding it (annotate/services/jobs.py)
    attempts = models.PositiveSmallIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)  # its last message (annotate/services/jobs.py)
    labels_seen = models.PositiveIntegerField(default=0)  # labelled items judged
    suspects_found = models.PositiveIntegerField(default=0)  # contradicted with confidence (judged before or not)
    suspects_added = models.PositiveIntegerField(default=0)  # new in the lead's queue
    error = models.TextField(blank=True)

    class Meta:
        constraints = [
            # two clicks, two tabs or two leads: one scan at a time per project
            models.UniqueConstraint(
                fields=["project"],
                condition=models.Q(status__in=["pending", "running"]),
                name="label_error_scan_one_active",
            ),
        ]

    @property
    def active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.RUNNING)


__all__ = [
    "AdapterVersion",
    "Adjudication",
    "Annotation",
    "ApiToken",
    "AutoLabel",
    "AutolabelRun",
    "AutolabelShard",
    "BatchApiAnswer",
    "BatchItem",
    "BulkAction",
    "Calibration",
    "DeadLetter",
    "ExportSnapshot",
    "GoldItem",
    "ImportJob",
    "Item",
    "ItemEvent",
    "Label",
    "LabelErrorScan",
    "LabelSuspect",
    "Lease",
    "NotificationDelivery",
    "Prediction",
    "Project",
    "ProjectMembership",
    "Round",
    "SavedFilter",
    "ScoreShard",
    "Skip",
    "StopSetItem",
    "WorkClaim",
    "WorkStatus",
]
