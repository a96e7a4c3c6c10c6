# Issue 31: the calibration split, delta, calibration claims, the per-worker shard cap.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0012_history_item_event'),
    ]

    operations = [
        migrations.AddField(
            model_name='autolabelrun',
            name='max_shards_per_worker',
            field=models.PositiveSmallIntegerField(default=2),
        ),
        migrations.AddField(
            model_name='autolabelshard',
            name='node',
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name='calibration',
            name='attempts',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='calibration',
            name='delta',
            field=models.FloatField(default=0.05),
        ),
        migrations.AddField(
            model_name='calibration',
            name='n_calibration',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='calibration',
            name='worker',
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name='golditem',
            name='purpose',
            field=models.CharField(choices=[('gold', 'Gold'), ('calibration', 'Calibration')], default='gold', max_length=12),
        ),
        migrations.AlterField(
            model_name='batchitem',
            name='source',
            field=models.CharField(choices=[('active', 'Active'), ('random', 'Random'), ('cold', 'Cold'), ('cascade', 'Cascade'), ('audit', 'Audit'), ('gold', 'Gold'), ('calib', 'calibration')], max_length=8),
        ),
    ]
