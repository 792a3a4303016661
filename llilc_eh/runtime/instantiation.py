"""Code per generic instantiation: an exact, unshared instantiation the runtime asks for.

CoreCLR shares the code of a generic method or of a generic type's method between reference
type instantiations (`__Canon`, runtime/generic.py), but compiles one body per value type
instantiation: `List<int>::Sort`, `Dictionary<int,long>::TryInsert`, `M<double>`,
`Pair<Measure>::Pick` are each code of their own, in which `!0` / `!!0` are known types. Their
IL is the generic definition's; what makes them exact is the instantiation, which the runtime
gives in CORINFO_METHOD_INFO.args.sigInst (classInst / methInst: one class handle per type
parameter -- corinfo.h calls them "representative": for exact code they are the exact types;
for shared code they are `__Canon`, which is not ours here).

The reader binds them (`JitEE.bind_instantiation`): a `!n` / `!!n` of the method's own
signatures and body then classifies as the type argument -- sizes, alignments, field offsets of
`Pair<int>` vs `Pair<long>`, SysV classification, T-typed locals and arguments. Everything the
code names by token (box !!0, newarr !0, a call to `Pair<!!0>::Pick`, a MemberRef on a TypeSpec)
is resolved at install time by `resolveToken` in the method's own context (`info.ftn`, the exact
MethodDesc), so the runtime gives the exact class or method; a callee that is shared code gets
its instantiating stub (install._call_target, JitInfo.exact_method).

A class handle becomes a type the reader knows through:
  asCorInfoType            a primitive (enums as their underlying type, as the reader's own
                           normalisation does: the same layout) or a value class / class;
  getClassNameFromMetadata namespace and name of a value class;
  getClassModule → getModuleAssembly → getAssemblyName   its assembly (hence its file);
  getTypeInstantiationArgument   the arguments of a generic value class (KeyValuePair<int,long>).
A reference-type argument of exact code (rare: code is shared for those) is an object reference
to the reader; `__Canon` anywhere means shared code and is declined here.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from .service import Declined
from .structs import CORINFO_METHOD_INFO

INSTANCE_REASON = "generic method or method of a generic type"     # the decline class of this module
_MAX_DEPTH = 8
_MAX_ARGS = 64


class CORINFO_SIG_INST(ctypes.Structure):
    """corinfo.h (3.1) CORINFO_SIG_INST: the instantiation of a signature's type variables."""
    _fields_ = [
        ("classInstCount", ctypes.c_uint32),
        ("classInst", ctypes.POINTER(ctypes.c_void_p)),
        ("methInstCount", ctypes.c_uint32),
        ("methInst", ctypes.POINTER(ctypes.c_void_p)),
    ]


class CORINFO_SIG_INFO(ctypes.Structure):
    """corinfo.h (3.1) CORINFO_SIG_INFO (retType:8, flags:8, numArgs:16 share one 32-bit unit)."""
    _fields_ = [
        ("callConv", ctypes.c_uint32),
        ("retTypeClass", ctypes.c_void_p),
        ("retTypeSigClass", ctypes.c_void_p),
        ("retType_flags_numArgs", ctypes.c_uint32),
        ("sigInst", CORINFO_SIG_INST),
        ("args", ctypes.c_void_p),
        ("pSig", ctypes.c_void_p),
        ("cbSig", ctypes.c_uint32),
        ("scope", ctypes.c_void_p),
        ("token", ctypes.c_uint32),
    ]


class METHOD_INFO_WITH_SIGS(ctypes.Structure):
    """The whole CORINFO_METHOD_INFO: the head runtime/structs.py declares, then `args` and
    `locals` (8-aligned: at byte 48)."""
    _fields_ = [("head", CORINFO_METHOD_INFO), ("args", CORINFO_SIG_INFO), ("locals", CORINFO_SIG_INFO)]


# corinfo.h CorInfoType -> the ECMA-335 element type name of a primitive (llilc_eh.assembly.signatures.ElementType)
_PRIMITIVES = {0x2: "BOOLEAN", 0x3: "CHAR", 0x4: "I1", 0x5: "U1", 0x6: "I2", 0x7: "U2", 0x8: "I4", 0x9: "U4",
               0xA: "I8", 0xB: "U8", 0xC: "I", 0xD: "U", 0xE: "R4", 0xF: "R8"}
_CORINFO_TYPE_STRING, _CORINFO_TYPE_VALUECLASS, _CORINFO_TYPE_CLASS = 0x10, 0x13, 0x14
_TEXT = {"BOOLEAN": "bool", "CHAR": "char", "I1": "int8", "U1": "uint8", "I2": "int16", "U2": "uint16",
         "I4": "int32", "U4": "uint32", "I8": "int64", "U8": "uint64", "I": "native int", "U": "native uint",
         "R4": "float32", "R8": "float64"}


