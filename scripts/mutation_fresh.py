"""Try surviving mutants again in a fresh pytest process (``scripts/mutation``, after mutmut).

mutmut forks each mutant's tests from a server that imported the code before a mutant was
chosen, so code that runs at import time (a class body such as ``WorkFilter``'s, the
``__init__`` of the filters it builds) runs unmutated: its mutants survive whatever the
tests check, and mutmut's map credits them to whichever test first imported the module.
Here each survivor (and each mutant no test reached) that is not listed as equivalent runs
in a new process with ``MUTANT_UNDER_TEST`` set before anything is imported, against its
module's own test file (``test_<module>.py``) and the tests mutmut recorded for it, and
the outcome is written back to mutmut's results: a failing (or uncollectable) suite kills
it, a passing one leaves it a survivor.
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
SURVIVED, NO_TESTS = 0, 33  # mutmut's codes: every test passed; no test executed it
PYTEST_FAILED = {1, 2}  # tests failed; collection failed (the mutant broke an import)


def module_of(mutant: str) -> str:
    """``atlas.filters.x__facet_filter__mutmut_3`` -> ``atlas.filters``."""
    return mutant.split(".x", 1)[0]


def test_files(mutant: str, selection: list[str], recorded: dict[str, list[str]]) -> list[str]:
    """The selection's file named after the module and the tests recorded for the mutant's
    function (for import-time code those are only whichever test imported it first);
    the whole selection when there are neither."""
    stem = module_of(mutant).rsplit(".", 1)[-1]
    own = [path for path in selection if Path(path).name == f"test_{stem}.py"]
    tests = recorded.get(mutant.split("__mutmut_")[0], [])
    return own + sorted({test for test in tests if test.split("::")[0] not in own}) or selection


def run_mutant(mutant: str, tests: list[str], pytest_args: list[str]) -> int:
    env = {**os.environ, "MUTANT_UNDER_TEST": mutant, "PYTHONPATH": str(MUTANTS)}
    command = [sys.executable, "-m", "pytest", "--rootdir=.", "-x", "-q", "--tb=no", "--no-header"]
    return subprocess.run(
        [*command, *pytest_args, *tests], cwd=MUTANTS, env=env, capture_output=True
    ).returncode


def main(modules: list[str]) -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    selection = config["pytest_add_cli_args_test_selection"]
    equivalent = config.get("equivalent_mutants", {})
    stats = json.loads((MUTANTS / "mutmut-stats.json").read_text())
    recorded = stats["tests_by_mangled_function_name"]
    for meta_path in sorted(MUTANTS.rglob("*.py.meta")):
        meta = json.loads(meta_path.read_text())
        codes = meta["exit_code_by_key"]
        retry = [
            mutant
            for mutant, code in codes.items()
            if code in (SURVIVED, NO_TESTS)
            and module_of(mutant) in modules
            and mutant not in equivalent
        ]
        for mutant in retry:
            tests = test_files(mutant, selection, recorded)
            code = run_mutant(mutant, tests, config["pytest_add_cli_args"])
            if code in PYTEST_FAILED or code == 0:
                codes[mutant] = 1 if code else 0
                print(f"{mutant}: {'killed' if code else 'survived'} in a fresh process")
            else:
                print(f"{mutant}: pytest exited {code}; left as it was")
            meta_path.write_text(json.dumps(meta, indent=4))


if __name__ == "__main__":
    main(sys.argv[1:])
