"""Issue 32, problem 8: a lead may send items to review and assign them to an annotator (history
kinds "review" and "assign"); an assigned lease is kept for its annotator."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0012_history_item_event'),
    ]

    operations = [
        migrations.AddField(
            model_name='lease',
            name='assigned',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AlterField(
            model_name='itemevent',
            name='kind',
            field=models.CharField(choices=[('label', 'Label'), ('revision', 'Revision'), ('skip', 'Skip'), ('decision', 'Decision'), ('return', 'Return'), ('review', 'Review'), ('assign', 'Assign'), ('undo', 'Undo')], max_length=10),
        ),
    ]
