"""The sampler never raises for a valid setting, whatever the logits: a batch draws every
row's token in one thread, so one bad draw would end the other rows' runs."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.params import BOUNDS
from kernels.sampling import Sampler, greedy

INF, NAN = math.inf, math.nan
TINY = 1e-300  # rounds to 0 in float32: the public API took it before the bounds said no


@pytest.mark.parametrize(
    ("temperature", "top_p"),
    [(TINY, 1.0), (5e-324, 1.0), (5.0, TINY), (TINY, TINY), (0.05, 0.01), (5.0, 1.0)],
)
def test_extreme_settings_draw_a_token(temperature, top_p):
    # given logits whose top token leads by 1
    logits = torch.tensor([1.0, 3.0, 2.0, -4.0])

    # when
    tokens = [Sampler(temperature=temperature, top_p=top_p, seed=s)(logits) for s in range(20)]

    # then every draw is a token, and a vanishing temperature or nucleus keeps the top one
    assert all(0 <= token < 4 for token in tokens)
    if temperature < 1e-200 or top_p < 1e-200:
        assert set(tokens) == {1}


@pytest.mark.parametrize(
    ("logits", "token"),
    [
        ([NAN, 1.0, 2.0], 2),  # a NaN never wins
        ([1.0, INF, 2.0], 1),  # a +inf always does
        ([NAN, NAN, NAN], 0),
        ([-INF, -INF, -INF], 0),
        ([INF, NAN, INF], 0),
    ],
)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_logits_that_give_no_distribution_fall_back_to_the_greedy_token(logits, token, temperature):
    sampler = Sampler(temperature=temperature, top_p=0.9, seed=1)
    assert sampler(torch.tensor(logits)) == token


def test_masked_tokens_are_never_drawn():
    logits = torch.tensor([-INF, 0.0, -INF, 0.5])
    draws = {Sampler(temperature=1.0, seed=s)(logits) for s in range(30)}
    assert draws == {1, 3}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_logits_sample_like_float32(dtype):
    logits = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 4
    low = logits.to(dtype)

    def draws(row):
        return [Sampler(temperature=0.7, top_p=0.9, seed=s)(row) for s in range(20)]

    assert draws(low) == draws(low.float())
    assert greedy(low) == int(low.float().argmax())


def test_the_same_seed_replays_the_same_draws():
    logits = torch.randn(2, 100, generator=torch.Generator().manual_seed(1))

    def draws():
        sampler = Sampler(temperature=0.9, top_p=0.95, seed=7)
        return [sampler(logits[i % 2], row=i % 2) for i in range(12)]

    assert draws() == draws()


_temperature = BOUNDS["temperature"]
_top_p = BOUNDS["top_p"]


@settings(max_examples=300, deadline=None)
@given(
    logits=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1),
    temperature=st.one_of(
        st.just(0.0),
        st.floats(min_value=_temperature.or_from, max_value=_temperature.high),
        st.floats(min_value=5e-324, max_value=1e-3),  # below the bound: safe all the same
    ),
    top_p=st.floats(min_value=5e-324, max_value=_top_p.high),
    seed=st.integers(min_value=0, max_value=2**63 - 1 - 64),
)
def test_no_logits_row_makes_a_valid_setting_raise(logits, temperature, top_p, seed):
    token = Sampler(temperature=temperature, top_p=top_p, seed=seed)(torch.tensor(logits))
    assert 0 <= token < len(logits)
