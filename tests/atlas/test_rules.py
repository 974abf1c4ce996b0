"""The taxonomy's implications: each rule catches the row it is about, and the loader
refuses a file that breaks one, naming the row and the rule."""

from typing import Any

import pytest

from atlas.datafile import DEFAULT_PATH, DataFileError, records_from_file
from atlas.records import record_from_row
from atlas.rules import RULES, rules_broken
from tests.atlas.conftest import make_row

BREAKS: dict[str, dict[str, Any]] = {
    "fixed-depth-granularity": {"depth_granularity": "token"},
    "stopping-granularity": {"depth_control": "exit-gate", "depth_granularity": "unspecified"},
    "router-granularity": {"depth_control": "router", "depth_granularity": "layer"},
    "per-token-cache": {
        "depth_control": "elastic",
        "depth_granularity": "sequence",
        "kv_strategy": "best-available",
    },
    "token-routed-router": {"recurrence_family": "token-routed"},
    "retrofit-regime": {"contribution": ["retrofit"], "training_regime": "from-scratch"},
    "retrofit-contribution": {"training_regime": "retrofit"},
    "non-autoregressive-no-kv": {"modality": ["vision", "diffusion-generation"]},
    "puzzle-reasoner-no-kv": {"modality": ["algorithmic"], "topics": ["hrm-trm"]},
    "analysis-no-architecture": {"recurrence_family": "analysis"},
    "scaling-law-from-scratch": {
        "contribution": ["scaling-law"],
        "training_regime": "unspecified",
    },
}


def test_every_rule_has_a_breaking_example() -> None:
    assert set(BREAKS) == {rule.name for rule in RULES}


def test_a_consistent_row_breaks_no_rule() -> None:
    assert rules_broken(record_from_row(make_row(1)).values) == []


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_rule_catches_exactly_its_row(name: str) -> None:
    values = record_from_row(make_row(1, **BREAKS[name])).values
    assert [rule.name for rule in rules_broken(values)] == [name]


@pytest.mark.parametrize(
    "overrides",
    [
        {"depth_control": "halting", "depth_granularity": "token"},
        {"depth_control": "exit-gate", "depth_granularity": "sequence"},
        {"contribution": ["retrofit"], "training_regime": "training-free"},
        {"modality": ["vision"], "kv_strategy": "no-kv"},
        {"modality": ["vision-language"]},
        {"modality": ["language"], "topics": ["hrm-trm"]},
    ],
)
def test_rows_the_rules_allow(overrides: dict[str, Any]) -> None:
    assert rules_broken(record_from_row(make_row(1, **overrides)).values) == []


def test_the_loader_refuses_a_file_breaking_a_rule_naming_row_and_rule(data_file) -> None:
    path = data_file([make_row(1), make_row(2, **BREAKS["retrofit-regime"])])
    with pytest.raises(DataFileError) as refused:
        records_from_file(path)
    assert refused.value.problems == [
        "row 2 (n=2, slug=work-2): breaks rule retrofit-regime: a retrofit contribution "
        "goes with a retrofit or training-free regime"
    ]


def test_the_curated_file_keeps_every_rule() -> None:
    broken = {
        record.position: [rule.name for rule in rules_broken(record.values)]
        for record in records_from_file(DEFAULT_PATH)
    }
    assert {n: names for n, names in broken.items() if names} == {}
