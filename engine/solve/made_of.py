"""What a study's traced programs are made of, described by value.

Two studies of the same name and files can still differ: a factory's closures,
parameter ranges set at run time, a finish swapped in by a notebook or a test.
A program stored under a key of the name and files alone was then served for
the other study (a finish that returned a constant got the rest time of the
finish traced before it). So the key (engine.solve.source_key) also holds this
description: every field of the study that is traced (parameters, ranges,
constraints, outputs, the point function), each function by its module, name
and byte code, its defaults and the values it closes over, walked through
dataclasses, containers and arrays; and the files of the modules those
functions come from (the code they call by name). A value nothing here can
describe (an object of an unknown class) makes the study undescribed: then
nothing of it is stored, and its programs are traced in every process.
"""

import dataclasses
import enum
import functools
import hashlib
import marshal
import pathlib
import sys
import types
from collections.abc import Mapping

import jax
import numpy as np

# Packages whose functions and objects are named by their versions (in the key):
# jnp.abs, a ufunc, diffrax's solvers.
PACKAGED = frozenset({"jax", "jaxlib", "numpy", "diffrax", "equinox", "lineax", "optimistix", "math", "operator",
                      "builtins", "functools"})
# Study fields no program is traced from.
UNTRACED = frozenset({"title", "source", "figures", "demo_configs", "read_parameter_file"})
_SIMPLE = (type(None), bool, int, float, complex, str, bytes)


class Undescribed(Exception):
    """A value of a study that this module cannot describe."""


@dataclasses.dataclass(frozen=True)
class MadeOf:
    description: object  # JSON: lists, strings and numbers
    sources: frozenset[pathlib.Path]  # the folders (of packages) and files (of plain modules) it was defined in


def made_of(study) -> MadeOf | None:
    """The description of what `study`'s programs are traced from; None where
    some part of it cannot be described."""
    sources: set[pathlib.Path] = set()
    try:
        fields = {f.name: _describe(getattr(study, f.name), sources, frozenset())
                  for f in dataclasses.fields(study) if f.name not in UNTRACED}
    except Undescribed:
        return None
    return MadeOf(fields, frozenset(sources))


def _describe(value, sources: set, path: frozenset):
    if isinstance(value, enum.Enum):
        return ["enum", _name(type(value), sources), repr(value.value)]
    if isinstance(value, _SIMPLE):
        return [type(value).__name__, repr(value)]
    if id(value) in path:  # a value that holds itself (a recursive closure)
        return "cycle"
    path = path | {id(value)}
    describe = functools.partial(_describe, sources=sources, path=path)
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [describe(v) for v in value]
        return [type(value).__name__, sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items]
    if isinstance(value, Mapping):
        return ["mapping", sorted(([repr(k), describe(v)] for k, v in value.items()), key=lambda kv: kv[0])]
    if isinstance(value, np.ndarray | np.generic | jax.Array):
        array = np.asarray(value)
        if array.dtype == object:
            raise Undescribed("an array of objects")
        return ["array", str(array.dtype), list(array.shape), hashlib.sha256(array.tobytes()).hexdigest()]
    if isinstance(value, type):
        return ["class", _name(value, sources)]
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__]
    if isinstance(value, functools.partial):
        return ["partial", describe(value.func), describe(value.args), describe(value.keywords)]
    if isinstance(value, types.MethodType):
        return ["method", describe(value.__func__), describe(value.__self__)]
    if isinstance(value, types.FunctionType):
        cells = [describe(_contents(cell)) for cell in value.__closure__ or ()]
        return ["function", _name(value, sources), _code(value.__code__), describe(value.__defaults__),
                describe(value.__kwdefaults__), cells]
    if dataclasses.is_dataclass(value):
        return ["dataclass", _name(type(value), sources),
                [[f.name, describe(getattr(value, f.name))] for f in dataclasses.fields(value)]]
    if _root(getattr(value, "__module__", None) or type(value).__module__) in PACKAGED:
        # A packaged callable or object (jnp.abs, a ufunc): named, its code the package version's.
        return ["packaged", type(value).__module__, type(value).__qualname__,
                getattr(value, "__module__", None), getattr(value, "__qualname__", getattr(value, "__name__", None))]
    raise Undescribed(f"a {type(value).__qualname__}")


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return None


def _code(code: types.CodeType) -> str:
    """The byte code, its constants and names (not its file's path: a checkout
    moved elsewhere keeps its keys)."""
    return hashlib.sha256(marshal.dumps(_placeless(code))).hexdigest()


def _placeless(code: types.CodeType) -> types.CodeType:
    consts = tuple(_placeless(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename="", co_consts=consts)


def _root(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _name(thing, sources: set) -> str:
    """`module:qualified name`; the module's source (its package's folder, or
    the file of a module of no package) added to `sources`, unless it is the
    engine's or a versioned package's, which the key names otherwise."""
    module_name = thing.__module__
    if _root(module_name) not in PACKAGED | {"engine"}:
        module = sys.modules.get(module_name)
        file = getattr(module, "__file__", None)
        if file is None:  # a notebook's or an interpreter's: no file says what it is
            raise Undescribed(f"{module_name} has no source file")
        file = pathlib.Path(file).resolve()
        sources.add(file.parent if getattr(module, "__package__", None) else file)
    return f"{module_name}:{thing.__qualname__}"
