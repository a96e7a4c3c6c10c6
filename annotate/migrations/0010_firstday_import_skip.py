from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0010_firstday_archive"),
    ]

    operations = [
        migrations.AddField(
            model_name="importjob",
            name="skip_duplicates",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="importjob",
            name="rows_skipped",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
