"""The fused kernel's body as C source: one point's whole solve, one thread.

The body (engine.solve.kernel.body.KernelBody) is a function of lane vectors. Traced
for a block of ONE lane, every value in its jaxpr has a single element, so
every value is a C scalar, and what Pallas has to run in lockstep becomes
plain per-thread control flow: `any_lane(mask)` (a max over the lane axis)
is the thread's own mask, `lax.cond(any_lane(x), ...)` a real `if`, and
`lax.while_loop` a `while` that ends when this point is done, not when the
slowest point of a block is.

The same text compiles as C for the host (engine.solve.kernel.host, the
tests) and as CUDA C++ through NVRTC (engine.solve.kernel.cuda): the only
differences are behind the preprocessor (`__CUDACC__`: qualifiers, the batch
entry; `__CUDACC_RTC__`: NVRTC has no standard headers).

The arithmetic follows XLA's semantics, not C's defaults, so the generated
kernel agrees with the Pallas kernel and the lanes solver (see _PRELUDE and
the rules): max/min propagate NaN and order -0 below +0; `round` as its
rounding_method says; integer_pow by XLA's repeated squaring; float -> int
conversion saturates and sends NaN to 0 (what XLA:CPU does); integer
division by zero gives -1 and remainder by zero the dividend; integer
add/sub/mul/neg wrap. Literals are exact (hex floats; NaN and infinities by
their bit patterns).

Values are C scalars, except the arrays a solve writes in place (the event
log: engine.solve.kernel.system._EventLog): a C array made by a broadcast,
written one element at a time (`dynamic_update_slice`), read one element at
a time (`slice`, `dynamic_slice`), and carried through loops and branches
without a copy. Such an array is used linearly: once written, carried or
passed on, its earlier value is never read again (checked as the C is
written), so every update can be made in place; passed to a loop or a branch
that only reads it (the fused kernel's table of sample times), it stays
readable after them.

A value with more than one element elsewhere, a dtype without a C type, or a
primitive without a rule is refused (KernelUnsupported, an Unfusable naming
it): the fused solver then uses the Pallas backend.
"""

import hashlib
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core

from engine._jax_setup import float64_here
from engine.solve.kernel.jaxpr import _CALLS, Unfusable

# The batch entries' names in the generated source.
HOST_ENTRY = "rs_solve_batch"
ROWS_ENTRY = "rs_solve_rows"  # the host's entry writing the outputs by rows (row_groups)
CUDA_ENTRY = "rs_fused_kernel"


class KernelUnsupported(Unfusable):
    """A kernel body the C generator has no translation for (the reason names it)."""


class KernelSource(NamedTuple):
    """Generated source: its text, the dtypes of the batch entry's input and
    output columns (in order), and a digest of the text (the cache key)."""

    text: str
    in_dtypes: tuple
    out_dtypes: tuple
    digest: str

    @property
    def by_rows(self) -> bool:
        """Whether the host's FFI handler writes the outputs by rows: a generated
        source of more than ROW_OUTPUTS outputs has the entry (row_groups)."""
        return row_groups(self.out_dtypes) is not None and f"void {ROWS_ENTRY}(" in self.text

    @classmethod
    def of(cls, text: str, in_dtypes, out_dtypes) -> "KernelSource":
        return cls(text, tuple(np.dtype(d) for d in in_dtypes), tuple(np.dtype(d) for d in out_dtypes),
                   hashlib.sha256(text.encode()).hexdigest())


# ---- types and literals

_C_TYPES = {
    np.dtype(np.float64): "double", np.dtype(np.float32): "float",
    np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t", np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t", np.dtype(np.bool_): "bool",
}
# The unsigned type an integer's wrapping arithmetic is done in.
_UNSIGNED = {"int8_t": "uint8_t", "int16_t": "uint16_t", "int32_t": "uint32_t", "int64_t": "uint64_t"}


def c_type(dtype, where: str = "") -> str:
    dtype = np.dtype(dtype)
    if dtype not in _C_TYPES:
        raise KernelUnsupported(f"{where or 'a value'} has dtype {dtype}, which the C kernel does not carry")
    return _C_TYPES[dtype]


def _is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def _is_bool(dtype) -> bool:
    return np.dtype(dtype) == np.dtype(np.bool_)


def _is_signed(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.signedinteger)


def literal(value, dtype) -> str:
    """An exact C literal of `value` as `dtype`."""
    dtype = np.dtype(dtype)
    ctype = c_type(dtype)
    value = np.asarray(value, dtype)[()]
    if _is_bool(dtype):
        return "true" if value else "false"
    if dtype == np.float64:
        v = float(value)
        if not np.isfinite(v):  # NaN (payload and sign kept) and infinities by their bits
            return f"rs_f64_bits(0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}ULL)"
        return f"({v.hex()})" if v.hex().startswith("-") else v.hex()
    if dtype == np.float32:
        v = float(value)
        if not np.isfinite(v):
            return f"rs_f32_bits(0x{struct.unpack('<I', struct.pack('<f', v))[0]:08x}U)"
        text = v.hex() + "f"
        return f"({text})" if text.startswith("-") else text
    v = int(value)
    if _is_signed(dtype):
        bits = dtype.itemsize * 8
        if v == -(1 << (bits - 1)):  # the most negative value has no literal of its own
            return f"(({ctype})(-{(1 << (bits - 1)) - 1}LL - 1))"
        return f"(({ctype}){v}LL)"
    return f"(({ctype}){v}ULL)"


# ---- the prelude: types, qualifiers and the helpers with XLA's semantics

_PRELUDE = r"""
/* Generated by engine.solve.kernel.c_source from a traced jaxpr: do not edit. */
#if defined(__CUDACC_RTC__)
/* NVRTC: no standard headers; its math functions are built in. */
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#elif defined(__CUDACC__)
#include <stdint.h>
#else
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#endif
#if defined(__CUDACC__)
#define RS_FN static __device__ __forceinline__
#define RS_POINT static __device__
#define RS_ISFINITE(x) isfinite(x)
RS_FN double rs_f64_bits(uint64_t b) { return __longlong_as_double((long long)b); }
RS_FN float rs_f32_bits(uint32_t b) { return __int_as_float((int)b); }
#else
#define RS_FN static inline
#define RS_POINT static
#define RS_ISFINITE(x) isfinite(x)
RS_FN double rs_f64_bits(uint64_t b) { double d; memcpy(&d, &b, sizeof d); return d; }
RS_FN float rs_f32_bits(uint32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }
#endif
/* XLA's max and min: a NaN operand wins, and -0 < +0 (for equal zeros the sum
   is +0 unless both are -0, the negated sum of the negations -0 unless both are +0). */
RS_FN double rs_max_f64(double a, double b) {
  if (a != a) return a; if (b != b) return b; if (a == b) return a == 0 ? a + b : a; return a > b ? a : b; }
RS_FN double rs_min_f64(double a, double b) {
  if (a != a) return a; if (b != b) return b; if (a == b) return a == 0 ? -((-a) + (-b)) : a; return a < b ? a : b; }
RS_FN float rs_max_f32(float a, float b) {
  if (a != a) return a; if (b != b) return b; if (a == b) return a == 0 ? a + b : a; return a > b ? a : b; }
RS_FN float rs_min_f32(float a, float b) {
  if (a != a) return a; if (b != b) return b; if (a == b) return a == 0 ? -((-a) + (-b)) : a; return a < b ? a : b; }
/* XLA's sign: NaN stays NaN, a zero keeps its sign. */
RS_FN double rs_sign_f64(double x) { return x != x ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
RS_FN float rs_sign_f32(float x) { return x != x ? x : x > 0 ? 1.0f : x < 0 ? -1.0f : x; }
"""


