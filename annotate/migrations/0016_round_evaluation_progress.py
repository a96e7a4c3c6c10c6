# Issue 32, problem 5: the evaluation's progress and the ETA's measured rate on the round.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("annotate", "0012_history_item_event")]

    operations = [
        migrations.AddField(model_name="round", name="eval_items_total", field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name="round", name="eval_items_done", field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name="round", name="unit_seconds", field=models.FloatField(default=0.0)),
        migrations.AddField(model_name="round", name="train_runs_seconds", field=models.FloatField(default=0.0)),
        migrations.AddField(model_name="round", name="train_runs_steps", field=models.PositiveIntegerField(default=0)),
    ]
