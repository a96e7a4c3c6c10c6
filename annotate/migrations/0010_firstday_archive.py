from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0009_round_config"),
    ]

    operations = [
        migrations.AddField(
            model_name="project",
            name="archived_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