class _Emitter:
    """Writes C statements for a jaxpr, one named `const` local per value."""

    def __init__(self):
        self.lines: list[str] = []
        self.depth = 1
        self.count = 0
        # An array's C name -> the jaxpr variable holding its current value (arrays are used linearly).
        self.owner: dict[str, object] = {}

    def line(self, text: str):
        self.lines.append("  " * self.depth + text)

    def fresh(self, prefix="v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def define(self, dtype, expr: str, mutable: bool = False) -> str:
        name = self.fresh()
        self.line(f"{'' if mutable else 'const '}{c_type(dtype)} {name} = {expr};")
        return name

    def array(self, dtype, size: int, fill: str | None = None) -> str:
        """A new C array of `size` elements (filled with `fill` where given)."""
        name = self.fresh("a")
        self.line(f"{c_type(dtype)} {name}[{size}];")
        if fill is not None:
            self.line(f"for (int q = 0; q < {size}; ++q) {name}[q] = {fill};")
        return name

    def copy(self, into: str, source: str, size: int):
        self.line(f"for (int q = 0; q < {size}; ++q) {into}[q] = {source}[q];")

    def bind(self, var, atom: str):
        """`var` now holds `atom`; an array's earlier holder may no longer be read."""
        if _is_array(var.aval):
            self.owner[atom] = var

    def branch(self, closed, args) -> tuple[list[str], list[str]]:
        """A jaxpr emitted one level deeper into lines of its own: (lines, output atoms)."""
        start = len(self.lines)
        self.depth += 1
        outs = self.closed(closed, args)
        self.depth -= 1
        lines = self.lines[start:]
        del self.lines[start:]
        return lines, outs

    # ---- jaxprs

    def jaxpr(self, jaxpr, consts: Sequence[str], args: Sequence[str]) -> list[str]:
        """Emits `jaxpr` with its constvars and invars bound to the C atoms
        `consts` and `args`; returns the atoms of its outputs."""
        env = {}
        for var, atom in zip(jaxpr.constvars, consts, strict=True):
            env[var] = atom
        for var, atom in zip(jaxpr.invars, args, strict=True):
            env[var] = atom
            self.bind(var, atom)

        def read(atom):
            if isinstance(atom, jex_core.Literal):
                return _scalar_literal(atom.val, atom.aval.dtype, "a literal")
            name = env[atom]
            if _is_array(atom.aval) and self.owner.get(name) is not atom:
                raise KernelUnsupported("an array of the kernel body is read after it was written or passed on; "
                                        "the C kernel updates its arrays in place")
            return name

        for eqn in jaxpr.eqns:
            prim = eqn.primitive
            for v in list(eqn.invars) + list(eqn.outvars):
                if prim in _ARRAY_RULES or prim in _CALLS:  # these take arrays (their rules check how)
                    c_type(v.aval.dtype, f"{prim.name}'s value")
                else:
                    _check_scalar(v.aval, prim.name)
            ins = [read(a) for a in eqn.invars]
            rule = _RULES.get(prim)
            if rule is None:
                if prim in _CALLS:
                    rule = _call_rule(_CALLS[prim])
                else:
                    raise KernelUnsupported(f"the C kernel has no rule for the primitive {prim.name}")
            outs = rule(self, eqn, ins)
            outs = outs if prim.multiple_results else [outs]
            for var, atom in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, jex_core.DropVar):
                    env[var] = atom
                    self.bind(var, atom)
        outs = [read(a) for a in jaxpr.outvars]
        arrays = [atom for atom, var in zip(outs, jaxpr.outvars, strict=True) if _is_array(var.aval)]
        if len(set(arrays)) < len(arrays):
            raise KernelUnsupported("the kernel body returns one array twice; the C kernel updates its arrays in place")
        return outs

    def closed(self, closed, args: Sequence[str]) -> list[str]:
        if isinstance(closed, jex_core.ClosedJaxpr):
            consts = [_scalar_literal(c, np.asarray(c).dtype, "a constant") for c in closed.consts]
            return self.jaxpr(closed.jaxpr, consts, args)
        return self.jaxpr(closed, [], args)


def _size(aval) -> int:
    return int(np.prod(getattr(aval, "shape", ()), dtype=int))


def _is_array(aval) -> bool:
    """Whether a value is held as a C array (more than one element)."""
    return _size(aval) > 1


def _check_scalar(aval, where):
    shape = getattr(aval, "shape", None)
    if shape is None or int(np.prod(shape, dtype=int)) != 1:
        raise KernelUnsupported(f"{where} has a value of shape {shape}; the C kernel holds one element per value")
    c_type(aval.dtype, f"{where}'s value")


def _scalar_literal(value, dtype, where):
    array = np.asarray(value)
    if array.size != 1:
        raise KernelUnsupported(f"{where} of shape {array.shape}; the C kernel holds one element per value")
    return literal(array.reshape(()), dtype)


# ---- rules: (emitter, eqn, input atoms) -> output atom (or list for multiple results)


def _in_dtype(eqn, i=0):
    return eqn.invars[i].aval.dtype


def _out_dtype(eqn, i=0):
    return eqn.outvars[i].aval.dtype


def _libm(name: str, dtype) -> str:
    """The C math library's function `name` for a float dtype (f-suffixed for float32)."""
    return name + ("f" if np.dtype(dtype) == np.float32 else "")


def _helper(name: str, dtype) -> str:
    """The kernel's own helper `name` (rs_NAME_f32 / rs_NAME_f64) for a float dtype."""
    return f"rs_{name}_{'f32' if np.dtype(dtype) == np.float32 else 'f64'}"


