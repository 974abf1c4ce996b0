"""The model card (README.md) of a trained directory, written from its JSON records.

Every number on the card comes from ``training.json`` (written by :mod:`kernels.offline.train`)
or ``evaluation.json`` (written by :mod:`kernels.offline.evaluate`), so the card never drifts
from what the commands measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def exits_inline(tokens: list[list[Any]]) -> str:
    """Tokens with their exit loop as a superscript: ``def¹ add³``. A newline shows as ↵
    with the superscript after it, then breaks the line (indentation goes on the next)."""
    parts = []
    for text, exit_loop, *_ in tokens:
        sup = str(exit_loop).translate(SUPERSCRIPT)
        head, newline, tail = text.rpartition("\n")
        if newline:
            parts.append(f"{head.replace(chr(10), '↵')}↵{sup}\n{tail}")
        else:
            parts.append(f"{text}{sup}")
    return "".join(parts)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _command_note(training: dict[str, Any]) -> str:
    if "command_wall_time_s" not in training:
        return ""
    if training.get("resumed"):
        return (
            " (summed over the parts of a resumed run; its last command took "
            f"{training['command_wall_time_s']:.0f} s)"
        )
    return f" (the one command: {training['command_wall_time_s']:.0f} s)"


def render_card(training: dict[str, Any], evaluation: dict[str, Any], name: str) -> str:
    s, c = training["settings"], training["corpus"]
    n_loops = s["loops"]
    sources = ", ".join(f"{k} {v}" for k, v in c["documents_by_source"].items())
    wall = training["wall_time_s"]
    lines = [
        f"# {name}",
        "",
        "A small looped language model (Ouro architecture: shared layers applied "
        f"{n_loops} times, an exit gate after every loop) trained from scratch by this "
        "project's own `python -m kernels.offline.train`, so that the playground runs offline with "
        "a model whose per-token exits mean something. It writes Python-flavoured text; "
        "it is a demonstration of adaptive depth, not a useful code model.",
        "",
        "## Corpus",
        "",
        f"Python {c['python']}'s own standard library, read from the interpreter's files "
        "(nothing downloaded): the source of every pure-Python module (code, comments, "
        "docstrings) without test suites, codec tables and generated config; the reference-"
        "manual topics of `pydoc_data.topics`; and the title and summary of each work of "
        "`atlas/data/works.yaml`. Licence: PSF License Version 2 for the standard library "
        "and pydoc topics, MIT (this project) for the atlas text. See `kernels/corpus.py`.",
        "",
        f"- documents: {c['documents']} ({sources}), "
        f"{c['characters']:,} characters, sha256 `{c['sha256'][:16]}…`",
        f"- held-out split by document (seeded hash, {_pct(c['heldout_fraction'])} of the "
        "standard-library documents; the atlas text is always training text): "
        f"{c['heldout_documents']} documents, {training['heldout_tokens']:,} tokens; "
        f"training: {c['train_documents']} documents, {training['train_tokens']:,} tokens",
        f"- tokenizer: byte-level BPE, {s['vocab_size']} tokens, trained on the training "
        "split (`tokenizer.json`, `<|endoftext|>` = id 0 ends every document)",
        "",
        "## Model",
        "",
        f"- {training['parameters']:,} parameters, float32 "
        f"({s['num_hidden_layers']} shared layer(s) × {n_loops} loops, hidden {s['hidden_size']}, "
        f"SwiGLU {s['intermediate_size']}, {s['num_attention_heads']} heads, untied LM head)",
        f"- context: trained on windows of {s['seq_len']} tokens",
        '- files: `config.json` (Ouro format, `model_type: "ouro"`), `model.safetensors`, '
        "`tokenizer.json`; `training.json` and `evaluation.json` hold every number below",
        "",
        "## Training",
        "",
        f"- stage 1 (LM + gate, `sum_t p_t L_t - {s['beta']} H(p)`): "
        f"{s['stage1_steps']} steps × {s['batch_size']} × {s['seq_len']} tokens, AdamW, "
        f"lr {s['lr']} (warmup {s['warmup_steps']}, cosine to a tenth)",
        f"- stage 2 (gate only, LM frozen, BCE on sigmoid({s['gain_scale']:g} (I - "
        f"{s['gain_margin']:g})) from detached per-loop losses): {s['stage2_steps']} steps, "
        f"lr {s['gate_lr']}",
        f"- wall time on {training['threads']} CPU thread(s) ({training['device']}, a shared "
        f"2-core machine): data {wall.get('data_s', 0):.0f} s, stage 1 {wall['stage1_s']:.0f} s "
        f"({training['stage1_tokens_per_s']} tokens/s), stage 2 {wall['stage2_s']:.0f} s, "
        f"evaluation {wall.get('evaluation_s', 0):.0f} s; "
        f"{sum(wall.values()) / 60:.1f} min end to end" + _command_note(training),
        "",
        f"## Held-out evaluation ({evaluation['windows']} windows of "
        f"{evaluation['length']} tokens)",
        "",
        "Per-loop loss (every loop computed for every token, nats/token):",
        "",
        "| loop | " + " | ".join(str(t + 1) for t in range(n_loops)) + " |",
        "| --- |" + " --- |" * n_loops,
        "| loss | " + " | ".join(f"{v:.4f}" for v in evaluation["loss_per_loop"]) + " |",
        "",
        "Q-exit with the real skipping engine (best-available KV), against full depth "
        f"(loss {evaluation['loss_full_depth']:.4f}):",
        "",
        "| q | avg exit loop | exit loops 1…T | loss | rise | executed loop-tokens | "
        "sequences with ≥ 3 depths | loss, select policy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for q, r in evaluation["q"].items():
        hist = " / ".join(_pct(v) for v in r["exit_histogram"])
        lines.append(
            f"| {q} | {r['avg_exit']:.2f} | {hist} | {r['loss']:.4f} | {_pct(r['loss_rise'])} | "
            f"{_pct(r['executed_fraction'])} | {_pct(r['sequences_with_3plus_depths'])} | "
            f"{r['loss_select_policy']:.4f} |"
        )
    lines += ["", "## Targets", ""]
    for name_, t in evaluation["targets"].items():
        bound = f" (bound {t['bound']})" if "bound" in t else ""
        lines.append(
            f"- {'met' if t['met'] else '**missed**'}: {name_} — measured {t['measured']}{bound}"
        )
    ctx = evaluation.get("context")
    if ctx:
        lines += [
            "",
            "## The same token, different depths (q = 0.7)",
            "",
            f"Of {ctx['frequent_tokens']} token strings seen at least 20 times in the held-out "
            f"windows, {ctx['frequent_tokens_with_2plus_depths']} exit at two or more "
            "different loops. The most spread-out ones, each with a shallow and a deep context "
            "(`⟦token⟧` marks it):",
            "",
        ]
        for ex in ctx["examples"]:
            depths = ", ".join(f"loop {k}: {v}" for k, v in ex["depths"].items())
            lines.append(f"- `{ex['token']!r}` ({ex['count']} times; {depths})")
            for cx in ex["contexts"]:
                text = f"{cx['before']}⟦{ex['token']}⟧{cx['after']}"
                lines.append(f"  - exit {cx['exit']}: `{text!r}`")
    gens = evaluation.get("generations")
    if gens:
        lines += [
            "",
            "## Greedy generations (q = 0.7), every token's exit loop as a superscript",
            "",
        ]
        for g in gens:
            lines += [
                f"Prompt `{g['prompt']!r}`:",
                "",
                "```text",
                exits_inline(g["tokens"]),
                "```",
                "",
            ]
    lines += [
        "## Reproduce",
        "",
        "```sh",
        "python -m kernels.offline.train   # corpus -> tokenizer -> stage 1 -> stage 2 -> this dir",
        f"python -m kernels.offline.evaluate kernels/models/{name}   # evaluation.json + this card",
        "```",
        "",
        "The evaluation is deterministic (fixed windows, "
        f"{evaluation['threads']} thread(s), greedy); it rebuilds the held-out split from the "
        "running interpreter and refuses held-out text with another digest.",
        "",
    ]
    return "\n".join(lines)


def write_card(path: Path) -> Path:
    training = json.loads((path / "training.json").read_text())
    evaluation = json.loads((path / "evaluation.json").read_text())
    card = path / "README.md"
    card.write_text(render_card(training, evaluation, path.name))
    return card
