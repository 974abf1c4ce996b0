"""What belongs in the atlas: the scope statement that the intake page shows and that
reviewers apply (``atlas/data/README.md`` says the same in its own words), with near
misses from the public lists' candidates as examples of where the line runs."""

from dataclasses import dataclass

BELONGS = (
    "looped and recurrent-depth models, whose layers or blocks are run again with the same weights",
    "weight-tied stacks, where several layers share one set of weights",
    "equilibrium and fixed-point layers that iterate a block until its state settles",
    "adaptive depth over shared blocks: halting, exit gates, routers choosing how many "
    "times a block runs",
    "the analysis, theory, training, serving and applications of all of these",
)
DOES_NOT_BELONG = (
    "ordinary recurrent networks over time (RNNs, LSTMs, GRUs, state-space models "
    "stepping along a sequence)",
    "deep models whose layers are untied, however deep",
    "works that only cite looping, or use a looped model as one baseline among others",
)
REJECT_REASONS = (
    ("Out of scope", "the work does not reuse weights across depth (above)"),
    ("Duplicate", "the same paper is already in the atlas or proposed, under another title"),
    ("Not a paper", "a list, a repository or a talk with no work of its own to classify"),
)


@dataclass(frozen=True)
class NearMiss:
    title: str
    accepted: bool
    why: str


NEAR_MISSES = (
    NearMiss(
        "Jina-OCR-v1: Efficient Document Parsing with Speculative Decoding and Dense "
        "Verifiable Rewards",
        False,
        "Its speculative-decoding drafter runs one block again for each future token: the "
        "weights are reused along the output, not across the model's depth.",
    ),
    NearMiss(
        "RSF-GLLM: Bridging the Semantic Gap in Multi-Hop Knowledge Graph QA via Recurrent "
        "Soft-Flow and Decoupled LLM Generation",
        False,
        "Its recurrence is a GRU stepping a query across knowledge-graph hops, an ordinary "
        "recurrent network over a sequence; the language model that answers is untied.",
    ),
    NearMiss(
        "RAFT: Recurrent All-Pairs Field Transforms for Optical Flow",
        True,
        "Called recurrent, and in: one update operator with shared weights is iterated to "
        "refine a single flow estimate, which is recurrence over depth, not over time.",
    ),
)
