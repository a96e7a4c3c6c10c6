from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0026_workclaim_eval_shard'),
    ]

    operations = [
        migrations.AlterField(
            model_name='workclaim',
            name='kind',
            field=models.CharField(choices=[('plan', 'Plan'), ('select', 'Select'), ('train_plan', 'Train Plan'), ('train', 'Train'), ('evaluate', 'Evaluate'), ('eval_shard', 'Eval Shard'), ('drive', 'Drive'), ('finish', 'Finish'), ('arms_eval', 'Arms Eval')], max_length=12),
        ),
    ]
