"""Where the test suite's time goes: the slowest tests of a `make test` log
(pytest's `--durations`, which `make test` prints), as a Markdown table with
what each test checks (its docstring's first sentence, else its name).

    make test 2>&1 | tee test.log
    python benchmarks/suite_durations.py test.log [--top 30]

docs/commands.md keeps the table of the last measurement. With --file-costs
(from a log of `make test PYTEST_ARGS=--durations=0`, every test's phases),
it writes instead each test file's seconds to tests/file_costs.json, which
orders the files of a parallel run (tests/conftest.py).
"""

import argparse
import ast
import collections
import json
import pathlib
import re

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# pytest's lines: "12.34s call     tests/test_x.py::test_y[param]"
DURATION = re.compile(r"^(?P<seconds>[0-9.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)$")


def slowest(log: str, top: int) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id) of the `top` slowest phases in the log."""
    rows = [(float(m["seconds"]), m["phase"], m["test"]) for m in map(DURATION.match, log.splitlines()) if m]
    return sorted(rows, reverse=True)[:top]


def what_it_checks(test_id: str) -> str:
    """The first sentence of the test function's docstring, or its name in words."""
    path, _, name = test_id.partition("::")
    function = name.partition("[")[0]
    try:
        tree = ast.parse((REPOSITORY / path).read_text())
    except (OSError, SyntaxError):
        return function.removeprefix("test_").replace("_", " ")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            doc = " ".join((ast.get_docstring(node) or "").split())
            if doc:
                return re.split(r"(?<=[.:;])\s", doc, maxsplit=1)[0].rstrip(".:;")
    return function.removeprefix("test_").replace("_", " ")


def table(rows) -> str:
    lines = ["| s | test | what it checks |", "|---:|---|---|"]
    for seconds, phase, test in rows:
        shown = test if phase == "call" else f"{test} ({phase})"
        lines.append(f"| {seconds:.1f} | `{shown}` | {what_it_checks(test).replace('|', '/')} |")
    return "\n".join(lines)


def file_costs(log: str) -> dict[str, float]:
    """Each test file's seconds (every phase of every test in the log), most first."""
    costs = collections.Counter()
    for m in map(DURATION.match, log.splitlines()):
        if m:
            costs[m["test"].partition("::")[0]] += float(m["seconds"])
    return {path: round(seconds, 1) for path, seconds in costs.most_common()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=pathlib.Path, help="a make test (pytest --durations) log")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--file-costs", action="store_true", help="write tests/file_costs.json instead")
    args = parser.parse_args()
    log = args.log.read_text(errors="replace")
    if args.file_costs:
        (REPOSITORY / "tests" / "file_costs.json").write_text(json.dumps(file_costs(log), indent=1) + "\n")
        return
    print(table(slowest(log, args.top)))


if __name__ == "__main__":
    main()
