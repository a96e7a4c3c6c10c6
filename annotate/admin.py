from __future__ import annotations

from django.contrib import admin

from annotate import models

for model in (
    models.Project,
    models.Label,
    models.ImportJob,
    models.Item,
    models.Round,
    models.BatchItem,
    models.Lease,
    models.Annotation,
    models.Skip,
    models.Adjudication,
    models.AdapterVersion,
    models.ScoreShard,
    models.Prediction,
):
    admin.site.register(model)