def _math(name):
    """A C math function of floats (its f-suffixed form for float32)."""

    def rule(em, eqn, ins):
        dtype = _out_dtype(eqn)
        if not _is_float(dtype):
            raise KernelUnsupported(f"the C kernel has no rule for {eqn.primitive.name} of {np.dtype(dtype)}")
        return em.define(dtype, f"{_libm(name, dtype)}({', '.join(ins)})")

    return rule


def _float_expr(template):
    """A float-only expression, {0} {1} the operands, {one} a 1 of the dtype."""

    def rule(em, eqn, ins):
        dtype = _out_dtype(eqn)
        if not _is_float(dtype):
            raise KernelUnsupported(f"the C kernel has no rule for {eqn.primitive.name} of {np.dtype(dtype)}")
        f32 = np.dtype(dtype) == np.float32
        return em.define(dtype, template.format(*ins, one="1.0f" if f32 else "1.0", f="f" if f32 else ""))

    return rule


def _arith(op):
    """+ - * on any number; integers wrap (done in the unsigned type)."""

    def rule(em, eqn, ins):
        dtype = _out_dtype(eqn)
        t = c_type(dtype)
        a, b = ins
        if _is_float(dtype):
            return em.define(dtype, f"{a} {op} {b}")
        if _is_bool(dtype):
            raise KernelUnsupported(f"the C kernel has no rule for {eqn.primitive.name} of bool")
        u = _UNSIGNED.get(t, t)
        return em.define(dtype, f"({t})(({u}){a} {op} ({u}){b})")

    return rule


def _div(em, eqn, ins):
    dtype = _out_dtype(eqn)
    a, b = ins
    if _is_float(dtype):
        return em.define(dtype, f"{a} / {b}")
    t = c_type(dtype)
    if _is_signed(dtype):  # XLA: x / 0 = -1, MIN / -1 = MIN (C: undefined)
        low = literal(np.iinfo(dtype).min, dtype)
        return em.define(dtype, f"{b} == 0 ? ({t})-1 : ({b} == -1 && {a} == {low}) ? {a} : ({t})({a} / {b})")
    return em.define(dtype, f"{b} == 0 ? ({t})~({t})0 : ({t})({a} / {b})")


def _rem(em, eqn, ins):
    dtype = _out_dtype(eqn)
    a, b = ins
    if _is_float(dtype):  # the sign of the dividend, as C's fmod
        return em.define(dtype, f"{_libm('fmod', dtype)}({a}, {b})")
    t = c_type(dtype)
    if _is_signed(dtype):  # XLA: x % 0 = x, MIN % -1 = 0
        return em.define(dtype, f"{b} == 0 ? {a} : {b} == -1 ? ({t})0 : ({t})({a} % {b})")
    return em.define(dtype, f"{b} == 0 ? {a} : ({t})({a} % {b})")


def _neg(em, eqn, ins):
    dtype = _out_dtype(eqn)
    t = c_type(dtype)
    (a,) = ins
    if _is_float(dtype):
        return em.define(dtype, f"-{a}")
    return em.define(dtype, f"({t})(0 - ({_UNSIGNED.get(t, t)}){a})")


def _abs(em, eqn, ins):
    dtype = _out_dtype(eqn)
    (a,) = ins
    if _is_float(dtype):
        return em.define(dtype, f"{_libm('fabs', dtype)}({a})")
    t = c_type(dtype)
    if not _is_signed(dtype):
        return a
    return em.define(dtype, f"{a} < 0 ? ({t})(0 - ({_UNSIGNED[t]}){a}) : {a}")


def _sign(em, eqn, ins):
    dtype = _out_dtype(eqn)
    (a,) = ins
    if _is_float(dtype):
        return em.define(dtype, f"{_helper('sign', dtype)}({a})")
    t = c_type(dtype)
    if _is_signed(dtype):
        return em.define(dtype, f"({t})(({a} > 0) - ({a} < 0))")
    return em.define(dtype, f"({t})({a} > 0)")


def _extremum(which):
    def rule(em, eqn, ins):
        dtype = _out_dtype(eqn)
        a, b = ins
        if _is_float(dtype):
            return em.define(dtype, f"{_helper(which, dtype)}({a}, {b})")
        if _is_bool(dtype):
            return em.define(dtype, f"{a} {'||' if which == 'max' else '&&'} {b}")
        return em.define(dtype, f"{a} {'>' if which == 'max' else '<'} {b} ? {a} : {b}")

    return rule


def _clamp(em, eqn, ins):  # lax.clamp(lo, x, hi) = min(max(x, lo), hi)
    lo, x, hi = ins
    dtype = _out_dtype(eqn)
    if _is_float(dtype):
        return em.define(dtype, f"{_helper('min', dtype)}({_helper('max', dtype)}({x}, {lo}), {hi})")
    low = em.define(dtype, f"{x} > {lo} ? {x} : {lo}")
    return em.define(dtype, f"{low} < {hi} ? {low} : {hi}")


def _compare(op):
    def rule(em, eqn, ins):
        a, b = ins
        return em.define(np.bool_, f"{a} {op} {b}")

    return rule


def _logical(bool_op, int_op):
    def rule(em, eqn, ins):
        dtype = _out_dtype(eqn)
        a, b = ins
        if _is_bool(dtype):
            return em.define(dtype, f"{a} {bool_op} {b}")
        if _is_float(dtype):
            raise KernelUnsupported(f"the C kernel has no rule for {eqn.primitive.name} of {np.dtype(dtype)}")
        return em.define(dtype, f"({c_type(dtype)})({a} {int_op} {b})")

    return rule


def _not(em, eqn, ins):
    dtype = _out_dtype(eqn)
    (a,) = ins
    if _is_bool(dtype):
        return em.define(dtype, f"!{a}")
    if _is_float(dtype):
        raise KernelUnsupported(f"the C kernel has no rule for not of {np.dtype(dtype)}")
    return em.define(dtype, f"({c_type(dtype)})~{a}")


def _shift(kind):
    def rule(em, eqn, ins):
        dtype = _out_dtype(eqn)
        if not np.issubdtype(np.dtype(dtype), np.integer):
            raise KernelUnsupported(f"the C kernel has no rule for {eqn.primitive.name} of {np.dtype(dtype)}")
        t = c_type(dtype)
        u = _UNSIGNED.get(t, t)
        bits = np.dtype(dtype).itemsize * 8
        a, b = ins
        out_of_range = f"({u}){b} >= {bits}u"  # XLA: a shift by a negative or too large amount
        if kind == "left":
            return em.define(dtype, f"{out_of_range} ? ({t})0 : ({t})(({u}){a} << {b})")
        if kind == "logical":
            return em.define(dtype, f"{out_of_range} ? ({t})0 : ({t})(({u}){a} >> {b})")
        if not _is_signed(dtype):
            return em.define(dtype, f"{out_of_range} ? ({t})0 : ({t})({a} >> {b})")
        return em.define(dtype, f"{out_of_range} ? ({t})({a} < 0 ? -1 : 0) : ({t})({a} >> {b})")

    return rule


