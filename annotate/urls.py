from __future__ import annotations

from django.urls import path, re_path

from annotate import api, api_autolabel
from annotate.views import annotator, autolabel, data, home, items, label_errors, lead, ml, setup, team

urlpatterns = [
    path("", home.home, name="home"),
    # Annotators
    path("p/<int:project_id>/annotate/", annotator.annotate, name="annotate"),
    path("p/<int:project_id>/annotate/test/", annotator.annotate, {"queue": "test"}, name="annotate_test"),
    path("p/<int:project_id>/annotate/label/", annotator.annotate_label, name="annotate_label"),
    path("p/<int:project_id>/annotate/skip/", annotator.annotate_skip, name="annotate_skip"),
    path("p/<int:project_id>/annotate/undo/", annotator.annotate_undo, name="annotate_undo"),
    path("p/<int:project_id>/guidelines/", annotator.annotate_guidelines, name="annotate_guidelines"),
    # Project setup (ml)
    path("setup/new/", setup.setup_new, name="setup_new"),
    path("p/<int:project_id>/setup/", setup.project_setup, name="project_setup"),
    path("p/<int:project_id>/archive/", setup.project_archive, name="project_archive"),
    path("p/<int:project_id>/delete/", setup.project_delete, name="project_delete"),
    # Leads
    path("p/<int:project_id>/lead/", lead.lead_home, name="lead_home"),
    path("p/<int:project_id>/lead/agreement/", lead.lead_agreement, name="lead_agreement"),
    path("p/<int:project_id>/lead/items/<int:item_id>/adjudicate/", lead.lead_adjudicate, name="lead_adjudicate"),
    path("p/<int:project_id>/lead/items/<int:item_id>/return/", lead.lead_return_to_pool, name="lead_return"),
    path("p/<int:project_id>/lead/items/<int:item_id>/review/", lead.lead_send_to_review, name="lead_send_to_review"),
    path("p/<int:project_id>/lead/events/<int:event_id>/undo/", lead.lead_undo, name="lead_undo"),
    path("p/<int:project_id>/lead/label-errors/", label_errors.label_errors, name="label_errors"),
    path("p/<int:project_id>/lead/label-errors/scan/", label_errors.label_errors_scan, name="label_errors_scan"),
    path(
        "p/<int:project_id>/lead/label-errors/scan/status/",
        label_errors.label_errors_scan_status,
        name="label_errors_scan_status",
    ),
    path(
        "p/<int:project_id>/lead/label-errors/<int:suspect_id>/decide/",
        label_errors.label_errors_decide,
        name="label_errors_decide",
    ),
    # Before the queues' route below, which would take "dead-letters" for a queue's name.
    path("p/<int:project_id>/lead/dead-letters/", autolabel.dead_letters, name="dead_letters"),
    path("p/<int:project_id>/lead/dead-letters/retry/", autolabel.dead_letters_retry, name="dead_letters_retry"),
    path("p/<int:project_id>/lead/<slug:queue>/", lead.lead_queue, name="lead_queue"),
    # Item browser (leads, ml)
    path("p/<int:project_id>/items/", items.item_browser, name="item_browser"),
    path("p/<int:project_id>/items/bulk/", items.item_bulk, name="item_bulk"),
    path("p/<int:project_id>/items/bulk/<int:action_id>/", items.item_bulk_confirm, name="item_bulk_confirm"),
    path("p/<int:project_id>/items/bulk/<int:action_id>/apply/", items.item_bulk_apply, name="item_bulk_apply"),
    path("p/<int:project_id>/items/bulk/<int:action_id>/undo/", items.item_bulk_undo, name="item_bulk_undo"),
    path("p/<int:project_id>/items/filters/", items.item_filter_save, name="item_filter_save"),
    path(
        "p/<int:project_id>/items/filters/<int:filter_id>/delete/", items.item_filter_delete, name="item_filter_delete"
    ),
    path("p/<int:project_id>/items/<int:item_id>/", items.item_detail, name="item_detail"),
    path("p/<int:project_id>/items/<int:item_id>/relabel/", items.item_relabel, name="item_relabel"),
    path("p/<int:project_id>/items/<int:item_id>/review/", items.item_to_review, name="item_to_review"),
    # Team (leads, ml)
    path("team/", team.team, name="team"),
    path("team/<int:user_id>/roles/", team.team_roles, name="team_roles"),
    path("team/<int:user_id>/active/", team.team_user_active, name="team_user_active"),
    path("p/<int:project_id>/members/", team.project_members, name="project_members"),
    path("p/<int:project_id>/members/<int:user_id>/remove/", team.project_member_remove, name="project_member_remove"),
    # Data in and out
    path("p/<int:project_id>/import/", data.import_upload, name="import_upload"),
    path("p/<int:project_id>/import/<int:job_id>/", data.import_status, name="import_status"),
    path("p/<int:project_id>/export/", data.export_page, name="export_page"),
    path("p/<int:project_id>/export/snapshots/<int:snapshot_id>/", data.export_snapshot, name="export_snapshot"),
    re_path(
        r"^p/(?P<project_id>\d+)/export/(?P<what>labels|predictions)\.(?P<fmt>csv|jsonl)$",
        data.export_download,
        name="export_download",
    ),
    # ML staff
    path("p/<int:project_id>/ml/", ml.ml_home, name="ml_home"),
    path("p/<int:project_id>/ml/rounds/", ml.ml_rounds, name="ml_rounds"),
    path("p/<int:project_id>/ml/rounds/start/", ml.ml_round_start, name="ml_round_start"),
    path("p/<int:project_id>/ml/rounds/retrain/", ml.ml_round_retrain, name="ml_round_retrain"),
    path("p/<int:project_id>/ml/rounds/final/", ml.ml_round_final, name="ml_round_final"),
    # Auto-labelling (ml), the final dataset
    path("p/<int:project_id>/ml/autolabel/", autolabel.autolabel_home, name="autolabel_home"),
    path("p/<int:project_id>/ml/autolabel/status/", autolabel.autolabel_status, name="autolabel_status"),
    path("p/<int:project_id>/ml/autolabel/gold/", autolabel.autolabel_gold, name="autolabel_gold"),
    path("p/<int:project_id>/ml/autolabel/split/", autolabel.autolabel_split, name="autolabel_split"),
    path("p/<int:project_id>/ml/autolabel/calibrate/", autolabel.autolabel_calibrate, name="autolabel_calibrate"),
    path("p/<int:project_id>/ml/autolabel/launch/", autolabel.autolabel_launch, name="autolabel_launch"),
    path("p/<int:project_id>/ml/autolabel/audit/", autolabel.autolabel_audit_refresh, name="autolabel_audit"),
    re_path(
        r"^p/(?P<project_id>\d+)/export/dataset\.(?P<fmt>csv|jsonl|parquet)$",
        autolabel.dataset_download,
        name="dataset_download",
    ),
    # REST (token auth)
    path("api/projects/<int:project_id>/rounds/", api.api_round_start, name="api_round_start"),
    path("api/rounds/<int:round_id>/", api.api_round, name="api_round"),
    path(
        "api/projects/<int:project_id>/calibrations/", api_autolabel.api_calibration_start, name="api_calibration_start"
    ),
    path("api/calibrations/<int:calibration_id>/", api_autolabel.api_calibration, name="api_calibration"),
    path("api/projects/<int:project_id>/autolabel/", api_autolabel.api_autolabel_start, name="api_autolabel_start"),
    path("api/autolabel/<int:run_id>/", api_autolabel.api_autolabel, name="api_autolabel"),
]
