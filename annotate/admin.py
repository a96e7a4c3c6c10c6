from __future__ import annotations

from django.contrib import admin

from annotate import models


class LabelInline(admin.TabularInline):  # type: ignore[type-arg]
    model = models.Label
    extra = 0


@admin.register(models.Project)
class ProjectAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "engine", "batch_size", "ensemble_k", "test_set_size", "created_by", "created_at")
    search_fields = ("name",)
    list_filter = ("engine",)
    inlines = [LabelInline]


@admin.register(models.Label)
class LabelAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "code", "project", "order")
    search_fields = ("name", "code", "project__name")
    list_filter = ("project",)


@admin.register(models.ImportJob)
class ImportJobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("filename", "project", "status", "rows_done", "rows_created", "duplicate_texts", "created_at")
    search_fields = ("filename", "project__name")
    list_filter = ("status", "as_gold_for_test")


@admin.register(models.Item)
class ItemAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("external_id", "project", "state", "is_test", "required_labels", "final_label", "gold_label")
    search_fields = ("external_id", "text", "text_hash")
    list_filter = ("project", "state", "is_test")
    raw_id_fields = ("import_job", "final_label", "gold_label")


@admin.register(models.Round)
class RoundAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("project", "number", "status", "strategy", "retrain_requested", "items_scored", "created_at")
    search_fields = ("project__name", "prompt_hash", "adapter_set_hash")
    list_filter = ("status", "strategy")


@admin.register(models.BatchItem)
class BatchItemAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("round", "item", "source", "rank", "uncertainty")
    search_fields = ("item__external_id",)
    list_filter = ("source",)
    raw_id_fields = ("round", "item")


@admin.register(models.Lease)
class LeaseAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "annotator", "created_at", "expires_at", "assigned")
    search_fields = ("item__external_id", "annotator__username")
    raw_id_fields = ("item",)


@admin.register(models.Annotation)
class AnnotationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "annotator", "label", "round", "seconds_spent", "revisions", "created_at")
    search_fields = ("item__external_id", "annotator__username", "label__name")
    list_filter = ("label__project",)
    raw_id_fields = ("item", "round")


@admin.register(models.Skip)
class SkipAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "annotator", "reason", "resolved", "created_at")
    search_fields = ("item__external_id", "annotator__username", "reason")
    list_filter = ("resolved",)
    raw_id_fields = ("item",)


@admin.register(models.Adjudication)
class AdjudicationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "label", "decided_by", "decided_at")
    search_fields = ("item__external_id", "decided_by__username", "note")
    raw_id_fields = ("item",)


