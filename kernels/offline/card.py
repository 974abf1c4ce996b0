"""The model card (README.md) of a trained directory, written from its JSON records.

Every number on the card comes from ``training.json`` (written by :mod:`kernels.offline.train`)
or ``evaluation.json`` (written by :mod:`kernels.offline.evaluate`), so the card never drifts
from what the commands measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernels.offline import hops

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


def _training_lines(training: dict[str, Any]) -> list[str]:
    s, wall = training["settings"], training["wall_time_s"]
    return [
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
        *_cpu_lines(training),
        "",
    ]


def _cpu_lines(training: dict[str, Any]) -> list[str]:
    """The process's CPU time (user + system): with one thread, what the training takes
    alone on a core, whatever else shared the machine while it ran."""
    if "cpu_time_s" not in training:
        return []
    cpu = training["cpu_time_s"]
    return [
        f"- CPU time of the training process (user + system, {training['threads']} thread(s), "
        f"validation included): stage 1 {cpu['stage1_s']:.0f} s, stage 2 "
        f"{cpu['stage2_s']:.0f} s; {training['train_cpu_time_s'] / 60:.1f} min"
    ]


def _model_lines(training: dict[str, Any]) -> list[str]:
    s = training["settings"]
    return [
        f"- {training['parameters']:,} parameters, float32 "
        f"({s['num_hidden_layers']} shared layer(s) × {s['loops']} loops, "
        f"hidden {s['hidden_size']}, SwiGLU {s['intermediate_size']}, "
        f"{s['num_attention_heads']} heads, untied LM head)",
    ]


def _target_lines(targets: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["", "## Targets", ""]
    for name, t in targets.items():
        bound = f" (bound {t['bound']})" if "bound" in t else ""
        lines.append(
            f"- {'met' if t['met'] else '**missed**'}: {name} — measured {t['measured']}{bound}"
        )
    return lines


def _reproduce_lines(name: str, flags: str) -> list[str]:
    return [
        "## Reproduce",
        "",
        "```sh",
        f"python -m kernels.offline.train{flags}   # data -> stage 1 -> stage 2 -> this dir",
        f"python -m kernels.offline.evaluate kernels/models/{name}   # evaluation.json + this card",
        "```",
        "",
    ]


def render_card(training: dict[str, Any], evaluation: dict[str, Any], name: str) -> str:
    if training["settings"].get("task", "text") != "text":
        return render_task_card(training, evaluation, name)
    s, c = training["settings"], training["corpus"]
    n_loops = s["loops"]
    sources = ", ".join(f"{k} {v}" for k, v in c["documents_by_source"].items())
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
        "and pydoc topics, MIT (this project) for the atlas text. See `kernels/offline/corpus.py`.",
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
        *_model_lines(training),
        f"- context: trained on windows of {s['seq_len']} tokens",
        '- files: `config.json` (Ouro format, `model_type: "ouro"`), `model.safetensors`, '
        "`tokenizer.json`; `training.json` and `evaluation.json` hold every number below",
        "",
        *_training_lines(training),
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
    lines += _target_lines(evaluation["targets"])
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
        *_reproduce_lines(name, ""),
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
    if "exit_by_level" in evaluation:
        svg = exit_svg(evaluation["exit_by_level"], evaluation["difficulty"])
        (path / "exit_by_difficulty.svg").write_text(svg)
    return card


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _task_intro(s: dict[str, Any], n_loops: int) -> list[str]:
    """What the task model does and why its answers need loops, then its task section."""
    model = (
        f"by a small looped model (Ouro architecture, {n_loops} loops, an exit gate after every "
        "loop) trained from scratch by this project's own "
        f"`python -m kernels.offline.train --task {s['task']}`."
    )
    scored = (
        "Only the answer's positions are scored. The other positions' gates are labelled by "
        "what their exit costs the answer: the answer reads their K/V at deeper loops, and "
        "under best-available KV an exited position's deeper K/V never exist, so stage two "
        "runs the model with them stopping after each loop k in turn (the answer at full "
        "depth) and they stop where the answer's loss stops falling by more than the margin."
    )
    if s["task"] == "hops":
        return [
            f"Pointer chasing over {s['symbols']} letters {model} A query asks for the letter "
            "reached after k hops along the listed pairs. A hop cannot be looked ahead across: "
            "the letter to look up next is known only once the previous lookup is done, so each "
            "hop needs about one loop, and a query's exit loop follows its hops.",
            "",
            "## Task",
            "",
            f"Prompt `{hops.example_prompts(s['symbols'], range(1, 2))[0]}`: the pairs of a "
            f"successor function (`ac`: a is followed by c; one cycle through the {s['symbols']} "
            "letters, listed in random order), `;`, then a query `{start}{hops}=`; the answer is "
            "one letter and a newline. Training problems ask "
            f"{s['queries']} queries each (the next one after the previous answer's newline), "
            f"their hops drawn 1…{s['max_hops']} equally often (stage one starts on 1 hop and "
            f"adds the next every {s['curriculum_steps']} steps); held-out problems come from "
            f"seeds no training batch uses. {scored}"
            + (
                " In stage one, loop t of an answer is trained on the letter t − 1 hops along "
                "(at most the query's hops): the loops learn one hop each; stage two labels an "
                "answer's gates by its true gains."
                if s.get("loop_targets")
                else ""
            )
            + (
                f" From stage one's step {s['gate_warmup_steps']} on, "
                f"{s['context_exits']:.0%} of the rows have their context stop after a loop "
                f"drawn from 2…{n_loops - 1} (best-available KV, as the engine runs it), so the "
                "answer's deeper loops learn to read the context's shallower K/V."
                if s.get("context_exits")
                else ""
            )
            + " See `kernels/offline/hops.py`.",
            "",
        ]
    digits = s["digits"]
    return [
        f"{digits}-digit addition, answered most significant digit first, {model} A digit "
        "depends on carries from columns the model has not written yet.",
        "",
        "## Task",
        "",
        f"Prompt `{'1' * digits}+{'2' * digits}=`, answer the {digits + 1}-digit sum and a "
        "newline (byte tokens, fixed width, zero padded). Problems are generated (nothing "
        "downloaded), each with a chosen longest carry chain (a column summing to ≥ 10, then "
        f"columns summing to 9): training draws 0…{s['max_chain']} uniformly; held-out "
        f"problems come from seeds no training batch uses. {scored} "
        "See `kernels/offline/addition.py`.",
        "",
    ]


def render_task_card(training: dict[str, Any], evaluation: dict[str, Any], name: str) -> str:
    """The card of a task model (:mod:`kernels.offline.tasks`)."""
    s, e = training["settings"], evaluation
    n_loops, level = s["loops"], e["difficulty"]
    fixed, ext = e["accuracy_fixed_depth"], e["extrapolation"]
    unit = "query" if s["task"] == "hops" else "sum"
    by_level = e["accuracy_by_level_full_depth"]
    lines = [
        f"# {name}",
        "",
        *_task_intro(s, n_loops),
        "## Model",
        "",
        *_model_lines(training),
        '- files: `config.json` (Ouro format, `model_type: "ouro"`, byte vocabulary, newline '
        "= EOS), `model.safetensors`; `training.json` and `evaluation.json` hold every number",
        "",
        *_training_lines(training),
        f"## Held-out evaluation ({e['problems']} problems, {e['answers']} answers, {level} "
        f"{e['levels'][0]}…{e['levels'][1]})",
        "",
        f"Exact match (each {unit} answered right) at each fixed depth, the real engine:",
        "",
        _row(["loops", *range(1, n_loops + 1)]),
        "| --- |" + " --- |" * n_loops,
        _row(["exact match", *(_pct(v) for v in fixed)]),
        "",
        f"Full depth by the answer's {level}:",
        "",
        _row([level, *by_level]),
        "| --- |" + " --- |" * len(by_level),
        _row(["exact match", *(_pct(v) for v in by_level.values())]),
        "",
        "Q-exit (best-available KV; executed = token-loops run, prompt included, over full "
        f"depth's; full depth {_pct(e['accuracy_full_depth'])}):",
        "",
        "| q | exact match | avg exit loop (answer) | avg exit loop (prompt) | executed "
        "token-loops |",
        "| --- | --- | --- | --- | --- |",
    ]
    for q, r in e["q"].items():
        mark = " (default)" if float(q) == e["default_q"] else ""
        lines.append(
            f"| {q}{mark} | {_pct(r['accuracy'])} | {r['avg_exit']:.2f} | "
            f"{r['avg_exit_context']:.2f} | {_pct(r['executed_fraction'])} |"
        )
    lines += [
        "",
        f"Exit depth tracks difficulty (q = {e['default_q']}): the mean exit loop of an answer "
        f"position by its {level} (plot: `exit_by_difficulty.svg`):",
        "",
        f"| {level} | answer positions | mean exit loop |",
        "| --- | --- | --- |",
        *(
            f"| {r['level']} | {r['positions']} | {r['mean_exit']:.2f} |"
            for r in e["exit_by_level"]
        ),
        "",
        f"![mean exit loop by {level}](exit_by_difficulty.svg)",
        "",
        f"Depth extrapolation: exact match with k loops (k > {n_loops}: the engine run with "
        f"more loops than trained), on {ext['problems']} problems with {level} "
        f"{ext['levels'][0]}…{ext['levels'][1]}, beyond any trained, next to the held-out "
        "trained ones:",
        "",
        _row(["loops", *range(1, 2 * n_loops + 1)]),
        "| --- |" + " --- |" * (2 * n_loops),
        _row([f"longer {level}", *(_pct(v) for v in ext["accuracy_by_loops"])]),
        _row([f"trained {level}", *(_pct(v) for v in ext["trained_levels_accuracy_by_loops"])]),
    ]
    lines += _target_lines(e["targets"])
    if e["examples"]:
        lines += [
            "",
            f"## Greedy answers (q = {e['default_q']}), each token with the exit loop of the "
            "position that wrote it as a superscript",
            "",
        ]
        for ex in e["examples"]:
            text = exits_inline([[c, x] for c, x in zip(ex["text"], ex["exits"], strict=False)])
            lines.append(f"- `{ex['prompt']}` → `{text.strip()}`")
        lines.append("")
    lines += [
        "",
        *_reproduce_lines(name, f" --task {s['task']}"),
        f"The evaluation is deterministic ({e['threads']} thread(s), generated problems, greedy).",
        "",
    ]
    return "\n".join(lines)


def exit_svg(
    rows: list[dict[str, Any]], difficulty: str, width: int = 420, height: int = 240
) -> str:
    """A bar chart of the mean exit loop by difficulty (carry chain, hops), as a standalone
    SVG (no plotting library: the card is rendered offline from JSON)."""
    top = max(r["mean_exit"] for r in rows)
    left, bottom, bar = 40, height - 30, (width - 50) / len(rows)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="14">mean exit loop of an answer position by {difficulty}</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{width - 10}" y2="{bottom}" stroke="#444"/>',
    ]
    for i, r in enumerate(rows):
        h = (bottom - 30) * r["mean_exit"] / top
        x = left + i * bar + 4
        parts += [
            f'<rect x="{x:.1f}" y="{bottom - h:.1f}" width="{bar - 8:.1f}" height="{h:.1f}" '
            'fill="#4c72b0"/>',
            f'<text x="{x + (bar - 8) / 2:.1f}" y="{bottom - h - 4:.1f}" '
            f'text-anchor="middle">{r["mean_exit"]:.2f}</text>',
            f'<text x="{x + (bar - 8) / 2:.1f}" y="{bottom + 14}" '
            f'text-anchor="middle">{r["level"]}</text>',
        ]
    parts.append(f'<text x="{width / 2}" y="{height - 2}" text-anchor="middle">{difficulty}</text>')
    return "\n".join([*parts, "</svg>", ""])