def _select_n(em, eqn, ins):
    which, *cases = ins
    dtype = _out_dtype(eqn)
    if len(cases) == 1:
        return cases[0]
    if _is_bool(_in_dtype(eqn)):
        return em.define(dtype, f"{which} ? {cases[1]} : {cases[0]}")
    # An int32 index: out of range is undefined in XLA; here it takes the last case.
    expr = cases[-1]
    for k in reversed(range(len(cases) - 1)):
        expr = f"{which} == {k} ? {cases[k]} : ({expr})"
    return em.define(dtype, expr)


def _convert(em, eqn, ins):
    (a,) = ins
    src, dst = np.dtype(_in_dtype(eqn)), np.dtype(_out_dtype(eqn))
    t = c_type(dst)
    if src == dst:
        return a
    if _is_bool(dst):
        return em.define(dst, f"{a} != 0")
    if _is_float(src) and np.issubdtype(dst, np.integer):
        # XLA:CPU saturates and sends NaN to 0 (C: undefined). The bounds are
        # powers of two, exact in every float type.
        info = np.iinfo(dst)
        low, high = float(info.min), float(info.max) + 1.0
        lo_lit, hi_lit = literal(low, src), literal(high, src)
        return em.define(dst, f"{a} != {a} ? ({t})0 : {a} <= {lo_lit} ? {literal(info.min, dst)} : "
                              f"{a} >= {hi_lit} ? {literal(info.max, dst)} : ({t}){a}")
    return em.define(dst, f"({t}){a}")


def _integer_pow(em, eqn, ins):
    """As jax lowers it (lax._integer_pow): repeated squaring, then 1/x^n for n < 0."""
    (x,) = ins
    y = eqn.params["y"]
    dtype = _out_dtype(eqn)
    one = literal(1, dtype)
    if y == 0:
        return one
    mul = _arith("*")
    reciprocal, y = y < 0, abs(y)
    acc = None

    class _Eqn:  # the product's dtype for _arith
        outvars = eqn.outvars

    while y > 0:
        if y & 1:
            acc = x if acc is None else mul(em, _Eqn, [acc, x])
        y >>= 1
        if y > 0:
            x = mul(em, _Eqn, [x, x])
    if reciprocal:
        if not _is_float(dtype):
            raise KernelUnsupported("integer_pow with a negative exponent of an integer")
        return em.define(dtype, f"{one} / {acc}")
    return acc


def _pow(em, eqn, ins):
    a, b = ins
    dtype = _out_dtype(eqn)
    if not _is_float(dtype):
        raise KernelUnsupported(f"the C kernel has no rule for pow of {np.dtype(dtype)}")
    t = c_type(dtype)
    fn = "powf" if t == "float" else "pow"
    return em.define(dtype, f"{fn}({a}, ({t}){b})")


def _round(em, eqn, ins):
    (a,) = ins
    method = int(eqn.params.get("rounding_method", 0))
    # 0: away from zero (C round), 1: to nearest even (rint in the default rounding mode).
    return _math("round" if method == 0 else "rint")(em, eqn, [a])


def _is_finite(em, eqn, ins):
    (a,) = ins
    return em.define(np.bool_, f"RS_ISFINITE({a})")


def _identity(em, eqn, ins):
    return ins[0]


def _all_inputs(em, eqn, ins):
    return list(ins)


def _zero(em, eqn, ins):  # iota, argmax, argmin over one element
    return literal(0, _out_dtype(eqn))


def _call_rule(param):
    def rule(em, eqn, ins):
        return em.closed(eqn.params[param], ins)

    return rule


def _while(em, eqn, ins):
    """A per-thread loop: the carry lives in mutable locals; each iteration's
    new values go to fresh temporaries before the carry is assigned (a body
    may swap its carried values). A carried array is its initial value's C
    array, updated in place (copied back only where the body returns another)."""
    params = eqn.params
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    arrays = [_is_array(v.aval) for v in eqn.outvars]
    carried = [atom for atom, array in zip(init, arrays, strict=True) if array]
    if len(set(carried)) < len(carried):
        raise KernelUnsupported("a loop carries one array twice; the C kernel updates its arrays in place")
    carry = [atom if array else em.define(v.aval.dtype, atom, mutable=True)
             for v, atom, array in zip(eqn.outvars, init, arrays, strict=True)]
    holders = {atom: em.owner.get(atom) for atom in list(cond_consts) + list(body_consts)}
    em.line("for (;;) {")
    em.depth += 1
    (pred,) = _closed_with(em, cond, list(cond_consts) + carry)
    # The condition only reads: every array it was given still holds its value
    # (each iteration's body then reads its carry as the condition saw it).
    _still_owned(em, cond, list(cond_consts) + carry, "a loop's condition writes or passes on an array")
    em.line(f"if (!({pred})) break;")
    new = _closed_with(em, body, list(body_consts) + carry)
    # An array from outside the loop is the same in every iteration: its body only reads it.
    _still_owned(em, body, list(body_consts), "a loop writes or passes on an array defined outside it")
    temps = [None if array else em.define(v.aval.dtype, atom)
             for v, atom, array in zip(eqn.outvars, new, arrays, strict=True)]
    for name, temp, atom, v in zip(carry, temps, new, eqn.outvars, strict=True):
        if temp is not None:
            em.line(f"{name} = {temp};")
        elif atom != name:
            if atom in carry:
                raise KernelUnsupported("a loop swaps its carried arrays; the C kernel updates its arrays in place")
            em.copy(name, atom, _size(v.aval))
    em.depth -= 1
    em.line("}")
    # The loop only read its constants (checked above): they are still their holders' to read.
    em.owner.update({atom: var for atom, var in holders.items() if var is not None})
    return carry


def _still_owned(em, closed, args, what: str):
    """Refuse (`what`) where a jaxpr emitted with `args` changed an array it was given."""
    jaxpr = closed.jaxpr if isinstance(closed, jex_core.ClosedJaxpr) else closed
    for var, atom in zip(jaxpr.invars, args, strict=False):  # args: its leading invars
        if _is_array(var.aval) and em.owner.get(atom) is not var:
            raise KernelUnsupported(f"{what}; the C kernel updates its arrays in place")


def _closed_with(em, closed, args):
    """A ClosedJaxpr whose leading invars take `args` (a loop's consts and carry)."""
    consts = [_scalar_literal(c, np.asarray(c).dtype, "a constant") for c in closed.consts]
    return em.jaxpr(closed.jaxpr, consts, args)