@dataclass(frozen=True)
class TypeArg:
    """One type argument as the runtime gave it: a primitive (`element`), an object reference
    (`kind` "class"), or a value class named by assembly, namespace and name with its own
    arguments."""

    kind: str                        # primitive | class | valuetype
    element: str | None = None       # primitive: ElementType name
    assembly: str = ""
    namespace: str = ""
    name: str = ""
    args: tuple["TypeArg", ...] = ()
    enclosing: tuple[str, ...] = ()  # a nested type's enclosing types, outermost first (its namespace is theirs)

    def __str__(self) -> str:
        if self.kind == "primitive":
            return _TEXT[self.element]
        name = "/".join(self.enclosing + (self.name,))
        text = f"{self.namespace}.{name}" if self.namespace else name
        if self.args:
            text += "<" + ",".join(str(a) for a in self.args) + ">"
        return text if self.kind == "valuetype" else f"class {text}"


@dataclass(frozen=True)
class Instantiation:
    """The exact instantiation of the method being compiled."""

    class_args: tuple[TypeArg, ...]
    method_args: tuple[TypeArg, ...]

    def name(self, method: str) -> str:
        """`Ns.Type::Name` with the arguments: `Pair`1<int32>::Pick`, `Program::Describe<float64>`."""
        owner, _, short = method.rpartition("::")
        if self.class_args:
            owner += "<" + ",".join(str(a) for a in self.class_args) + ">"
        if self.method_args:
            short += "<" + ",".join(str(a) for a in self.method_args) + ">"
        return f"{owner}::{short}"


# -- the runtime's answers ----------------------------------------------------------------------

def _string(jit, address: int) -> str:
    return ctypes.string_at(address).decode("utf-8", "replace") if address else ""


def type_arg(jit, cls: int, depth: int = 0, shared: bool = False) -> TypeArg:
    """The TypeArg of a class handle of an instantiation (module docstring); Declined for
    `__Canon` (shared code) and what cannot be named."""
    if not cls:
        raise Declined(f"{INSTANCE_REASON}: the runtime gave a null type argument")
    if depth > _MAX_DEPTH:
        raise Declined(f"{INSTANCE_REASON}: type arguments nested more than {_MAX_DEPTH} deep")
    corinfo = jit.trapped("asCorInfoType", cls) & 0xFFFFFFFF
    ns_out = ctypes.c_char_p()
    name = _string(jit, jit.trapped("getClassNameFromMetadata", cls, ctypes.addressof(ns_out)))
    namespace = (ns_out.value or b"").decode("utf-8", "replace")
    if name == "__Canon":
        if shared:      # shared code's canonical instantiation (generic.shared_instantiation)
            return TypeArg("class", name="__Canon")
        raise Declined("code shared between generic instantiations")
    if corinfo in _PRIMITIVES:
        return TypeArg("primitive", _PRIMITIVES[corinfo])
    if corinfo in (_CORINFO_TYPE_CLASS, _CORINFO_TYPE_STRING):
        # an object reference; its own arguments may still be __Canon (shared code)
        return TypeArg("class", namespace=namespace, name=name,
                       args=_instantiation_args(jit, cls, depth, shared))
    if corinfo != _CORINFO_TYPE_VALUECLASS:
        raise Declined(f"{INSTANCE_REASON}: type argument {namespace}.{name} is CorInfoType {corinfo:#x}")
    module = jit.trapped("getClassModule", cls)
    assembly = jit.assembly_name(jit.module_assembly(module))
    enclosing: tuple[str, ...] = ()
    if not namespace:     # nested (getClassNameFromMetadata names it alone), or no namespace at all
        namespace, enclosing = _nesting(jit, cls, name)
    return TypeArg("valuetype", assembly=assembly, namespace=namespace, name=name,
                   args=_instantiation_args(jit, cls, depth, shared), enclosing=enclosing)


_NAME_BUFFER = 4096      # UTF-16 units for appendClassName


def _nesting(jit, cls: int, name: str) -> tuple[str, tuple[str, ...]]:
    """(namespace, enclosing type names outermost first) of a value class, from the runtime's
    full name (appendClassName with the namespace: `Ns.Outer+Inner[args]`): a nested type's name
    alone is ambiguous (CoreLib has nine `Enumerator`s, a program two `Item`s)."""
    buf = (ctypes.c_uint16 * _NAME_BUFFER)()
    cursor, room = ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_int(_NAME_BUFFER)
    jit.trapped("appendClassName", ctypes.addressof(cursor), ctypes.addressof(room), cls, 1, 0, 0)
    units = list(buf)
    text = bytes(memoryview(buf)).decode("utf-16-le")[:units.index(0) if 0 in units else _NAME_BUFFER]
    parts = text.split("[", 1)[0].split("+")
    if len(parts) < 2 or parts[-1] != name:
        return "", ()
    namespace, _, outermost = parts[0].rpartition(".")
    return namespace, (outermost, *parts[1:-1])