@admin.register(models.ItemEvent)
class ItemEventAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The append-only history: read it here; an undo is a new event made by the lead pages."""

    list_display = ("item", "kind", "actor", "at", "undoes")
    list_filter = ("kind",)
    search_fields = ("item__external_id", "actor__username", "note")
    raw_id_fields = ("item", "undoes")

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(models.AdapterVersion)
class AdapterVersionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("project", "round", "arm", "k", "n_labels", "content_hash", "created_at")
    search_fields = ("project__name", "content_hash", "path")
    list_filter = ("arm",)


@admin.register(models.ScoreShard)
class ScoreShardAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("round", "shard", "n_shards", "status", "n_items", "attempts", "worker", "seconds")
    search_fields = ("worker", "error")
    list_filter = ("status",)


@admin.register(models.WorkClaim)
class WorkClaimAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("round", "kind", "key", "status", "attempts", "worker", "heartbeat_at")
    search_fields = ("worker", "key", "error")
    list_filter = ("kind", "status")


@admin.register(models.Prediction)
class PredictionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "label", "mass", "uncertainty", "round", "created_at")
    search_fields = ("item__external_id", "prompt_hash", "adapter_set_hash")
    raw_id_fields = ("item", "round")


@admin.register(models.ProjectMembership)
class ProjectMembershipAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("project", "user", "role", "added_by", "created_at")
    list_filter = ("role",)
    search_fields = ("project__name", "user__username")
    raw_id_fields = ("user", "added_by")


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("user", "name", "created_at")
    search_fields = ("user__username", "name")
    readonly_fields = ("digest",)


@admin.register(models.GoldItem)
class GoldItemAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "project", "stratum", "created_at")
    list_filter = ("project",)
    search_fields = ("item__external_id", "item__text")
    raw_id_fields = ("item",)


@admin.register(models.StopSetItem)
class StopSetItemAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "project")
    list_filter = ("project",)
    search_fields = ("item__external_id", "item__text")
    raw_id_fields = ("item",)


@admin.register(models.Calibration)
class CalibrationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "project", "status", "target", "cascade", "n_items", "created_at")
    list_filter = ("status", "cascade")
    search_fields = ("project__name", "prompt_hash", "adapter_set_hash")


@admin.register(models.AutolabelRun)
class AutolabelRunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "project", "status", "source", "items_done", "n_items", "created_at")
    list_filter = ("status", "source")
    search_fields = ("project__name", "reason", "prompt_hash")


@admin.register(models.AutolabelShard)
class AutolabelShardAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("run", "shard", "status", "n_items", "attempts", "worker")
    list_filter = ("status",)
    search_fields = ("worker", "error")


@admin.register(models.AutoLabel)
class AutoLabelAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "label", "confidence", "tier", "decision", "audit", "run")
    list_filter = ("decision", "tier", "audit")
    search_fields = ("item__external_id", "prompt_hash", "adapter_set_hash")
    raw_id_fields = ("item", "run")


@admin.register(models.DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("item", "run", "reason", "attempts", "resolved", "updated_at")
    list_filter = ("reason", "resolved")
    search_fields = ("item__external_id", "detail")
    raw_id_fields = ("item", "run")


@admin.register(models.SavedFilter)
class SavedFilterAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "project", "user", "query", "created_at")
    search_fields = ("name", "user__username", "project__name")


@admin.register(models.BulkAction)
class BulkActionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Item-browser bulk actions: read here; apply and undo from the item browser."""

    list_display = ("project", "kind", "status", "actor", "created_at", "applied_at", "undone_at")
    list_filter = ("kind", "status")
    raw_id_fields = ("label",)


@admin.register(models.LabelSuspect)
class LabelSuspectAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Possible label errors: decided on the lead's Label errors page (it keeps the history)."""

    list_display = ("item", "given", "suggested", "p_given", "p_suggested", "decision", "decided_by", "created_at")
    list_filter = ("decision",)
    search_fields = ("item__external_id", "given__name", "suggested__name")
    raw_id_fields = ("item", "given", "suggested")


@admin.register(models.LabelErrorScan)
class LabelErrorScanAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Possible-label-errors scans: asked for and followed on the lead's Label errors page."""

    list_display = ("project", "status", "step", "labels_seen", "suspects_added", "requested_by", "created_at")
    list_filter = ("status",)
    search_fields = ("project__name", "error", "worker")


@admin.register(models.BatchApiAnswer)
class BatchApiAnswerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Answers imported from a managed batch API (manage.py autolabel batch-results): read here."""

    list_display = ("item", "prompt_version", "label", "mass", "project", "created_at")
    list_filter = ("prompt_version",)
    search_fields = ("item__external_id", "prompt_version")
    raw_id_fields = ("item", "label")


@admin.register(models.NotificationDelivery)
class NotificationDeliveryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Webhook and email notices (annotate/services/notify.py): sent by the io worker; read here."""

    list_display = ("project", "round", "event", "channel", "status", "attempts", "created_at", "sent_at")
    list_filter = ("event", "channel", "status")
    search_fields = ("project__name", "target", "last_error")


@admin.register(models.ExportSnapshot)
class ExportSnapshotAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A finished round's labels export (annotate/services/snapshots.py): written once, read here."""

    list_display = ("project", "round", "status", "rows", "sha256", "model_version", "created_at")
    list_filter = ("status",)
    search_fields = ("project__name", "sha256", "error")


@admin.register(models.WaitingItem)
class WaitingItemAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Items for people that wait for the next round in labelling (annotate/services/people_queue.py)."""

    list_display = ("project", "item", "source", "created_at")
    list_filter = ("source",)
    search_fields = ("project__name", "item__external_id")
    raw_id_fields = ("item",)
