"""The engine's layers, as its folders show them, import only downwards.

Each module's imports of engine modules (at the top or inside functions) are
read from its source; a module of one layer may import only modules of the
layers listed below it. No import circles between layers follow."""

import ast
import pathlib

import engine

ENGINE = pathlib.Path(engine.__file__).parent
# A layer -> the layers it may import (besides itself). Leaves are the modules
# several layers use that import nothing of the engine's.
LEAVES = {"errors", "limits", "once", "vectormath", "stages", "pytree", "_imports", "_jax_setup", "_version",
          "_atomic_file"}
ALLOWED = {
    "leaf": set(),
    "study": {"leaf"},
    "sweep": {"leaf", "study"},
    "solve": {"leaf", "study", "sweep"},
    "cube": {"leaf", "study", "sweep"},
    "runner": {"leaf", "study", "sweep", "solve", "cube"},
    "cli": {"leaf", "study", "sweep", "solve", "cube", "runner"},
}


def layer(module: str) -> str:
    """The layer of a dotted engine module name (engine.x.y)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    return "leaf" if parts[1] in LEAVES else parts[1]


def imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("engine"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if (ENGINE.parent / node.module.replace(".", "/") / f"{a.name}.py").exists()}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("engine")}
    return found


def test_every_module_is_in_a_layer():
    for path in ENGINE.rglob("*.py"):
        module = ".".join(path.relative_to(ENGINE.parent).with_suffix("").parts)
        assert layer(module) in ALLOWED or module in ("engine.__init__", "engine"), f"{module} is in no layer"


def violations(module: str, path: pathlib.Path) -> list[str]:
    here = layer(module)
    if here not in ALLOWED:
        return []  # engine/__init__.py re-exports the public names of every layer
    return [f"{module} ({here}) imports {target} ({layer(target)})" for target in sorted(imports(path))
            if layer(target) != here and layer(target) not in ALLOWED[here]]


def modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(ENGINE.parent).with_suffix("").parts): p for p in sorted(ENGINE.rglob("*.py"))}


def test_imports_go_down_the_layers():
    wrong = [line for module, path in modules().items() for line in violations(module, path)]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_import_circles():
    """Between any two engine modules, imports in function bodies included."""
    found = modules()
    graph = {module: {t for t in imports(path) if t in found and t != module} for module, path in found.items()}

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in graph[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        return seen

    circles = sorted(module for module in graph if module in reachable(module))
    assert not circles, "modules that import themselves through others:\n" + "\n".join(circles)


def test_the_check_sees_a_wrong_import(tmp_path):
    # The check must be able to fail: an upward import inside a function is found.
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from engine.runner.execute import run\n")
    assert violations("engine.cube.planted", source) == [
        "engine.cube.planted (cube) imports engine.runner.execute (runner)"]