def _cond(em, eqn, ins):
    """An if/else-if chain; an index out of range takes the last branch (as XLA).

    An array result is the array of an operand where every branch returns
    that one (written in place, or passed through), else a new array each
    branch copies its own into."""
    index, *operands = ins
    branches = eqn.params["branches"]
    owners = dict(em.owner)
    emitted, read_only = [], set(operands)
    for branch in branches:  # each from the same arrays, in lines of its own
        em.owner = dict(owners)
        emitted.append(em.branch(branch, operands))
        read_only &= _only_read(em, branch, operands, emitted[-1][1])
    outs = []
    for j, v in enumerate(eqn.outvars):
        results = {outs_[j] for _, outs_ in emitted}
        if not _is_array(v.aval):
            outs.append(em.define(v.aval.dtype, literal(0, v.aval.dtype), mutable=True))
        elif len(results) == 1 and next(iter(results)) in operands:
            outs.append(next(iter(results)))
        else:
            outs.append(em.array(v.aval.dtype, _size(v.aval)))
    if _is_bool(_in_dtype(eqn)):
        index = em.define(np.int32, f"(int32_t){index}")
    n = len(branches)
    for k, (lines, results) in enumerate(emitted):
        if n == 1:
            head = "{"
        elif k == 0:
            head = f"if ({index} == 0) {{"
        elif k < n - 1:
            head = f"}} else if ({index} == {k}) {{"
        else:
            head = "} else {"
        em.line(head)
        em.lines.extend(lines)
        em.depth += 1
        for name, atom, v in zip(outs, results, eqn.outvars, strict=True):
            if not _is_array(v.aval):
                em.line(f"{name} = {atom};")
            elif name != atom:
                em.copy(name, atom, _size(v.aval))
        em.depth -= 1
    em.line("}")
    # Passed on, read no more; but an array every branch only read keeps its value
    # (a loop-invariant array JAX made a loop's constant, read in a branch of its body).
    em.owner = {name: var for name, var in em.owner.items() if name not in operands}
    em.owner.update({name: owners[name] for name in read_only if name in owners})
    return outs


def _only_read(em, closed, operands, results) -> set:
    """The arrays among `operands` that a branch just emitted only read: still
    held by its inputs, and not among its results."""
    jaxpr = closed.jaxpr if isinstance(closed, jex_core.ClosedJaxpr) else closed
    return {atom for var, atom in zip(jaxpr.invars, operands, strict=True)
            if _is_array(var.aval) and em.owner.get(atom) is var and atom not in results}


# ---- arrays (see the module's docstring)


def _offset(em, shape, indices, dtypes=None) -> str:
    """The flat (row-major) offset of the element at `indices` (of `dtypes`;
    None: signed) in an array of `shape`, each index clamped into its axis
    (as XLA: an unsigned index past the end is the last)."""
    terms, stride = [], 1
    dtypes = dtypes or [None] * len(shape)
    for dim, index, dtype in reversed(list(zip(shape, indices, dtypes, strict=True))):
        last = dim - 1
        if last:
            if dtype is not None and np.issubdtype(dtype, np.unsignedinteger):
                expr = f"(uint64_t)({index}) > (uint64_t){last} ? {last} : (int64_t)({index})"
            else:
                expr = f"(int64_t)({index}) < 0 ? 0 : ((int64_t)({index}) > {last} ? {last} : (int64_t)({index}))"
            terms.append(f"{em.define(np.int64, expr)} * {stride}")
        stride *= dim
    return " + ".join(terms) or "0"


def _element_of(em, eqn, array, indices, what, dtypes=None):
    """One element of an array (at clamped `indices`), as a scalar."""
    if _size(eqn.outvars[0].aval) != 1:
        raise KernelUnsupported(f"{what} of several elements; the C kernel reads its arrays one element at a time")
    return em.define(_out_dtype(eqn), f"{array}[{_offset(em, eqn.invars[0].aval.shape, indices, dtypes)}]")


def _broadcast(em, eqn, ins):
    out = eqn.outvars[0].aval
    if not _is_array(out):
        return ins[0]
    if _is_array(eqn.invars[0].aval):
        raise KernelUnsupported("broadcast_in_dim of an array; the C kernel fills arrays from one value")
    return em.array(out.dtype, _size(out), ins[0])


def _update(em, eqn, ins):
    """dynamic_update_slice of one element, in place."""
    operand, update, *indices = ins
    aval = eqn.invars[0].aval
    if not _is_array(aval):
        return update
    if _is_array(eqn.invars[1].aval):
        raise KernelUnsupported("dynamic_update_slice of several elements; the C kernel writes one at a time")
    dtypes = [v.aval.dtype for v in eqn.invars[2:]]
    em.line(f"{operand}[{_offset(em, aval.shape, indices, dtypes)}] = {update};")
    return operand


def _slice(em, eqn, ins):
    if not _is_array(eqn.invars[0].aval):
        return ins[0]
    return _element_of(em, eqn, ins[0], eqn.params["start_indices"], "a slice")


def _dynamic_slice(em, eqn, ins):
    if not _is_array(eqn.invars[0].aval):
        return ins[0]
    return _element_of(em, eqn, ins[0], ins[1:], "a dynamic_slice", [v.aval.dtype for v in eqn.invars[1:]])


def _reshape(em, eqn, ins):
    """One element, or an array's same elements in the same (row-major) order."""
    if _is_array(eqn.invars[0].aval) and eqn.params.get("dimensions") is not None:
        raise KernelUnsupported("a reshape that transposes an array; the C kernel keeps arrays in row-major order")
    return ins[0]


