"""The addition task: well-formed problems of a chosen difficulty, an exact checker."""

import random
import re

import pytest
import torch

from kernels.offline import addition
from kernels.offline.addition import Problem


@pytest.mark.parametrize("digits", [4, 8])
def test_problems_are_well_formed_with_the_chosen_longest_chain(digits):
    rng = random.Random(3)

    for chain in range(digits + 1):
        for _ in range(20):
            p = addition.sample(rng, digits, chain)

            assert re.fullmatch(rf"\d{{{digits}}}\+\d{{{digits}}}=", p.prompt)
            assert re.fullmatch(rf"\d{{{digits + 1}}}\n", p.answer)
            assert int(p.answer) == p.a + p.b
            assert addition.difficulty(p) == chain


def test_carry_chains_count_the_columns_a_carry_came_through():
    # 9999 + 0001: column 0 makes a carry, columns 1-3 (sum 9) pass it on, to the top digit
    assert addition.carry_chains(9999, 1, 4) == [4, 3, 2, 1, 0]
    assert addition.carry_chains(19, 1, 2) == [0, 1, 0]
    assert addition.carry_chains(1234, 4321, 4) == [0, 0, 0, 0, 0]
    # a column that makes its own carry starts a new chain even with a carry coming in
    assert addition.carry_chains(55, 55, 2) == [1, 1, 0]


def test_checker_accepts_the_truth_and_rejects_near_misses():
    p = Problem(4999, 1, 4)  # 05000

    assert addition.check(p, "05000\n") and addition.check(p, "05000")
    for wrong in ("04000", "05001", "5000", "050000", "05000 ", "00500", "", "05O00"):
        assert not addition.check(p, wrong), wrong


def test_problems_depend_on_the_seed_only_and_cycle_through_the_chains():
    first = addition.problems(5, 12, 6, range(4))

    assert first == addition.problems(5, 12, 6, range(4))
    assert first != addition.problems(6, 12, 6, range(4))
    assert [addition.difficulty(p) for p in first] == [0, 1, 2, 3] * 3


def test_encode_marks_the_positions_that_predict_the_answer():
    batch = addition.problems(0, 3, 5, range(3))

    ids, mask = addition.encode(batch)

    assert ids.shape == (3, len(batch[0].text)) and mask.shape == (3, ids.shape[1] - 1)
    targets = ids[:, 1:][mask].view(3, -1)  # (B, answer length)
    expected = torch.tensor([list(p.answer.encode()) for p in batch])
    assert torch.equal(targets, expected)
    assert addition.example_prompts(8)[0].endswith("=") and len(addition.example_prompts(8)) == 5


def test_a_chain_longer_than_the_width_is_refused():
    with pytest.raises(ValueError, match="chain must be in 0..4"):
        addition.sample(random.Random(0), 4, 5)
