"""Each answer character's difficulty, read back from a task model's text."""

import random

from kernels import difficulty
from kernels.offline import addition, hops


def test_a_hops_answer_letter_states_its_querys_hops():
    text = "ac cd db ba;a3=b\nd1=b\nb2="

    levels = difficulty.answer_levels("hops", text)

    assert levels == {15: 3, 20: 1}  # the third query has no answer yet
    assert [text[i] for i in levels] == ["b", "b"]
    assert difficulty.label("hops", 3) == "3 hops"


def test_a_sum_digit_states_the_carry_chain_into_its_column():
    text = "9999+0001=10000\n"

    levels = difficulty.answer_levels("addition", text)

    assert levels == {10: 4, 11: 3, 12: 2, 13: 1, 14: 0}
    assert difficulty.label("addition", 2) == "carry chain 2"


def test_text_of_another_layout_or_model_has_no_difficulties():
    assert difficulty.answer_levels("text", "def f(x):\n    return x") == {}
    assert difficulty.answer_levels("addition", "12+345=") == {}
    assert difficulty.answer_levels("hops", "a3=b") == {}


def test_the_generators_and_the_text_agree():
    rng = random.Random(1)
    for _ in range(20):
        p = hops.sample(rng, 8, [1, 2, 3, 4])
        positions = hops.answer_positions(p)
        assert difficulty.answer_levels("hops", p.text) == dict(zip(positions, p.hops, strict=True))
        s = addition.sample(rng, 6, rng.randrange(7))
        levels = difficulty.answer_levels("addition", s.text)
        assert list(levels.values()) == difficulty.carry_chains(s.a, s.b, 6)