def _rules():
    r = {
        lax.add_p: _arith("+"), lax.sub_p: _arith("-"), lax.mul_p: _arith("*"), lax.div_p: _div,
        lax.rem_p: _rem, lax.neg_p: _neg, lax.abs_p: _abs, lax.sign_p: _sign,
        lax.max_p: _extremum("max"), lax.min_p: _extremum("min"), lax.clamp_p: _clamp,
        lax.eq_p: _compare("=="), lax.ne_p: _compare("!="), lax.lt_p: _compare("<"), lax.le_p: _compare("<="),
        lax.gt_p: _compare(">"), lax.ge_p: _compare(">="),
        lax.and_p: _logical("&&", "&"), lax.or_p: _logical("||", "|"), lax.xor_p: _logical("!=", "^"),
        lax.not_p: _not,
        lax.shift_left_p: _shift("left"), lax.shift_right_logical_p: _shift("logical"),
        lax.shift_right_arithmetic_p: _shift("arithmetic"),
        lax.select_n_p: _select_n, lax.convert_element_type_p: _convert,
        lax.integer_pow_p: _integer_pow, lax.pow_p: _pow, lax.round_p: _round, lax.is_finite_p: _is_finite,
        lax.square_p: lambda em, eqn, ins: _arith("*")(em, eqn, [ins[0], ins[0]]),
        lax.rsqrt_p: _float_expr("{one} / sqrt{f}({0})"),
        lax.logistic_p: _float_expr("{one} / ({one} + exp{f}(-{0}))"),
        lax.while_p: _while, lax.cond_p: _cond,
        lax.broadcast_in_dim_p: _broadcast, lax.dynamic_update_slice_p: _update, lax.slice_p: _slice,
        lax.dynamic_slice_p: _dynamic_slice,
        # one element: the shape operations and reductions over the lane axis are identities
        lax.reshape_p: _reshape, lax.squeeze_p: _identity,
        lax.transpose_p: _identity, lax.rev_p: _identity, lax.copy_p: _identity, lax.concatenate_p: _identity,
        lax.reduce_max_p: _identity, lax.reduce_min_p: _identity, lax.reduce_sum_p: _identity,
        lax.reduce_prod_p: _identity, lax.reduce_and_p: _identity, lax.reduce_or_p: _identity,
        lax.reduce_xor_p: _identity,
        lax.argmax_p: _zero, lax.argmin_p: _zero, lax.iota_p: _zero,
        lax.optimization_barrier_p: _all_inputs,
    }
    for name, fn in {
        "sqrt": "sqrt", "cbrt": "cbrt", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log",
        "log1p": "log1p", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
        "atan2": "atan2", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh", "acosh": "acosh",
        "atanh": "atanh", "floor": "floor", "ceil": "ceil", "erf": "erf", "erfc": "erfc", "lgamma": "lgamma",
        "nextafter": "nextafter",
    }.items():
        r[getattr(lax, name + "_p")] = _math(fn)
    if hasattr(lax, "stop_gradient_p"):
        r[lax.stop_gradient_p] = _identity
    return r


_RULES = _rules()
# The rules that take arrays (engine.solve.kernel.system._EventLog's), each checking how.
_ARRAY_RULES = {lax.while_p, lax.cond_p, lax.broadcast_in_dim_p, lax.dynamic_update_slice_p, lax.slice_p,
                lax.dynamic_slice_p, lax.reshape_p, lax.squeeze_p}


# ---- the whole source


def from_jaxpr(closed, in_dtypes: Sequence, out_dtypes: Sequence) -> KernelSource:
    """The C source of a closed jaxpr of single-element inputs and outputs:
    `rs_solve_point(inputs..., outputs*...)` and the batch entries."""
    in_types = [c_type(d, "a kernel input") for d in in_dtypes]
    out_types = [c_type(d, "a kernel output") for d in out_dtypes]
    em = _Emitter()
    consts = [_scalar_literal(c, np.asarray(c).dtype, "a constant") for c in closed.consts]
    args = [f"in{i}" for i in range(len(in_types))]
    for var in closed.jaxpr.invars:
        _check_scalar(var.aval, "a kernel input")
    outs = em.jaxpr(closed.jaxpr, consts, args)
    for var in closed.jaxpr.outvars:
        _check_scalar(var.aval, "a kernel output")
    if len(outs) != len(out_types):
        raise ValueError(f"the kernel body returns {len(outs)} values for {len(out_types)} outputs")
    for i, (atom, var, t) in enumerate(zip(outs, closed.jaxpr.outvars, out_types, strict=True)):
        em.line(f"*out{i} = ({t}){atom};" if np.dtype(var.aval.dtype) != np.dtype(out_dtypes[i]) else
                f"*out{i} = {atom};")
    params = [f"const {t} in{i}" for i, t in enumerate(in_types)] + [f"{t}* out{i}" for i, t in enumerate(out_types)]
    point = "RS_POINT void rs_solve_point(" + ", ".join(params) + ") {\n" + "\n".join(em.lines) + "\n}\n"

    in_ptrs = [f"const {t}* __restrict__ in{i}" for i, t in enumerate(in_types)]
    out_ptrs = [f"{t}* __restrict__ out{i}" for i, t in enumerate(out_types)]
    call = ("rs_solve_point(" + ", ".join([f"in{i}[i]" for i in range(len(in_types))]
                                          + [f"&out{i}[i]" for i in range(len(out_types))]) + ");")
    entries = (
        "#if defined(__CUDACC__)\n"
        "/* One thread a point (n < 2^31). */\n"
        f'extern "C" __global__ void {CUDA_ENTRY}(int n, ' + ", ".join(in_ptrs + out_ptrs) + ") {\n"
        "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
        f"  if (i < n) {call}\n"
        "}\n"
        "#else\n"
        f"void {HOST_ENTRY}(int64_t n, " + ", ".join(p.replace("__restrict__", "restrict") for p in in_ptrs + out_ptrs)
        + ") {\n"
        f"  for (int64_t i = 0; i < n; ++i) {call}\n"
        "}\n"
        + _rows_entry(in_types, out_dtypes) +
        "#endif\n"
    )
    return KernelSource.of(_PRELUDE + point + entries, in_dtypes, out_dtypes)


def _rows_entry(in_types, out_dtypes) -> str:
    """The host's batch entry writing the outputs by rows where there are more
    than ROW_OUTPUTS (row_groups; otherwise none, and the source is as
    before): output column j, of dtype group g, is element k of point i's row
    in rows<g> (its k-th column of that dtype)."""
    groups = row_groups(out_dtypes)
    if groups is None:
        return ""
    where = {}
    for g, (_, columns) in enumerate(groups):
        where.update({j: f"&rows{g}[i * {len(columns)} + {k}]" for k, j in enumerate(columns)})
    params = [f"const {t}* restrict in{i}" for i, t in enumerate(in_types)] + [
        f"{c_type(dtype)}* restrict rows{g}" for g, (dtype, _) in enumerate(groups)]
    args = [f"in{i}[i]" for i in range(len(in_types))] + [where[j] for j in range(len(out_dtypes))]
    return (f"void {ROWS_ENTRY}(int64_t n, " + ", ".join(params) + ") {\n"
            "  for (int64_t i = 0; i < n; ++i) rs_solve_point(" + ", ".join(args) + ");\n"
            "}\n")


def generate(fn: Callable, in_dtypes: Sequence, out_dtypes: Sequence) -> KernelSource:
    """fn (a kernel body: lane vectors in, lane vectors out) traced for one lane, as C source.

    Traced with float64 enabled (as a run traces the body), so a float64 study
    keeps its constants."""
    with float64_here():
        closed = jax.make_jaxpr(fn)(*[jax.ShapeDtypeStruct((1,), jnp.dtype(d)) for d in in_dtypes])
    return from_jaxpr(closed, in_dtypes, out_dtypes)