def _instantiation_args(jit, cls: int, depth: int, shared: bool = False) -> tuple[TypeArg, ...]:
    """A generic class's own arguments, by getTypeInstantiationArgument until it gives none
    (the count is its name's arity, `Name`N`)."""
    out = []
    for i in range(_MAX_ARGS):
        arg = jit.trapped("getTypeInstantiationArgument", cls, i)
        if not arg:       # past the last (a nested type of a generic type has its parent's too, no `N)
            break
        out.append(type_arg(jit, arg, depth + 1, shared))
    return tuple(out)


def sig_instantiation(info_ptr: int) -> tuple[list[int], list[int]]:
    """(class handles, method handles) of CORINFO_METHOD_INFO.args.sigInst."""
    sig = METHOD_INFO_WITH_SIGS.from_address(info_ptr).args.sigInst
    classes = [sig.classInst[i] or 0 for i in range(sig.classInstCount)] if sig.classInst else []
    methods = [sig.methInst[i] or 0 for i in range(sig.methInstCount)] if sig.methInst else []
    return classes, methods


def exact_instantiation(jit, info, asm, rid: int) -> Instantiation | None:
    """The exact instantiation of MethodDef `rid` of `asm` as the runtime compiles it, None when
    neither the method nor its type is generic. Declined: shared code, or an instantiation
    whose arity is not the definition's."""
    from .install import generic_owners
    token = 0x06000000 | rid
    owner = asm.names.method_owner(rid)
    owners = generic_owners(asm)
    if not owners & {token, owner}:
        return None
    classes, methods = sig_instantiation(ctypes.addressof(info))
    want_class = _arity(asm, owner) if owner in owners else 0
    want_method = _arity(asm, token) if token in owners else 0
    if (len(classes), len(methods)) != (want_class, want_method):
        raise Declined(f"{INSTANCE_REASON}: the runtime's instantiation has {len(classes)} class and "
                       f"{len(methods)} method argument(s), the definition {want_class} and {want_method}")
    return Instantiation(tuple(type_arg(jit, c) for c in classes), tuple(type_arg(jit, m) for m in methods))


#: the negative control (install.DAMAGES): every int32 type argument bound as int64 in the reader
#: (the runtime still runs the int32 instantiation): offsets and sizes of T-typed data go wrong
DAMAGE = "instantiation-int64"


def bind_instantiation(ee, token: int, inst: Instantiation | None, file_of, damage: str | None = None) -> None:
    """Bind (or, None, unbind) the method's exact instantiation in the JIT-EE the reader asks
    (the metadata one's `bind_instantiation`, also behind the runtime-backed one): a type
    argument becomes the reader's description of it -- ("primitive", ElementType name),
    ("class",), or ("valuetype", file, namespace, name, arguments) -- `file_of(assembly name)`
    finding a value class's file."""
    if inst is None:
        ee.bind_instantiation(None, (), ())
        return

    def describe(arg: TypeArg):
        if arg.kind == "primitive":
            return ("primitive", "I8" if damage == DAMAGE and arg.element == "I4" else arg.element)
        if arg.kind == "class":
            return ("class",)
        path = file_of(arg.assembly)
        if path is None:
            raise Declined(f"{INSTANCE_REASON}: type argument {arg}: assembly {arg.assembly!r} has no file")
        return ("valuetype", str(path), arg.namespace, arg.name, tuple(describe(a) for a in arg.args),
                arg.enclosing)
    from ..errors import LlilcEhError
    try:
        ee.bind_instantiation(token, tuple(describe(a) for a in inst.class_args),
                              tuple(describe(a) for a in inst.method_args))
    except LlilcEhError as e:       # a type argument the reader cannot find
        ee.bind_instantiation(None, (), ())
        raise Declined(f"[{e.stage}/{e.kind}] {e.describe()}") from None


def _arity(asm, owner_token: int) -> int:
    """How many generic parameters a TypeDef or MethodDef token of `asm` declares (the
    GenericParam table counted once per assembly)."""
    counts = getattr(asm, "_llilc_generic_arity", None)
    if counts is None:
        table = asm.pe.net.mdtables.GenericParam
        counts = {}
        for row in (table.rows if table is not None else ()):
            kind = 0x06 if type(row.Owner.table).__name__ == "MethodDef" else 0x02
            key = kind << 24 | row.Owner.row_index
            counts[key] = counts.get(key, 0) + 1
        asm._llilc_generic_arity = counts
    return counts.get(owner_token, 0)


__all__ = ["DAMAGE", "INSTANCE_REASON", "bind_instantiation", "Instantiation", "METHOD_INFO_WITH_SIGS", "TypeArg", "exact_instantiation",
           "sig_instantiation", "type_arg"]
