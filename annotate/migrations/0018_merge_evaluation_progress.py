from django.db import migrations


class Migration(migrations.Migration):
    """Merges helper branches' migrations: the evaluation progress fields (0016_round_evaluation_progress)
    with the bulk actions, calibration split and label suspects line (0017_label_suspect)."""

    dependencies = [
        ("annotate", "0016_round_evaluation_progress"),
        ("annotate", "0017_label_suspect"),
    ]

    operations = []
