"""Mutation score per module from mutmut's results in mutants/ (``make mutation``).

A mutant is killed when a test failed or timed out on it; it survived when every test that
runs its function passed (or no test runs it at all). Mutants listed under
``[tool.mutmut] equivalent_mutants`` in pyproject.toml cannot change behaviour and are left
out of the score; mutants not yet checked are counted apart.
"""

import json
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILLED = {1, 3, 36, 37, 24, -24, 152, 255}  # test failed, pytest error, timeouts, type check
NOT_CHECKED = {None, 2, 34}  # not run yet, interrupted, skipped


def module_of(mutant: str) -> str:
    """``kernels.rules.xǁQExitǁexits__mutmut_3`` -> ``kernels.rules``."""
    return mutant.split(".x", 1)[0]


def equivalent_mutants() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["mutmut"].get("equivalent_mutants", {})


def scores(mutants_dir: Path = ROOT / "mutants") -> dict[str, Counter[str]]:
    """Per module: killed, survived, equivalent and unchecked mutant counts."""
    equivalent = equivalent_mutants()
    by_module: dict[str, Counter[str]] = {}
    for meta in mutants_dir.rglob("*.py.meta"):
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
        for mutant, code in exit_codes.items():
            counts = by_module.setdefault(module_of(mutant), Counter())
            if mutant in equivalent:
                counts["equivalent"] += 1
            elif code in NOT_CHECKED:
                counts["unchecked"] += 1
            elif code in KILLED:
                counts["killed"] += 1
            else:
                counts["survived"] += 1
    return by_module


def stale_equivalents(mutants_dir: Path = ROOT / "mutants") -> list[str]:
    """Equivalent-mutant entries of a mutated module that name no mutant of it any more
    (the code changed and mutmut numbers its mutants afresh): each must be looked at again."""
    names = {
        mutant
        for meta in mutants_dir.rglob("*.py.meta")
        for mutant in json.loads(meta.read_text())["exit_code_by_key"]
    }
    modules = {module_of(name) for name in names}
    return [
        name for name in equivalent_mutants() if module_of(name) in modules and name not in names
    ]


def main(modules: list[str]) -> None:
    print(f"{'module':28} {'killed':>7} {'survived':>8} {'equiv':>6} {'unchecked':>9} {'score':>6}")
    for module, counts in sorted(scores().items()):
        if modules and module not in modules:
            continue
        judged = counts["killed"] + counts["survived"]
        score = f"{100 * counts['killed'] / judged:5.1f}%" if judged else "    -"
        print(
            f"{module:28} {counts['killed']:7} {counts['survived']:8} {counts['equivalent']:6}"
            f" {counts['unchecked']:9} {score:>6}"
        )
    for name in stale_equivalents():
        print(f"listed as equivalent but no such mutant: {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
