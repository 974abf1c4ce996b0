"""The pointer-chasing task: well-formed problems, each answer's hops, an exact checker."""

import random
import re

import pytest
import torch

from kernels.offline import hops
from kernels.offline.hops import Problem


@pytest.mark.parametrize("symbols", [5, 8])
def test_problems_are_well_formed_and_answer_by_walking_the_cycle(symbols):
    rng = random.Random(3)
    letters = hops.LETTERS[:symbols]

    for _ in range(30):
        p = hops.sample(rng, symbols, [1, 2, 3, 4])

        pairs, queries = p.text.split(";")
        lines = queries.splitlines()
        assert re.fullmatch(rf"([{letters}]{{2}} )*[{letters}]{{2}}", pairs)
        assert sorted(pair[0] for pair in p.pairs) == list(letters)  # a function on the letters
        assert sorted(pair[1] for pair in p.pairs) == list(letters)  # that is a permutation
        assert len({p.walk("a", k) for k in range(symbols)}) == symbols  # of one cycle
        assert [line[:2] for line in lines] == [f"{s}{k}" for s, k in p.queries]
        assert all(re.fullmatch(rf"[{letters}]\d=[{letters}]", line) for line in lines)
        assert p.hops == [1, 2, 3, 4]
        assert p.text.startswith(p.prompt) and p.text.endswith("\n")


def test_walk_follows_the_pairs():
    p = Problem(("ac", "cd", "db", "ba"), (("a", 3), ("d", 1), ("b", 2)))

    assert p.answers == ["b", "b", "c"]
    assert p.text == "ac cd db ba;a3=b\nd1=b\nb2=c\n"
    assert p.prompt == "ac cd db ba;a3=" and p.answer == "b\n"


def test_checker_accepts_the_truth_and_rejects_near_misses():
    p = Problem(("ac", "cd", "db", "ba"), (("a", 3), ("d", 1)))

    assert hops.check(p, ["b\n", "b\n"]) and hops.check(p, ["b", "b"])
    # one hop short or long, a right answer in the wrong slot, too few or too many answers
    for wrong in (
        ["d", "b"],
        ["a", "b"],
        ["b", "a"],
        ["b"],
        ["b", "b", "b"],
        ["B", "b"],
        ["b ", "b"],
    ):
        assert not hops.check(p, wrong), wrong


def test_problems_depend_on_the_seed_only_and_cycle_through_the_hops():
    first = hops.problems(5, 4, 8, range(1, 4), queries=3)

    assert first == hops.problems(5, 4, 8, range(1, 4), queries=3)
    assert first != hops.problems(6, 4, 8, range(1, 4), queries=3)
    assert [p.hops for p in first] == [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]]
    six = hops.problems(0, 8, 8, range(1, 5), queries=6)
    for slot in range(6):  # every slot asks every difficulty equally often
        assert sorted(p.hops[slot] for p in six) == [1, 1, 2, 2, 3, 3, 4, 4]


def test_encode_marks_the_positions_that_predict_each_answer_and_its_newline():
    batch = hops.problems(0, 3, 8, range(1, 5), queries=4)

    ids, mask = hops.encode(batch)

    assert ids.shape == (3, len(batch[0].text)) and mask.shape == (3, ids.shape[1] - 1)
    targets = ids[:, 1:][mask].view(3, -1)  # (B, 2 * queries)
    expected = torch.tensor([list("".join(a + "\n" for a in p.answers).encode()) for p in batch])
    assert torch.equal(targets, expected)
    letters = [batch[0].text[i] for i in hops.answer_positions(batch[0])]
    assert letters == batch[0].answers


def test_example_prompts_ask_one_query_of_each_difficulty():
    prompts = hops.example_prompts(8, range(1, 5))

    assert [p[-2] for p in prompts] == ["1", "2", "3", "4"]
    assert all(p.endswith("=") and p.count(";") == 1 for p in prompts)


def test_hops_that_would_wrap_around_the_cycle_are_refused():
    with pytest.raises(ValueError, match="hops must be in 1..4"):
        hops.sample(random.Random(0), 5, [5])


def test_loop_targets_teach_one_hop_per_loop_up_to_the_querys_hops():
    p = Problem(("ac", "cd", "db", "ba"), (("a", 3), ("d", 1)))

    targets = hops.loop_targets([p], n_loops=5)  # (T, B, S)

    ids, mask = hops.encode([p])
    first, second = hops.answer_positions(p)
    assert [chr(t) for t in targets[:, 0, first - 1].tolist()] == ["a", "c", "d", "b", "b"]
    assert [chr(t) for t in targets[:, 0, second - 1].tolist()] == ["d", "b", "b", "b", "b"]
    # every other position, and every loop from the query's hops + 1 on, is the text's own
    assert torch.equal(targets[-1], ids[:, 1:])
    changed = (targets != ids[:, 1:]).any(0)[0]
    assert changed.nonzero().flatten().tolist() == [first - 1, second - 1]
