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
import logging
import marshal
import pathlib
import sys
import sysconfig
import threading
import types

import jax
import numpy as np

from engine.study.source import package_version

# Packages whose functions and objects are named by their versions (in the key):
# jnp.abs, a ufunc, diffrax's solvers. Python's standard library is named by
# the byte code's Python, which a function's code hash holds (_versioned).
PACKAGES = frozenset({"jax", "jaxlib", "numpy", "diffrax", "equinox", "lineax", "optimistix"})
_STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"]).resolve()
# Globals of kinds no trace reads, described by their type alone.
_INERT = (logging.Logger, logging.LoggerAdapter, type(threading.Lock()), type(threading.RLock()))
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
        if isinstance(value, enum.Enum):  # by name: a value may be an object whose repr holds an address
            return ["enum", self.name(type(value)), value.name]
        if type(value) in _SIMPLE:
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
        kind = type(value)
        # A subclass of a builtin (a NamedTuple, a str enum-like) by its class too: its methods trace.
        own_class = [] if kind.__module__ == "builtins" else [describe(kind)]
        if isinstance(value, _SIMPLE):
            simple = next(t for t in kind.__mro__ if t in _SIMPLE)
            return [simple.__name__, repr(simple(value)), *own_class]
        if isinstance(value, (tuple, list)):
            return [kind.__name__, [describe(v) for v in value], *own_class]
        if isinstance(value, (set, frozenset)):  # in an order of their own descriptions, not of their hashes
            ordered = sorted(value, key=lambda v: repr(_Walk().describe(v, path)))
            return [kind.__name__, [describe(v) for v in ordered], *own_class]
        if isinstance(value, dict | types.MappingProxyType):  # in its own order: a trace may follow it
            return [kind.__qualname__, [[describe(k), describe(v)] for k, v in value.items()],
                    describe(getattr(value, "default_factory", None)), *own_class]
        if isinstance(value, np.ma.MaskedArray):
            raise Undescribed("a masked array")
        if isinstance(value, np.ndarray | np.generic | jax.Array):
            array = np.asarray(value)
            if array.dtype.hasobject:
                raise Undescribed("an array of objects")
            return ["array", kind.__qualname__, str(array.dtype.descr), array.dtype.name, list(array.shape),
                    bool(getattr(value, "weak_type", False)), hashlib.sha256(array.tobytes()).hexdigest()]
        if isinstance(value, type):
            return self._class(value, describe)
        if isinstance(value, types.ModuleType):
            return ["module", value.__name__, self.source_of(value)]
        if isinstance(value, functools.partial):
            return ["partial", describe(value.func), describe(value.args), describe(value.keywords)]
        if isinstance(value, types.MethodType):
            return ["method", describe(value.__func__), describe(value.__self__)]
        if isinstance(value, types.FunctionType):
            return self._function(value, describe)
        if isinstance(value, property):
            return ["property", describe(value.fget), describe(value.fset), describe(value.fdel)]
        if isinstance(value, staticmethod | classmethod):
            return [kind.__name__, describe(value.__func__)]
        if isinstance(value, jax.custom_jvp):  # its rule traces too (event location differentiates conditions)
            return ["custom_jvp", describe(value.fun), describe(value.jvp), describe(value.nondiff_argnums)]
        if isinstance(value, jax.custom_vjp):
            return ["custom_vjp", describe(value.fun), describe(value.fwd), describe(value.bwd)]
        if dataclasses.is_dataclass(value):
            return ["dataclass", describe(kind), [[f.name, describe(getattr(value, f.name))]
                                                  for f in dataclasses.fields(value)]]
        if _packaged_by_name(value):  # jnp.abs, np.sin: named, their code the package version's
            return ["packaged", value.__module__, _qualname(value)]
        if _versioned(kind.__module__) and callable(getattr(value, "__wrapped__", None)):
            return ["wrapped", kind.__qualname__, describe(value.__wrapped__)]  # jax.jit(f): f in a trace
        raise Undescribed(f"a {kind.__qualname__}")

    def _class(self, cls: type, describe):
        """A class by name; one of the study's own by its methods and class
        attributes too (their code and callees, perhaps in other files), and its
        bases."""
        name = self.name(cls)
        if _versioned(cls.__module__):
            return ["class", name]
        if issubclass(cls, enum.Enum):  # by its members (its machinery is enum's)
            return ["enum class", name, [[member.name, describe(member.value)] for member in cls]]
        own = []
        for attr, v in vars(cls).items():
            fn = v.__func__ if isinstance(v, staticmethod | classmethod) else v
            if isinstance(fn, types.FunctionType) and (fn.__globals__.get("__name__") != cls.__module__
                                                       or fn.__code__.co_filename.startswith("<")):
                continue  # made from the class's fields (a dataclass's __init__, a NamedTuple's __new__ and _make)
            if attr.startswith("__") and attr.endswith("__") and not isinstance(v, types.FunctionType):
                continue  # the class's machinery (__dict__, __slots__, __dataclass_fields__...)
            if _machinery(v):  # a NamedTuple's field getters, slots: the fields are described
                own.append([attr, type(v).__qualname__])
                continue
            own.append([attr, describe(v)])  # a method or attribute that cannot be described: the class is not
        bases = [describe(base) for base in cls.__bases__ if base is not object]
        return ["class", name, own, bases]

    def _function(self, fn: types.FunctionType, describe):
        cells = [describe(_contents(cell)) for cell in fn.__closure__ or ()]
        # Where its code is: its globals' module (functools.wraps sets __module__ to the wrapped one's).
        module = fn.__globals__.get("__name__", fn.__module__)
        if _versioned(module):  # its code the engine's or a package version's
            return ["function", self.name(fn), cells]
        # The globals its code names (its callees, their modules and the attributes
        # it names of them, constants), by value: a helper in another folder, or a
        # constant set at run time, is in the key too.
        names = _global_names(fn.__code__)
        used = [[name, self._global(fn.__globals__[name], describe),
                 self._attributes(fn.__globals__[name], names, describe)]
                for name in sorted(names & fn.__globals__.keys())]
        where = f"{module}:{fn.__qualname__}"
        self.source_of(sys.modules.get(module), module)
        return ["function", where, _code(fn.__code__), describe(fn.__defaults__), describe(fn.__kwdefaults__),
                cells, used, describe(dict(fn.__dict__))]

    def _attributes(self, value, names: set, describe) -> list:
        """The attributes a function's code names of a module of the study's own
        (`helpers.SCALE`, set at run time perhaps), by value."""
        if not isinstance(value, types.ModuleType) or _versioned(value.__name__):
            return []
        attributes = vars(value)
        return [[attr, self._global(attributes[attr], describe)]
                for attr in sorted(names & attributes.keys()) if not attr.startswith("__")]

    def _global(self, value, describe):
        """A global a function names, described; one of an inert kind (a logger,
        a lock: what no trace reads) by its type alone."""
        if isinstance(value, _INERT):
            return ["inert", type(value).__qualname__]
        return describe(value)

    def name(self, thing) -> str:
        """`module:qualified name (what names its module's code)`, its module's
        source added (engine.solve.source_key)."""
        qualname = _qualname(thing)
        if "<locals>" in qualname and isinstance(thing, type):  # its methods: made at run time, unnamed
            raise Undescribed(f"the class {qualname} made inside a function")
        return f"{thing.__module__}:{qualname} ({self.source_of(sys.modules.get(thing.__module__), thing.__module__)})"

    def source_of(self, module, name: str | None = None) -> str:
        """What names the module's code in the description, returned: the key's
        versions (the engine, a versioned package, the standard library); an
        installed package's version (in a site-packages folder: its files are
        not read, matplotlib's are thousands); else its source (its package's
        folder, or the file of a module of no package), added to `sources`."""
        name = name or getattr(module, "__name__", None)
        if _named_by_the_key(name):
            return "named by the key"
        if _installed(name):
            return f"installed {package_version(_root(name))}"
        file = getattr(module, "__file__", None)
        if file is None:  # a notebook's or an interpreter's: no file says what it is
            raise Undescribed(f"{name} has no source file")
        file = pathlib.Path(file).resolve()
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


