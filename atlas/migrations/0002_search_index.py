"""A GIN index on the search column, on PostgreSQL only (SQLite searches with LIKE)."""

from django.db import migrations

INDEX = "atlas_work_search_gin"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX {INDEX} ON atlas_work USING gin (search_document)")


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("atlas", "0001_initial")]
    operations = [migrations.RunPython(create_index, drop_index, elidable=False)]
