"""What a study's traced programs are made of, described by value.

Two studies of the same name and files can still differ: a factory's closures,
parameter ranges set at run time, a finish swapped in by a notebook or a test.
A program stored under a key of the name and files alone was then served for
the other study (a finish that returned a constant got the rest time of the
finish traced before it). So the key (engine.solve.source_key) also holds this
description: every field of the study that is traced (parameters, ranges,
constraints, outputs, the point function), each function by its module, name
and byte code, its defaults, the values it closes over and the globals its code
names (the functions it calls, their modules' files, constants), walked through
dataclasses, containers and arrays. A value nothing here can describe (an
object of a class of its own in a closure, a class made inside a function, a
function of a notebook) makes the study undescribed: then nothing of it is
stored, and its programs are traced in every process.
"""

import dataclasses
import enum
import functools
import hashlib
import marshal
import pathlib
import sys
import types

import jax
import numpy as np

from engine.study.source import package_version

# Packages whose functions and objects are named by their versions (in the key):
# jnp.abs, a ufunc, diffrax's solvers; and Python's standard library (by the
# byte code's Python, which a function's code hash holds).
PACKAGED = frozenset({"jax", "jaxlib", "numpy", "diffrax", "equinox", "lineax", "optimistix"}) | frozenset(
    sys.stdlib_module_names)
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
    walk = _Walk()
    try:
        fields = [[f.name, walk.describe(getattr(study, f.name), frozenset())]
                  for f in dataclasses.fields(study) if f.name not in UNTRACED]
    except Exception:  # noqa: BLE001 - Undescribed, or a value that fails when looked at: nothing stored
        return None
    return MadeOf(fields, frozenset(walk.sources))


