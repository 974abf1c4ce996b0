from django.contrib import admin

from playground.models import Run, RunToken


class RunTokenInline(admin.TabularInline):
    model = RunToken
    fields = ("position", "phase", "token_id", "text", "exit_loop", "loops_computed")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "model", "status", "created_at", "finished_at", "short_prompt")
    list_filter = ("status", "model")
    search_fields = ("prompt", "id")
    readonly_fields = ("id", "created_at", "started_at", "finished_at", "heartbeat_at")
    raw_id_fields = ("compare_of",)  # a select of every run would not scale
    inlines = [RunTokenInline]

    @admin.display(description="prompt")
    def short_prompt(self, run: Run) -> str:
        return run.prompt[:60]


@admin.register(RunToken)
class RunTokenAdmin(admin.ModelAdmin):
    list_display = ("run", "position", "phase", "text", "exit_loop", "loops_computed")
    list_filter = ("phase",)
    raw_id_fields = ("run",)
