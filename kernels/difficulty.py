"""What makes an answer position of a task model hard, read from its text (torch-free).

The task generators and their evaluation count exits by these difficulties, and the
playground labels a run's tokens with them, so a deep position shows why it is deep:
the carry chain into a sum digit's column (:mod:`kernels.offline.addition`), the hops a
query asks for (:mod:`kernels.offline.hops`).
"""

from __future__ import annotations

import re

SUM = re.compile(r"(\d+)\+(\d+)=")
QUERY = re.compile(r"^([a-z])(\d)=", re.MULTILINE)


def carry_chains(a: int, b: int, digits: int) -> list[int]:
    """Per answer digit (most significant first, ``digits + 1`` of them): the length of the
    carry chain into its column, i.e. how many columns below it the carry has come through."""
    xs = [int(c) for c in reversed(f"{a:0{digits}d}")]  # least significant first
    ys = [int(c) for c in reversed(f"{b:0{digits}d}")]
    chain, into = 0, [0]
    for x, y in zip(xs, ys, strict=True):
        s = x + y
        chain = 1 if s >= 10 else (chain + 1 if s == 9 and chain else 0)
        into.append(chain)
    return list(reversed(into[: digits + 1]))


def answer_levels(task: str, text: str) -> dict[int, int]:
    """Character offset of each answer character present in ``text`` -> its difficulty;
    empty for a text model or text that is not the task's layout."""
    if task == "addition":
        match = SUM.match(text)
        if match is None or len(match[1]) != len(match[2]):
            return {}
        chains = carry_chains(int(match[1]), int(match[2]), len(match[1]))
        return {match.end() + i: c for i, c in enumerate(chains) if match.end() + i < len(text)}
    if task == "hops":
        pairs, sep, queries = text.partition(";")
        if not sep:
            return {}
        offset = len(pairs) + 1
        return {
            offset + m.end(): int(m[2])
            for m in QUERY.finditer(queries)
            if offset + m.end() < len(text)
        }
    return {}


def expected_answers(task: str, text: str) -> dict[int, str]:
    """Character offset of each answer character present in ``text`` -> the character the
    task's answer has there (the sum's digits; the letter a query's hops reach); empty
    for a text model or text that is not the task's layout."""
    if task == "addition":
        match = SUM.match(text)
        if match is None or len(match[1]) != len(match[2]):
            return {}
        answer = f"{int(match[1]) + int(match[2]):0{len(match[1]) + 1}d}"
        return {match.end() + i: c for i, c in enumerate(answer) if match.end() + i < len(text)}
    if task == "hops":
        pairs, sep, queries = text.partition(";")
        successor = {pair[0]: pair[1] for pair in pairs.split() if len(pair) == 2}
        offset, answers = len(pairs) + 1, {}
        for m in QUERY.finditer(queries) if sep else ():
            letter: str | None = m[1]
            for _ in range(int(m[2])):
                letter = successor.get(letter or "")
            if letter and offset + m.end() < len(text):
                answers[offset + m.end()] = letter
        return answers
    return {}


def label(task: str, level: int) -> str:
    """How a difficulty reads beside an exit loop: ``3 hops``, ``carry chain 2``."""
    if task == "hops":
        return f"{level} hop" if level == 1 else f"{level} hops"
    return f"carry chain {level}"