def _root(module) -> str:
    return module.partition(".")[0] if isinstance(module, str) else ""  # (a Cython type's __module__ is no str)


def _qualname(thing) -> str:
    return getattr(thing, "__qualname__", None) or getattr(thing, "__name__", None) or ""


def _versioned(module) -> bool:
    """A module named by a version, not walked: of a versioned package or
    Python's standard library (the key's versions), or of an installed package
    (scipy's, pandas', whose Cython types cannot be walked)."""
    return _named_by_the_key(module) or _installed(module)


def _named_by_the_key(module) -> bool:
    """The engine's, a versioned package's, or Python's standard library's (a
    module of that name found elsewhere, a user's `code` package, is not)."""
    root = _root(module)
    if root in PACKAGES | {"engine", "builtins"}:
        return True
    file = getattr(sys.modules.get(root), "__file__", None)
    return root in sys.stdlib_module_names and (file is None or pathlib.Path(file).resolve().is_relative_to(_STDLIB))


def _installed(module) -> bool:
    """A module of a package installed in a site-packages folder."""
    file = getattr(sys.modules.get(_root(module)), "__file__", None)
    return file is not None and bool({"site-packages", "dist-packages"} & set(pathlib.Path(file).parts))


def _machinery(value) -> bool:
    """A descriptor Python or a factory makes for a class (a NamedTuple's
    field getter, a slot): what it reads is the instance's, described."""
    return isinstance(value, types.MemberDescriptorType | types.GetSetDescriptorType) or (
        type(value).__module__ in ("collections", "_collections") and type(value).__name__ == "_tuplegetter")


def _packaged_by_name(value) -> bool:
    """A versioned package's object that its module and name alone give back
    (jnp.abs, np.sin): not one made with values of its own (an itemgetter, a
    bound method, a dtype), which its name does not say."""
    module, qualname = getattr(value, "__module__", None), _qualname(value)
    if not isinstance(module, str) or not _versioned(module) or not qualname:
        return False
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is value
