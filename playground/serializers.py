"""The runs API's shapes: what a submit accepts and what a run looks like as JSON."""

from rest_framework import serializers

from playground.models import Run
from playground.services import EXIT_RULES, KV_POLICIES, MAX_NEW_TOKENS, MAX_PROMPT_CHARS


class RunCreateSerializer(serializers.Serializer):
    """``POST /api/v1/runs/``: the types and fixed bounds (so the schema shows them); the
    rules that depend on the model (loops up to T, or 2·T with ``extrapolate``; prompt
    length in tokens) are checked by ``services.run_params_clean``."""

    prompt = serializers.CharField(max_length=MAX_PROMPT_CHARS, trim_whitespace=False)
    model = serializers.CharField(required=False, max_length=100)
    exit_rule = serializers.ChoiceField(EXIT_RULES, default="q-exit")
    q = serializers.FloatField(default=0.7, min_value=0.0, max_value=1.0)
    kl_threshold = serializers.FloatField(default=1e-3, min_value=0.0)
    fixed_loops = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    loops = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    extrapolate = serializers.BooleanField(default=False)
    kv_policy = serializers.ChoiceField(KV_POLICIES, default="best-available")
    max_new_tokens = serializers.IntegerField(default=64, min_value=0, max_value=MAX_NEW_TOKENS)
    temperature = serializers.FloatField(default=0.0, min_value=0.0)
    top_p = serializers.FloatField(default=1.0, min_value=0.0, max_value=1.0)
    seed = serializers.IntegerField(default=0, min_value=0, max_value=2**63 - 1)
    top_k = serializers.IntegerField(default=5, min_value=0, max_value=20)


class RunSerializer(serializers.ModelSerializer):
    url = serializers.CharField(source="get_absolute_url", read_only=True)
    api_url = serializers.SerializerMethodField()
    events_url = serializers.CharField(source="get_events_url", read_only=True)
    tokens_url = serializers.SerializerMethodField()
    cancel_url = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = (
            "id",
            "url",
            "api_url",
            "events_url",
            "tokens_url",
            "cancel_url",
            "status",
            "prompt",
            "model",
            "trained_loops",
            "params",
            "stats",
            "error",
            "cancel_requested",
            "created_at",
            "started_at",
            "finished_at",
        )
        read_only_fields = fields

    def get_api_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.id}/"

    def get_tokens_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.id}/tokens/"

    def get_cancel_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.id}/cancel/"