# The start of every FFI handler's body (the C header of JAX's FFI included
# before it): the answer to XLA asking for its metadata (the header's API
# version, no traits: not captured in command buffers), nothing done but at the
# execute stage, then the arguments' and results' buffers as `a` and `r`.
_FFI_PROLOGUE = (
    "  if (frame->extension_start != NULL && frame->extension_start->type == XLA_FFI_Extension_Metadata) {\n"
    "    XLA_FFI_Metadata* m = ((XLA_FFI_Metadata_Extension*)frame->extension_start)->metadata;\n"
    "    m->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;\n"
    "    m->api_version.extension_start = NULL;\n"
    "    m->api_version.major_version = XLA_FFI_API_MAJOR;\n"
    "    m->api_version.minor_version = XLA_FFI_API_MINOR;\n"
    "    m->traits = 0;\n"
    "    m->state_type_id = (XLA_FFI_TypeId){0};\n"
    "    return NULL;\n"
    "  }\n"
    "  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;\n"
    "  XLA_FFI_Buffer** a = (XLA_FFI_Buffer**)frame->args.args;\n"
    "  XLA_FFI_Buffer** r = (XLA_FFI_Buffer**)frame->rets.rets;\n"
)


# A kernel of more output columns than this has a host entry (ROWS_ENTRY)
# that writes them as rows (row_groups), which the host's FFI handler calls:
# a point's outputs side by side, not each in a column of its own. A column
# is a write stream of its own, and past a few dozen of them a point's
# stores miss the cache: the rolling ball's 402 columns of samples (201
# times of x and x_dot) cost more than its solve (kernel alone, 20,000
# points on 2 cores: 0.41x the points/s without samples in columns, 0.57x
# in rows). The CUDA kernel keeps columns (a warp's stores to one column
# coalesce), as does the numpy path (HostKernel.run_numpy).
ROW_OUTPUTS = 64


def row_groups(out_dtypes) -> list[tuple[np.dtype, list[int]]] | None:
    """The host FFI handler's result buffers where the kernel has more than
    ROW_OUTPUTS output columns: one (points, columns) buffer per dtype, in
    the order of each dtype's first column, with the indices of its columns;
    None where every column is a buffer of its own."""
    if len(out_dtypes) <= ROW_OUTPUTS:
        return None
    groups: dict = {}
    for i, dtype in enumerate(out_dtypes):
        groups.setdefault(np.dtype(dtype), []).append(i)
    return list(groups.items())


def ffi_entry(source: KernelSource) -> str:
    """The host library's XLA FFI handler (engine.solve.kernel.host): XLA's
    buffers, the inputs then the outputs (a column each, or by rows: a
    buffer per dtype, KernelSource.by_rows), passed to the batch entry.
    Written against the C header of the installed jaxlib
    (`jax.ffi.include_dir()`), as the C++ helpers of `xla/ffi/api/api.h` do:
    asked for its metadata, it gives the header's API version and no traits;
    it runs at the execute stage only."""
    ins = [f"a[{i}]->data" for i in range(len(source.in_dtypes))]
    entry, results = HOST_ENTRY, len(source.out_dtypes)
    if source.by_rows:
        entry, results = ROWS_ENTRY, len(row_groups(source.out_dtypes))
    outs = [f"r[{i}]->data" for i in range(results)]
    return (
        '\n#include "xla/ffi/api/c_api.h"\n'
        "XLA_FFI_Error* rs_ffi_batch(XLA_FFI_CallFrame* frame) {\n"
        + _FFI_PROLOGUE +
        f"  {entry}(a[0]->dims[0], " + ", ".join(ins + outs) + ");\n"
        "  return NULL;\n"
        "}\n")


# The CUDA launcher's FFI handler (engine.solve.kernel.cuda).
CUDA_FFI_HANDLER = "rs_ffi_cuda"

# The CUDA driver's entry points the launcher calls, by the names the driver
# library exports (cuda.h maps the push and pop of a context to their _v2),
# declared here with the driver's C types as plain pointers and integers: the
# launcher is built by the host's C compiler, with no CUDA headers.
_DRIVER = """
typedef int rs_CUresult;
typedef void* rs_CUcontext;
typedef void* rs_CUmodule;
typedef void* rs_CUfunction;
typedef void* rs_CUstream;
static rs_CUresult (*rs_cuCtxGetCurrent)(rs_CUcontext*);
static rs_CUresult (*rs_cuPointerGetAttribute)(void*, int, unsigned long long);
static rs_CUresult (*rs_cuCtxPushCurrent)(rs_CUcontext);
static rs_CUresult (*rs_cuCtxPopCurrent)(rs_CUcontext*);
static rs_CUresult (*rs_cuModuleLoadData)(rs_CUmodule*, const void*);
static rs_CUresult (*rs_cuModuleGetFunction)(rs_CUfunction*, rs_CUmodule, const char*);
static rs_CUresult (*rs_cuLaunchKernel)(rs_CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, rs_CUstream, void**, void**);
static rs_CUresult (*rs_cuGetErrorName)(rs_CUresult, const char**);
#define RS_CU_POINTER_ATTRIBUTE_CONTEXT 1
#define RS_MAX_CONTEXTS 64

static pthread_mutex_t rs_lock = PTHREAD_MUTEX_INITIALIZER;
static int rs_driver_state;  /* 0: not loaded yet, 1: loaded, -1: failed */
static rs_CUcontext rs_contexts[RS_MAX_CONTEXTS];
static rs_CUfunction rs_functions[RS_MAX_CONTEXTS];
static int rs_context_count;
static _Thread_local char rs_message[600];

static XLA_FFI_Error* rs_error(const XLA_FFI_Api* api, const char* what, rs_CUresult result) {
  const char* name = NULL;
  if (result != 0 && rs_cuGetErrorName != NULL) rs_cuGetErrorName(result, &name);
  if (result != 0)
    snprintf(rs_message, sizeof rs_message, "rollsweep's CUDA kernel: %s failed: %s (%d)", what,
             name != NULL ? name : "unknown error", result);
  else
    snprintf(rs_message, sizeof rs_message, "rollsweep's CUDA kernel: %s", what);
  XLA_FFI_Error_Create_Args e;
  e.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  e.extension_start = NULL;
  e.message = rs_message;
  e.errc = XLA_FFI_Error_Code_INTERNAL;
  return api->XLA_FFI_Error_Create(&e);
}

/* The driver's entry points, looked up once (under rs_lock). */
static int rs_load_driver(void) {
  if (rs_driver_state != 0) return rs_driver_state;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == NULL) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
  if (lib == NULL) return rs_driver_state = -1;
  *(void**)&rs_cuCtxGetCurrent = dlsym(lib, "cuCtxGetCurrent");
  *(void**)&rs_cuPointerGetAttribute = dlsym(lib, "cuPointerGetAttribute");
  *(void**)&rs_cuCtxPushCurrent = dlsym(lib, "cuCtxPushCurrent_v2");
  *(void**)&rs_cuCtxPopCurrent = dlsym(lib, "cuCtxPopCurrent_v2");
  *(void**)&rs_cuModuleLoadData = dlsym(lib, "cuModuleLoadData");
  *(void**)&rs_cuModuleGetFunction = dlsym(lib, "cuModuleGetFunction");
  *(void**)&rs_cuLaunchKernel = dlsym(lib, "cuLaunchKernel");
  *(void**)&rs_cuGetErrorName = dlsym(lib, "cuGetErrorName");
  int found = rs_cuCtxGetCurrent && rs_cuPointerGetAttribute && rs_cuCtxPushCurrent && rs_cuCtxPopCurrent &&
              rs_cuModuleLoadData && rs_cuModuleGetFunction && rs_cuLaunchKernel;
  return rs_driver_state = found ? 1 : -1;
}

/* The kernel in `context`, its module loaded from the embedded CUBIN the first time. */
static rs_CUresult rs_function(rs_CUcontext context, rs_CUfunction* function, const char** what) {
  for (int i = 0; i < rs_context_count; ++i)
    if (rs_contexts[i] == context) { *function = rs_functions[i]; return 0; }
  if (rs_context_count == RS_MAX_CONTEXTS) { *what = "more CUDA contexts than the launcher keeps"; return -1; }
  rs_CUmodule module;
  rs_CUresult result = rs_cuModuleLoadData(&module, rs_cubin);
  if (result != 0) { *what = "cuModuleLoadData"; return result; }
  result = rs_cuModuleGetFunction(function, module, "%(entry)s");
  if (result != 0) { *what = "cuModuleGetFunction"; return result; }
  rs_contexts[rs_context_count] = context;
  rs_functions[rs_context_count++] = *function;
  return 0;
}
"""


