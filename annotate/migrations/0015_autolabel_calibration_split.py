# Issue 31: the calibration split, delta, calibration claims, the per-worker shard cap, batch-API answers.

import django.db.models.deletion
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
        migrations.CreateModel(
            name='BatchApiAnswer',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('prompt_version', models.CharField(max_length=32)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('item', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='batch_api_answers', to='annotate.item')),
                ('label', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to='annotate.label')),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='batch_api_answers', to='annotate.project')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('item', 'prompt_version'), name='batch_api_answer_unique')],
            },
        ),
    ]
