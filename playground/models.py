"""A playground run (one prompt through one model) and its per-position token records.

The contract shared by the API, the SSE stream and the page:

- ``Run``: ``id`` (UUID), ``prompt``, ``model`` (a name in ``PLAYGROUND_MODELS``),
  ``params`` (the validated ``kernels.request.GenerationParams`` fields plus
  ``extrapolate``), ``trained_loops`` (the model's T at submit), ``status``
  (queued → running → done | cancelled | failed), ``error``, ``cancel_requested``,
  ``created_at`` / ``started_at`` / ``finished_at``, ``heartbeat_at`` (written by the
  worker while it runs; a stale one means the worker died), ``worker`` (its hostname),
  ``stats`` (the engine's ``stream.summary``), ``visitor`` (who submitted it) and
  ``address`` (the client address it came from), both for the active-run limits,
  ``owner_hash`` (the hash of what stopping it needs: the creator's session secret or
  the API's cancel token; never shown) and ``compare_of``
  (set on a sibling started by "Compare with…": the run it is compared with; a group of
  siblings holds one of its visitor's active-run slots, see ``services.run_compare_submit``).
- ``RunToken``: one per position, prompt then generated, unique per ``(run, position)``:
  ``phase``, ``token_id``, ``text``, ``exit_loop``, ``loops_computed`` and ``data``, the
  full ``TokenEvent.to_dict()`` (per-loop λ, p, cumulative, KL, top-k; work counters).
"""

from __future__ import annotations

import uuid

from django.db import models
from django.urls import reverse


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    ACTIVE = (Status.QUEUED, Status.RUNNING)
    FINISHED = (Status.DONE, Status.CANCELLED, Status.FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    prompt = models.TextField()
    model = models.CharField(max_length=100)
    params = models.JSONField(default=dict)
    trained_loops = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status, default=Status.QUEUED)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    stats = models.JSONField(default=dict, blank=True)
    visitor = models.CharField(max_length=100, blank=True)  # playground.visitors
    address = models.CharField(max_length=100, blank=True)  # visitors.visitor_address
    owner_hash = models.CharField(max_length=64, blank=True)  # sha256 of the stop secret
    compare_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="siblings"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status"], name="playground_run_status"),
            models.Index(fields=["visitor", "status"], name="playground_run_visitor"),
            models.Index(fields=["address", "status"], name="playground_run_address"),
        ]

    def __str__(self) -> str:
        prompt = self.prompt if len(self.prompt) <= 40 else self.prompt[:39] + "…"
        return f"{self.model} run {str(self.id)[:8]} ({self.status}): {prompt!r}"

    def get_absolute_url(self) -> str:
        return reverse("playground:run", kwargs={"run_id": self.id})

    def get_events_url(self) -> str:
        return reverse("playground:run-events", kwargs={"run_id": self.id})

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED


class RunToken(models.Model):
    class Phase(models.TextChoices):
        PROMPT = "prompt"
        GENERATED = "generated"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tokens")
    position = models.PositiveIntegerField()
    phase = models.CharField(max_length=10, choices=Phase)
    token_id = models.IntegerField()
    text = models.TextField(blank=True)
    exit_loop = models.PositiveSmallIntegerField()
    loops_computed = models.PositiveSmallIntegerField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="playground_token_position")
        ]

    def __str__(self) -> str:
        return f"{self.position}: {self.text!r} (exit {self.exit_loop})"

    def get_absolute_url(self) -> str:
        return f"{self.run.get_absolute_url()}#t{self.position}"

    @classmethod
    def from_event(cls, run: Run, event: dict) -> RunToken:
        """The unsaved row of one storable token event (``services.event_storable``)."""
        return cls(
            run=run,
            position=event["position"],
            phase=event["phase"],
            token_id=event["token_id"],
            text=event["text"],
            exit_loop=event["exit_loop"],
            loops_computed=event["loops_computed"],
            data=event,
        )