class _Walk:
    """One description: the sources met, and each function or object described
    once (a later meeting refers to the first, in the walk's fixed order)."""

    def __init__(self):
        self.sources: set[pathlib.Path] = set()
        self.seen: dict[int, int] = {}  # id -> order of its first description
        self.kept: list = []  # what `seen`'s ids belong to, kept alive so that no id is reused
        self.failed: set[int] = set()  # ids of values that could not be described

    def describe(self, value, path: frozenset):
        if isinstance(value, enum.Enum):
            return ["enum", self.name(type(value)), repr(value.value)]
        if isinstance(value, _SIMPLE):
            return [type(value).__name__, repr(value)]
        if id(value) in path:  # a value that holds itself (a recursive closure)
            return "cycle"
        if id(value) in self.failed:
            raise Undescribed("met before")
        if id(value) in self.seen:
            return ["same as", self.seen[id(value)]]
        self.seen[id(value)] = len(self.seen)
        self.kept.append(value)
        try:
            return self._described(value, path | {id(value)})
        except Undescribed:
            self.failed.add(id(value))  # not "same as" a description that never was, when met again
            raise

    def _described(self, value, path):
        describe = functools.partial(self.describe, path=path)
        if isinstance(value, (tuple, list)):
            return [type(value).__name__, [describe(v) for v in value]]
        if isinstance(value, (set, frozenset)):
            return [type(value).__name__, sorted((describe(v) for v in value), key=repr)]
        if isinstance(value, dict | types.MappingProxyType):  # in its own order: a trace may follow it
            return [type(value).__qualname__, [[describe(k), describe(v)] for k, v in value.items()],
                    describe(getattr(value, "default_factory", None))]
        if isinstance(value, np.ma.MaskedArray):
            raise Undescribed("a masked array")
        if isinstance(value, np.ndarray | np.generic | jax.Array):
            array = np.asarray(value)
            if array.dtype.hasobject:
                raise Undescribed("an array of objects")
            return ["array", array.dtype.str, list(array.shape), hashlib.sha256(array.tobytes()).hexdigest()]
        if isinstance(value, type):
            return ["class", self.name(value)]
        if isinstance(value, types.ModuleType):
            return ["module", value.__name__, self.source_of(value)]
        if isinstance(value, functools.partial):
            return ["partial", describe(value.func), describe(value.args), describe(value.keywords)]
        if isinstance(value, types.MethodType):
            return ["method", describe(value.__func__), describe(value.__self__)]
        if isinstance(value, types.FunctionType):
            return self._function(value, describe)
        if dataclasses.is_dataclass(value):
            return ["dataclass", self.name(type(value)),
                    [[f.name, describe(getattr(value, f.name))] for f in dataclasses.fields(value)]]
        if _packaged_by_name(value):  # jnp.abs, np.sin: named, their code the package version's
            return ["packaged", value.__module__, _qualname(value)]
        if _root(type(value).__module__) in PACKAGED and callable(getattr(value, "__wrapped__", None)):
            return ["wrapped", type(value).__qualname__, describe(value.__wrapped__)]  # jax.jit(f): f in a trace
        raise Undescribed(f"a {type(value).__qualname__}")

    def _function(self, fn: types.FunctionType, describe):
        cells = [describe(_contents(cell)) for cell in fn.__closure__ or ()]
        if _root(fn.__module__) in PACKAGED | {"engine"}:  # its code the engine's or the package version's
            return ["function", self.name(fn), cells]
        # The globals its code names (its callees, their modules, constants), by value:
        # a helper in another folder, or a constant set at run time, is in the key too.
        names = sorted(_global_names(fn.__code__) & fn.__globals__.keys())
        used = [[name, self._global(fn.__globals__[name], describe)] for name in names]
        return ["function", self.name(fn), _code(fn.__code__), describe(fn.__defaults__),
                describe(fn.__kwdefaults__), cells, used, describe(dict(fn.__dict__))]

    def _global(self, value, describe):
        """A global a function names: described where it can be; else by its
        type alone (a logger, a lock: what no trace reads), its module's file in
        the key."""
        try:
            return describe(value)
        except Undescribed:
            return ["global of type", self.name(type(value))]

    def name(self, thing) -> str:
        """`module:qualified name`, its module's source added (engine.solve.source_key)."""
        qualname = _qualname(thing)
        if "<locals>" in qualname and isinstance(thing, type):  # its methods: made at run time, unnamed
            raise Undescribed(f"the class {qualname} made inside a function")
        self.source_of(sys.modules.get(thing.__module__), thing.__module__)
        return f"{thing.__module__}:{qualname}"

    def source_of(self, module, name: str | None = None) -> str:
        """The module's source (its package's folder, or the file of a module of
        no package) into `sources`, unless it is the engine's or a versioned
        package's, which the key names otherwise: an installed package's (in a
        site-packages folder) by its version, not its files (matplotlib's are
        thousands); returned, what names it in the description."""
        name = name or getattr(module, "__name__", None)
        if _root(name) in PACKAGED | {"engine"}:
            return "named by the key"
        file = getattr(module, "__file__", None)
        if file is None:  # a notebook's or an interpreter's: no file says what it is
            raise Undescribed(f"{name} has no source file")
        file = pathlib.Path(file).resolve()
        if {"site-packages", "dist-packages"} & set(file.parts):
            return f"installed {package_version(_root(name))}"
        self.sources.add(file.parent if getattr(module, "__package__", None) else file)
        return "its files"


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return None


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a nested function, lambda or comprehension
            names |= _global_names(const)
    return names


def _code(code: types.CodeType) -> str:
    """The byte code, its constants and names (not its file's path: a checkout
    moved elsewhere keeps its keys; version 0: no record of which strings are
    interned, which can change within a process)."""
    return hashlib.sha256(marshal.dumps(_placeless(code), 0)).hexdigest()


def _placeless(code: types.CodeType) -> types.CodeType:
    consts = tuple(_placeless(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename="", co_consts=consts)


def _root(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _qualname(thing) -> str:
    return getattr(thing, "__qualname__", None) or getattr(thing, "__name__", None) or ""


def _packaged_by_name(value) -> bool:
    """A versioned package's object that its module and name alone give back
    (jnp.abs, np.sin): not one made with values of its own (an itemgetter, a
    bound method, a dtype), which its name does not say."""
    module, qualname = getattr(value, "__module__", None), _qualname(value)
    if not isinstance(module, str) or _root(module) not in PACKAGED or not qualname:
        return False
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is value