def cuda_launcher(source: KernelSource, cubin: bytes, threads: int) -> str:
    """The C of a host library whose XLA FFI handler launches the CUDA kernel
    (`source` compiled to `cubin`, embedded) on XLA's stream, one thread a
    point in blocks of `threads`: XLA's device buffers, the inputs then the
    outputs, are the kernel's arguments (engine.solve.kernel.cuda). It loads
    the driver (libcuda) when first called and the kernel's module once per
    CUDA context; a failure is the call's error, naming the driver's."""
    columns = len(source.in_dtypes) + len(source.out_dtypes)
    data = ",".join(str(b) for b in cubin)
    pointers = ", ".join([f"a[{i}]->data" for i in range(len(source.in_dtypes))]
                         + [f"r[{i}]->data" for i in range(len(source.out_dtypes))])
    return (
        "#include <dlfcn.h>\n#include <pthread.h>\n#include <stddef.h>\n#include <stdint.h>\n"
        '#include <stdio.h>\n#include "xla/ffi/api/c_api.h"\n'
        f"/* The CUBIN of kernel source {source.digest}. */\n"
        f"static const unsigned char rs_cubin[{len(cubin)}] __attribute__((aligned(16))) = {{{data}}};\n"
        + _DRIVER.replace("%(entry)s", CUDA_ENTRY)
        + f"\nXLA_FFI_Error* {CUDA_FFI_HANDLER}(XLA_FFI_CallFrame* frame) {{\n"
        + _FFI_PROLOGUE +
        "  const XLA_FFI_Api* api = frame->api;\n"
        "  int64_t count = a[0]->dims[0];\n"
        "  if (count == 0) return NULL;\n"
        '  if (count >= 2147483647) return rs_error(api, "a call takes fewer than 2^31 - 1 points", 0);\n'
        "  int n = (int)count;\n"
        "  XLA_FFI_Stream_Get_Args s;\n"
        "  s.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;\n"
        "  s.extension_start = NULL;\n"
        "  s.ctx = frame->ctx;\n"
        "  s.stream = NULL;\n"
        "  XLA_FFI_Error* failed = api->XLA_FFI_Stream_Get(&s);\n"
        "  if (failed != NULL) return failed;\n"
        "  pthread_mutex_lock(&rs_lock);\n"
        "  if (rs_load_driver() != 1) {\n"
        "    pthread_mutex_unlock(&rs_lock);\n"
        '    return rs_error(api, "the CUDA driver library (libcuda.so.1) could not be loaded", 0);\n'
        "  }\n"
        "  /* XLA calls with its device's context current; else the buffers' own is made current. */\n"
        "  rs_CUcontext context = NULL;\n"
        '  const char* what = "cuCtxGetCurrent";\n'
        "  rs_CUresult result = rs_cuCtxGetCurrent(&context);\n"
        "  int pushed = 0;\n"
        "  if (result == 0 && context == NULL) {\n"
        '    what = "cuPointerGetAttribute";\n'
        "    result = rs_cuPointerGetAttribute(&context, RS_CU_POINTER_ATTRIBUTE_CONTEXT,\n"
        "                                      (unsigned long long)(uintptr_t)a[0]->data);\n"
        '    if (result == 0) {\n'
        '      what = "cuCtxPushCurrent";\n'
        "      result = rs_cuCtxPushCurrent(context);\n"
        "      pushed = result == 0;\n"
        "    }\n"
        "  }\n"
        "  rs_CUfunction function = NULL;\n"
        "  if (result == 0) result = rs_function(context, &function, &what);\n"
        "  pthread_mutex_unlock(&rs_lock);\n"
        "  if (result == 0) {\n"
        f"    void* pointers[{columns}] = {{{pointers}}};\n"
        f"    void* params[{columns + 1}];\n"
        "    params[0] = &n;\n"
        f"    for (int i = 0; i < {columns}; ++i) params[i + 1] = &pointers[i];\n"
        f"    /* From the 64-bit count: n + {threads - 1} need not fit an int. */\n"
        f"    unsigned blocks = (unsigned)((count + {threads - 1}) / {threads});\n"
        '    what = "cuLaunchKernel";\n'
        f"    result = rs_cuLaunchKernel(function, blocks, 1, 1, {threads}, 1, 1, 0, (rs_CUstream)s.stream,\n"
        "                               params, NULL);\n"
        "  }\n"
        "  if (pushed) { rs_CUcontext popped; rs_cuCtxPopCurrent(&popped); }\n"
        "  return result == 0 ? NULL : rs_error(api, what, result);\n"
        "}\n")
