"""Where the test suite's time goes: the slowest tests of a `make test` log
(pytest's `--durations`, which `make test` prints), as a Markdown table with
what each test checks (its docstring's first sentence, else its name).

    make test 2>&1 | tee test.log
    python benchmarks/suite_durations.py test.log [--top 30]

docs/commands.md keeps the table of the last measurement.
"""

import argparse
import ast
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=pathlib.Path, help="a make test (pytest --durations) log")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print(table(slowest(args.log.read_text(errors="replace"), args.top)))


if __name__ == "__main__":
    main()
