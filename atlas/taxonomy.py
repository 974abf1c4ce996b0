"""The atlas's controlled vocabularies (one per facet).

The slugs are the stored values and the API's; labels and descriptions are for
people. Every facet of a work must take its values from here; the loader refuses
anything else. Single-valued facets include ``unspecified`` where the source may
not say: classifying never guesses.
"""

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Term:
    slug: str
    label: str
    description: str = ""


@dataclass(frozen=True)
class Facet:
    name: str
    label: str
    multi: bool
    terms: tuple[Term, ...]

    @cached_property
    def slugs(self) -> tuple[str, ...]:
        return tuple(term.slug for term in self.terms)

    @cached_property
    def order(self) -> dict[str, int]:
        """Each slug's place in the vocabulary, to sort a work's values by."""
        return {slug: i for i, slug in enumerate(self.slugs)}

    @property
    def choices(self) -> list[tuple[str, str]]:
        return [(term.slug, term.label) for term in self.terms]

    def label_of(self, slug: str) -> str:
        for term in self.terms:
            if term.slug == slug:
                return term.label
        raise KeyError(f"{slug!r} is not a {self.name} value")


UNSPECIFIED = Term("unspecified", "Unspecified", "the source does not say")

RECURRENCE_FAMILY = Facet(
    "recurrence_family",
    "Recurrence family",
    multi=False,
    terms=(
        Term(
            "universal",
            "Universal / weight-tied stack",
            "the whole stack (or one block) shared across depth, UT/ALBERT-style, "
            "with or without halting",
        ),
        Term(
            "looped-lm",
            "Looped language model",
            "whole decoder stack applied T times for language modelling (Ouro-style LoopLM)",
        ),
        Term(
            "prelude-core-coda",
            "Prelude–recurrent core–coda",
            "untied entry/exit layers around a looped core (Huginn-style sandwich), "
            "incl. retrofits into that shape",
        ),
        Term(
            "partial-loop",
            "Partial / middle-layer looping",
            "only selected layers repeated inside an otherwise ordinary model "
            "(ETD, UpLoop, selective looping)",
        ),
        Term(
            "token-routed",
            "Token-routed recursion",
            "per-token recursion depth chosen by a router (Mixture-of-Recursions, "
            "token-choice/expert-choice)",
        ),
        Term(
            "fixed-point",
            "Fixed-point / equilibrium",
            "iterate to (or solve for) a fixed point: DEQ, contractive/ODE-style updates, "
            "convergence-defined depth",
        ),
        Term(
            "hierarchical",
            "Hierarchical / multi-module recursion",
            "several interacting recurrent modules at different rates (HRM, TRM, "
            "two-scale designs)",
        ),
        Term(
            "parallel-loop",
            "Parallelised loops",
            "loops of different depths computed in one pass or diagonally (PLT, LoopFold, "
            "wavefront, dual-slot)",
        ),
        Term(
            "cross-token",
            "Cross-token recurrence",
            "deep state of earlier tokens fed into later tokens (latent recurrent / temporal "
            "middle-layer recurrence, continuous pondering)",
        ),
        Term(
            "looped-moe",
            "Looped mixture-of-experts",
            "recurrence combined with sparse experts as the central design",
        ),
        Term(
            "analysis",
            "Analysis / theory only",
            "no new architecture: mechanistic, theoretical, scaling-law or evaluation "
            "studies of existing looped models",
        ),
    ),
)

DEPTH_CONTROL = Facet(
    "depth_control",
    "Depth control",
    multi=False,
    terms=(
        Term("fixed", "Fixed", "one trained depth"),
        Term(
            "elastic",
            "Elastic",
            "any depth chosen by the user or a budget; one checkpoint, several budgets",
        ),
        Term("halting", "Halting", "ACT/PonderNet-style learned cumulative halting"),
        Term(
            "exit-gate",
            "Exit gate",
            "per-loop learned exit gate, Q-exit on cumulative probability",
        ),
        Term("router", "Router", "a router assigns each token's depth up front"),
        Term(
            "convergence",
            "Convergence",
            "training-free: stop when the state/output settles — KL, residual, entropy, confidence",
        ),
        UNSPECIFIED,
    ),
)

DEPTH_GRANULARITY = Facet(
    "depth_granularity",
    "Depth granularity",
    multi=False,
    terms=(
        Term("token", "Token"),
        Term("sequence", "Sequence"),
        Term("layer", "Layer"),
        Term("step", "Step", "per denoising/RL/environment step"),
        Term("none", "None"),
        UNSPECIFIED,
    ),
)

KV_STRATEGY = Facet(
    "kv_strategy",
    "KV strategy",
    multi=False,
    terms=(
        Term("per-loop", "Per-loop", "separate KV for every loop, T-fold cache"),
        Term(
            "shared",
            "Shared",
            "one cache reused across loops: first-loop, last-loop broadcast, or single "
            "shared cache",
        ),
        Term(
            "best-available",
            "Best-available",
            "exited tokens reuse the deepest KV they computed",
        ),
        Term("recursion-wise", "Recursion-wise", "KV only for tokens active at that depth"),
        Term("compressed", "Compressed", "latent/low-rank/quantized/residual-coded KV"),
        Term("windowed", "Windowed", "exact KV only for a recent window in later loops"),
        Term(
            "no-kv",
            "No KV",
            "non-autoregressive, encoder-only, vision or non-attention settings",
        ),
        UNSPECIFIED,
    ),
)

MODALITY = Facet(
    "modality",
    "Modality",
    multi=True,
    terms=(
        Term("language", "Language"),
        Term("vision", "Vision"),
        Term("vision-language", "Vision-language"),
        Term("audio-speech", "Audio / speech"),
        Term("rl-control", "RL / control"),
        Term("recommendation", "Recommendation"),
        Term("biology", "Biology"),
        Term("tabular", "Tabular"),
        Term("diffusion-generation", "Diffusion / generation"),
        Term("algorithmic", "Algorithmic", "synthetic reasoning tasks, puzzles, ARC, Sudoku"),
        Term("theory", "Theory"),
    ),
)

CONTRIBUTION = Facet(
    "contribution",
    "Contribution",
    multi=True,
    terms=(
        Term("architecture", "Architecture"),
        Term("training-recipe", "Training recipe"),
        Term("retrofit", "Retrofit", "converting a pretrained non-looped model"),
        Term(
            "inference-serving",
            "Inference / serving",
            "decoding, batching, speculative, caching",
        ),
        Term("compression", "Compression", "quantization, KV compression"),
        Term("analysis", "Analysis", "mechanistic/interpretability/evaluation"),
        Term("theory", "Theory"),
        Term("scaling-law", "Scaling law"),
        Term("model-release", "Model release"),
        Term("safety", "Safety"),
    ),
)

TRAINING_REGIME = Facet(
    "training_regime",
    "Training regime",
    multi=False,
    terms=(
        Term("from-scratch", "From scratch"),
        Term("retrofit", "Retrofit"),
        Term("training-free", "Training-free"),
        UNSPECIFIED,
    ),
)

FACETS: tuple[Facet, ...] = (
    RECURRENCE_FAMILY,
    DEPTH_CONTROL,
    DEPTH_GRANULARITY,
    KV_STRATEGY,
    MODALITY,
    CONTRIBUTION,
    TRAINING_REGIME,
)
FACETS_BY_NAME: dict[str, Facet] = {facet.name: facet for facet in FACETS}
SINGLE_FACETS: tuple[Facet, ...] = tuple(f for f in FACETS if not f.multi)
MULTI_FACETS: tuple[Facet, ...] = tuple(f for f in FACETS if f.multi)
