"""ECMA-335 II.23.2 signature blobs, decoded into structure.

A signature is kept as a tree of frozen dataclasses, not as text, because the reader's
JIT-EE interface asks structural questions of it (is this local a byref? how many
arguments does this call pop? is the catch class a generic instance?). Text is one view
of the tree: every node has `format(namer)`, which writes ilasm syntax as ILDasm and
monodis print it (`class [System.Runtime]System.Exception`, `!!0`, `int32[0...,0...]`,
`method void *(int32)`). Metadata tokens inside a signature are named by a *namer*, any
object with `type_name(token) -> str` (`MetadataNames` is one); without a namer a token
prints as `token(0x01000005)`.

The decoder follows the grammar of II.23.2 strictly enough to catch garbage and no
stricter than CoreCLR's SigParser, so every signature of a real assembly decodes:

- custom modifiers (CMOD_REQD / CMOD_OPT) may prefix any type, not only the positions
  the grammar lists, because CoreCLR accepts them anywhere; they become `ModifiedType`;
- PINNED is accepted only in a LocalVarSig, SENTINEL only in a vararg method signature,
  VOID only as a return type or a pointer target (anything else is not a signature);
- a blob must be consumed exactly: trailing bytes mean we misread it.

Every decoding failure raises `AssemblyError(kind="bad-signature")` whose reason says
what was wrong, at which offset, and shows the blob's first bytes.

Identifiers are never quoted (`.ctor`, `<>c`): the text is meant for humans and for
lookups such as `Ns.Type::Name`, which users type unquoted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from llilc_eh.errors import AssemblyError

__all__ = [
    "ElementType", "CallKind", "Namer",
    "TypeSig", "PrimitiveType", "NamedType", "GenericVar", "GenericInstType", "PointerType",
    "ByRefType", "SzArrayType", "ArrayShape", "ArrayType", "FnPtrType", "CustomMod",
    "ModifiedType", "PinnedType",
    "MethodSig", "FieldSig", "PropertySig", "LocalVarSig", "MethodSpecSig",
    "decode_compressed_uint", "decode_compressed_int", "decode_type_def_or_ref",
    "decode_type", "decode_type_spec", "decode_method_sig", "decode_field_sig",
    "decode_property_sig", "decode_locals_sig", "decode_method_spec",
    "decode_member_ref_sig", "decode_standalone_sig",
    "TYPE_DEF_OR_REF_TABLES", "MAX_NESTING",
]


class ElementType(enum.IntEnum):
    """ELEMENT_TYPE_* (II.23.1.16): the first byte of every type in a signature."""

    END = 0x00
    VOID = 0x01
    BOOLEAN = 0x02
    CHAR = 0x03
    I1 = 0x04
    U1 = 0x05
    I2 = 0x06
    U2 = 0x07
    I4 = 0x08
    U4 = 0x09
    I8 = 0x0A
    U8 = 0x0B
    R4 = 0x0C
    R8 = 0x0D
    STRING = 0x0E
    PTR = 0x0F
    BYREF = 0x10
    VALUETYPE = 0x11
    CLASS = 0x12
    VAR = 0x13
    ARRAY = 0x14
    GENERICINST = 0x15
    TYPEDBYREF = 0x16
    I = 0x18
    U = 0x19
    FNPTR = 0x1B
    OBJECT = 0x1C
    SZARRAY = 0x1D
    MVAR = 0x1E
    CMOD_REQD = 0x1F
    CMOD_OPT = 0x20
    INTERNAL = 0x21
    MODIFIER = 0x40
    SENTINEL = 0x41
    PINNED = 0x45


class CallKind(enum.IntEnum):
    """The low nibble of a signature's first byte (II.23.2.1-3, II.15.3)."""

    DEFAULT = 0x0
    C = 0x1
    STDCALL = 0x2
    THISCALL = 0x3
    FASTCALL = 0x4
    VARARG = 0x5
    FIELD = 0x6
    LOCAL_SIG = 0x7
    PROPERTY = 0x8
    UNMANAGED = 0x9        # .NET 5+: the calling convention is in modopts
    GENERICINST = 0xA      # a MethodSpec instantiation
    NATIVEVARARG = 0xB


# Flag bits of a signature's first byte.
GENERIC = 0x10
HASTHIS = 0x20
EXPLICITTHIS = 0x40

# TypeDefOrRefOrSpecEncoded (II.23.2.8): the tag in the low two bits selects the table.
TYPE_DEF_OR_REF_TABLES = (0x02, 0x01, 0x1B)   # TypeDef, TypeRef, TypeSpec

# Each nesting level consumes at least one byte, so a hostile blob could otherwise recurse
# as deep as it is long; real signatures nest a few dozen levels at most.
MAX_NESTING = 200

_PRIMITIVE_NAMES = {
    ElementType.VOID: "void",
    ElementType.BOOLEAN: "bool",
    ElementType.CHAR: "char",
    ElementType.I1: "int8",
    ElementType.U1: "uint8",
    ElementType.I2: "int16",
    ElementType.U2: "uint16",
    ElementType.I4: "int32",
    ElementType.U4: "uint32",
    ElementType.I8: "int64",
    ElementType.U8: "uint64",
    ElementType.R4: "float32",
    ElementType.R8: "float64",
    ElementType.STRING: "string",
    ElementType.OBJECT: "object",
    ElementType.TYPEDBYREF: "typedref",
    ElementType.I: "native int",
    ElementType.U: "native uint",
}

# ilasm's words for the unmanaged calling conventions (II.15.3).
_CALL_KIND_WORDS = {
    CallKind.DEFAULT: "",
    CallKind.VARARG: "vararg",
    CallKind.C: "unmanaged cdecl",
    CallKind.STDCALL: "unmanaged stdcall",
    CallKind.THISCALL: "unmanaged thiscall",
    CallKind.FASTCALL: "unmanaged fastcall",
    CallKind.UNMANAGED: "unmanaged",
    CallKind.NATIVEVARARG: "unmanaged vararg",
}


class Namer(Protocol):
    """Whatever turns a TypeDef/TypeRef/TypeSpec token into ilasm text."""

    def type_name(self, token: int) -> str: ...


class _TokenNamer:
    """The namer used without metadata: tokens stay visible as numbers."""

    @staticmethod
    def type_name(token: int) -> str:
        return f"token(0x{token:08X})"


_RAW = _TokenNamer()


# --------------------------------------------------------------------------- types

@dataclass(frozen=True)
class TypeSig:
    """A Type of II.23.2.12. Subclasses are the element-type forms."""

    def format(self, namer: Namer | None = None) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.format()

    def strip(self) -> "TypeSig":
        """The type without custom modifiers and PINNED, as the JIT sees a value's type."""
        return self


@dataclass(frozen=True)
class PrimitiveType(TypeSig):
    """VOID, BOOLEAN ... R8, STRING, OBJECT, TYPEDBYREF, I, U: one byte, no operands."""

    element_type: ElementType

    def format(self, namer=None):
        return _PRIMITIVE_NAMES[self.element_type]


@dataclass(frozen=True)
class NamedType(TypeSig):
    """CLASS or VALUETYPE followed by a TypeDefOrRefOrSpecEncoded token."""

    token: int
    value_type: bool

    def format(self, namer=None):
        keyword = "valuetype" if self.value_type else "class"
        return f"{keyword} {(namer or _RAW).type_name(self.token)}"


@dataclass(frozen=True)
class GenericVar(TypeSig):
    """VAR n (a type's generic parameter, `!n`) or MVAR n (a method's, `!!n`)."""

    number: int
    method: bool

    def format(self, namer=None):
        return ("!!" if self.method else "!") + str(self.number)


@dataclass(frozen=True)
class GenericInstType(TypeSig):
    """GENERICINST (CLASS|VALUETYPE) TypeDefOrRefEncoded GenArgCount Type+."""

    generic: NamedType
    args: tuple[TypeSig, ...]

    def format(self, namer=None):
        # ILDasm separates generic arguments with a bare comma.
        return f"{self.generic.format(namer)}<{','.join(a.format(namer) for a in self.args)}>"


@dataclass(frozen=True)
class PointerType(TypeSig):
    """PTR CustomMod* (Type | VOID)."""

    target: TypeSig

    def format(self, namer=None):
        return self.target.format(namer) + "*"


@dataclass(frozen=True)
class ByRefType(TypeSig):
    """BYREF Type: a managed pointer."""

    target: TypeSig

    def format(self, namer=None):
        return self.target.format(namer) + "&"


@dataclass(frozen=True)
class SzArrayType(TypeSig):
    """SZARRAY CustomMod* Type: a single-dimensional, zero-based vector."""

    element: TypeSig

    def format(self, namer=None):
        return self.element.format(namer) + "[]"


@dataclass(frozen=True)
class ArrayShape:
    """ArrayShape (II.23.2.13): Rank NumSizes Size* NumLoBounds LoBound*.

    Sizes and lower bounds may each cover only the first dimensions.
    """

    rank: int
    sizes: tuple[int, ...] = ()
    lower_bounds: tuple[int, ...] = ()

    def format(self) -> str:
        """ilasm bounds (II.14.2): `lo...hi`, `lo...`, `size`, or empty, per dimension."""
        if self.rank == 1 and not self.sizes and not self.lower_bounds:
            return "[...]"       # `[]` would read as a vector
        dims = []
        for i in range(self.rank):
            size = self.sizes[i] if i < len(self.sizes) else None
            low = self.lower_bounds[i] if i < len(self.lower_bounds) else None
            if low is not None and size is not None:
                dims.append(f"{low}...{low + size - 1}")
            elif low is not None:
                dims.append(f"{low}...")
            elif size is not None:
                dims.append(str(size))
            else:
                dims.append("")
        return "[" + ",".join(dims) + "]"


@dataclass(frozen=True)
class ArrayType(TypeSig):
    """ARRAY Type ArrayShape: a general (multi-dimensional or non-zero-based) array."""

    element: TypeSig
    shape: ArrayShape

    def format(self, namer=None):
        return self.element.format(namer) + self.shape.format()


@dataclass(frozen=True)
class FnPtrType(TypeSig):
    """FNPTR MethodDefSig|MethodRefSig: an unmanaged or managed function pointer."""

    method: "MethodSig"

    def format(self, namer=None):
        return "method " + self.method.format(namer, name="*")


@dataclass(frozen=True)
class CustomMod:
    """CMOD_REQD / CMOD_OPT TypeDefOrRefEncoded (II.23.2.7)."""

    required: bool
    token: int

    def format(self, namer=None):
        return f"{'modreq' if self.required else 'modopt'}({(namer or _RAW).type_name(self.token)})"


@dataclass(frozen=True)
class ModifiedType(TypeSig):
    """A type preceded by custom modifiers; `modifiers` are in blob order."""

    target: TypeSig
    modifiers: tuple[CustomMod, ...]

    def format(self, namer=None):
        # ilasm writes modifiers after the type; each one applies to everything on its
        # left, so the modifier nearest the type in the blob comes first.
        mods = " ".join(m.format(namer) for m in reversed(self.modifiers))
        return f"{self.target.format(namer)} {mods}"

    def strip(self):
        return self.target.strip()


@dataclass(frozen=True)
class PinnedType(TypeSig):
    """PINNED Type: a local the GC must not move while it holds a pointer (II.23.2.9)."""

    target: TypeSig

    def format(self, namer=None):
        return self.target.format(namer) + " pinned"

    def strip(self):
        return self.target.strip()


# ---------------------------------------------------------------------- signatures

@dataclass(frozen=True)
class MethodSig:
    """MethodDefSig / MethodRefSig / StandAloneMethodSig (II.23.2.1-3).

    `params` holds every parameter in order, the vararg ones included; `sentinel` is the
    index in `params` where the SENTINEL stood (the first variable argument), or None.
    """

    call_kind: CallKind
    has_this: bool
    explicit_this: bool
    generic_param_count: int
    return_type: TypeSig
    params: tuple[TypeSig, ...]
    sentinel: int | None = None

    @property
    def is_generic(self) -> bool:
        return self.generic_param_count > 0

    @property
    def fixed_params(self) -> tuple[TypeSig, ...]:
        return self.params if self.sentinel is None else self.params[:self.sentinel]

    @property
    def vararg_params(self) -> tuple[TypeSig, ...]:
        return () if self.sentinel is None else self.params[self.sentinel:]

    def prefix(self) -> str:
        """`instance explicit vararg` etc.: the words before the return type."""
        words = []
        if self.has_this:
            words.append("instance")
        if self.explicit_this:
            words.append("explicit")
        kind = _CALL_KIND_WORDS.get(self.call_kind, f"callconv({int(self.call_kind)})")
        if kind:
            words.append(kind)
        return " ".join(words)

    def param_list(self, namer: Namer | None = None) -> str:
        """`(int32, string, ..., int32)`: what overload matching compares."""
        parts = [p.format(namer) for p in self.params]
        if self.sentinel is not None:
            parts.insert(self.sentinel, "...")
        return "(" + ", ".join(parts) + ")"

    def format(self, namer: Namer | None = None, name: str | None = None, owner: str | None = None,
               generic_args: "MethodSpecSig | None" = None) -> str:
        """`instance void class X::Name(int32, string)`; without a name, `instance void(int32)`.

        `owner` is the declaring type as ILDasm writes a call target's parent (bare for
        a TypeDef/TypeRef, `class X<...>` for a TypeSpec). A generic method prints its
        instantiation when `generic_args` is given, else its arity as `<[n]>`.
        """
        head = self.prefix()
        text = (head + " " if head else "") + self.return_type.format(namer)
        if name is not None:
            text += " " + (f"{owner}::" if owner else "") + name
            if generic_args is not None:
                text += generic_args.format(namer)
            elif self.generic_param_count:
                text += f"<[{self.generic_param_count}]>"
        elif generic_args is not None:
            text += generic_args.format(namer)
        return text + self.param_list(namer)

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class FieldSig:
    """FIELD CustomMod* Type (II.23.2.4)."""

    type: TypeSig

    def format(self, namer: Namer | None = None, name: str | None = None, owner: str | None = None) -> str:
        text = self.type.format(namer)
        if name is not None:
            text += " " + (f"{owner}::" if owner else "") + name
        return text

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class PropertySig:
    """PROPERTY [HASTHIS] ParamCount CustomMod* Type Param* (II.23.2.5)."""

    has_this: bool
    type: TypeSig
    params: tuple[TypeSig, ...]

    def format(self, namer: Namer | None = None) -> str:
        head = "instance " if self.has_this else ""
        return f"{head}{self.type.format(namer)}({', '.join(p.format(namer) for p in self.params)})"

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class LocalVarSig:
    """LOCAL_SIG Count (TYPEDBYREF | CustomMod* Constraint* BYREF? Type)+ (II.23.2.6)."""

    locals: tuple[TypeSig, ...]

    def pinned(self, index: int) -> bool:
        """Whether local `index` is pinned (the PINNED may sit under custom modifiers)."""
        t = self.locals[index]
        while isinstance(t, ModifiedType):
            t = t.target
        return isinstance(t, PinnedType)

    def format(self, namer: Namer | None = None) -> str:
        return ".locals (" + ", ".join(t.format(namer) for t in self.locals) + ")"

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class MethodSpecSig:
    """GENERICINST (0x0A) GenArgCount Type+ (II.23.2.15): a generic method's instantiation."""

    args: tuple[TypeSig, ...]

    def format(self, namer: Namer | None = None) -> str:
        return "<" + ",".join(a.format(namer) for a in self.args) + ">"

    def __str__(self) -> str:
        return self.format()


# ------------------------------------------------------------------------ decoding

def _bad(reason: str, blob: bytes | None = None) -> AssemblyError:
    if blob is not None:
        shown = blob[:24].hex(" ")
        reason += f" (blob {shown}{' ...' if len(blob) > 24 else ''}, {len(blob)} bytes)"
    return AssemblyError(reason, kind="bad-signature")


def decode_compressed_uint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """An unsigned compressed integer (II.23.2): 1, 2 or 4 big-endian bytes.

    Returns (value, position after it).
    """
    if pos >= len(data):
        raise _bad(f"truncated: compressed integer expected at offset {pos}", data)
    b0 = data[pos]
    if b0 < 0x80:
        return b0, pos + 1
    if b0 < 0xC0:
        if pos + 2 > len(data):
            raise _bad(f"truncated: 2-byte compressed integer at offset {pos}", data)
        return ((b0 & 0x3F) << 8) | data[pos + 1], pos + 2
    if b0 < 0xE0:
        if pos + 4 > len(data):
            raise _bad(f"truncated: 4-byte compressed integer at offset {pos}", data)
        return ((b0 & 0x1F) << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3], pos + 4
    raise _bad(f"bad compressed integer lead byte 0x{b0:02X} at offset {pos}", data)


def decode_compressed_int(data: bytes, pos: int = 0) -> tuple[int, int]:
    """A signed compressed integer (II.23.2): the two's-complement value rotated left by one
    bit within 7, 14 or 29 bits, so the sign bit is the lowest bit."""
    raw, end = decode_compressed_uint(data, pos)
    bits = {1: 7, 2: 14, 4: 29}[end - pos]
    return ((raw >> 1) - (1 << (bits - 1))) if raw & 1 else (raw >> 1), end


def decode_type_def_or_ref(data: bytes, pos: int = 0) -> tuple[int, int]:
    """TypeDefOrRefOrSpecEncoded (II.23.2.8) -> (metadata token, position after it)."""
    raw, end = decode_compressed_uint(data, pos)
    tag, rid = raw & 3, raw >> 2
    if tag == 3:
        raise _bad(f"bad TypeDefOrRefOrSpecEncoded tag 3 at offset {pos}", data)
    if rid == 0:
        raise _bad(f"null TypeDefOrRefOrSpecEncoded token at offset {pos}", data)
    return (TYPE_DEF_OR_REF_TABLES[tag] << 24) | rid, end


_PRIMITIVES = {int(et): PrimitiveType(et) for et in _PRIMITIVE_NAMES}
_VOID = _PRIMITIVES.pop(int(ElementType.VOID))

# Plain ints for the decoder's hot path: IntEnum member lookups cost a descriptor call each.
_CMOD_REQD, _CMOD_OPT = int(ElementType.CMOD_REQD), int(ElementType.CMOD_OPT)
_PINNED, _VOID_ET, _SENTINEL = int(ElementType.PINNED), int(ElementType.VOID), int(ElementType.SENTINEL)
_CLASS, _VALUETYPE = int(ElementType.CLASS), int(ElementType.VALUETYPE)
_VAR, _MVAR = int(ElementType.VAR), int(ElementType.MVAR)
_SZARRAY, _PTR, _BYREF = int(ElementType.SZARRAY), int(ElementType.PTR), int(ElementType.BYREF)
_GENERICINST, _ARRAY, _FNPTR = int(ElementType.GENERICINST), int(ElementType.ARRAY), int(ElementType.FNPTR)
_NOT_METHOD_KINDS = (CallKind.FIELD, CallKind.LOCAL_SIG, CallKind.PROPERTY, CallKind.GENERICINST)


class _Decoder:
    """One pass over one blob. `pos` only moves forward; every read checks the end."""

    __slots__ = ("blob", "pos")

    def __init__(self, blob: bytes):
        self.blob = bytes(blob)
        self.pos = 0

    def fail(self, reason: str) -> AssemblyError:
        return _bad(reason, self.blob)

    def byte(self) -> int:
        pos = self.pos
        if pos >= len(self.blob):
            raise self.fail(f"truncated: a byte expected at offset {pos}")
        self.pos = pos + 1
        return self.blob[pos]

    def peek(self) -> int:
        if self.pos >= len(self.blob):
            raise self.fail(f"truncated: a byte expected at offset {self.pos}")
        return self.blob[self.pos]

    def uint(self) -> int:
        value, self.pos = decode_compressed_uint(self.blob, self.pos)
        return value

    def sint(self) -> int:
        value, self.pos = decode_compressed_int(self.blob, self.pos)
        return value

    def token(self) -> int:
        value, self.pos = decode_type_def_or_ref(self.blob, self.pos)
        return value

    def finish(self) -> None:
        if self.pos != len(self.blob):
            raise self.fail(f"{len(self.blob) - self.pos} trailing byte(s) after the signature at offset {self.pos}")

    def count(self, what: str) -> int:
        """A count of following items; each takes at least a byte, which bounds it."""
        n = self.uint()
        if n > len(self.blob) - self.pos:
            raise self.fail(f"truncated: {what} {n} exceeds the {len(self.blob) - self.pos} byte(s) left")
        return n

    def type(self, depth: int = 0, void_ok: bool = False, pinned_ok: bool = False) -> TypeSig:
        """Type ::= CustomMod* (an element type and its operands)."""
        if depth > MAX_NESTING:
            raise self.fail(f"types nest deeper than {MAX_NESTING}")
        start = self.pos
        et = self.byte()
        primitive = _PRIMITIVES.get(et)
        if primitive is not None:
            return primitive
        depth += 1
        if et == _CLASS or et == _VALUETYPE:
            return NamedType(self.token(), et == _VALUETYPE)
        if et == _VAR or et == _MVAR:
            return GenericVar(self.uint(), et == _MVAR)
        if et == _GENERICINST:
            kind = self.byte()
            if kind != _CLASS and kind != _VALUETYPE:
                raise self.fail(f"GENERICINST of element type 0x{kind:02X} (not CLASS/VALUETYPE) "
                                f"at offset {self.pos - 1}")
            generic = NamedType(self.token(), kind == _VALUETYPE)
            argc = self.count("generic argument count")
            if argc == 0:
                raise self.fail(f"GENERICINST with no arguments at offset {start}")
            return GenericInstType(generic, tuple(self.type(depth) for _ in range(argc)))
        if et == _SZARRAY:
            return SzArrayType(self.type(depth))
        if et == _BYREF:
            return ByRefType(self.type(depth))
        if et == _PTR:
            return PointerType(self.type(depth, void_ok=True))
        if et == _CMOD_REQD or et == _CMOD_OPT:
            mods = [CustomMod(et == _CMOD_REQD, self.token())]
            while self.peek() in (_CMOD_REQD, _CMOD_OPT):
                mods.append(CustomMod(self.byte() == _CMOD_REQD, self.token()))
            return ModifiedType(self.type(depth, void_ok, pinned_ok), tuple(mods))
        if et == _VOID_ET:
            if not void_ok:
                raise self.fail(f"VOID where a value type is required at offset {start}")
            return _VOID
        if et == _PINNED:
            if not pinned_ok:
                raise self.fail(f"PINNED outside a local variable signature at offset {start}")
            return PinnedType(self.type(depth))
        if et == _ARRAY:
            element = self.type(depth)
            rank = self.uint()
            if rank == 0:
                raise self.fail(f"ARRAY of rank 0 at offset {start}")
            sizes = tuple(self.uint() for _ in range(self.count("array size count")))
            lows = tuple(self.sint() for _ in range(self.count("array lower-bound count")))
            if len(sizes) > rank or len(lows) > rank:
                raise self.fail(f"ARRAY of rank {rank} with {len(sizes)} sizes and {len(lows)} "
                                f"lower bounds at offset {start}")
            return ArrayType(element, ArrayShape(rank, sizes, lows))
        if et == _FNPTR:
            return FnPtrType(self.method(depth))
        raise self.fail(f"bad element type 0x{et:02X} at offset {start}")

    def method(self, depth: int = 0) -> MethodSig:
        """MethodDefSig / MethodRefSig / StandAloneMethodSig."""
        start = self.pos
        head = self.byte()
        kind = head & 0x0F
        if kind in _NOT_METHOD_KINDS or kind > CallKind.NATIVEVARARG or head & 0x80:
            raise self.fail(f"bad method calling convention 0x{head:02X} at offset {start}")
        if head & EXPLICITTHIS and not head & HASTHIS:
            raise self.fail(f"EXPLICITTHIS without HASTHIS (0x{head:02X}) at offset {start}")
        generic_count = self.uint() if head & GENERIC else 0
        param_count = self.count("parameter count")
        ret = self.type(depth, void_ok=True)
        params: list[TypeSig] = []
        sentinel = None
        vararg = kind == CallKind.VARARG or kind == CallKind.NATIVEVARARG
        for i in range(param_count):
            if self.peek() == _SENTINEL:
                if not vararg or sentinel is not None:
                    raise self.fail(f"unexpected SENTINEL at offset {self.pos}")
                sentinel = i
                self.pos += 1
            params.append(self.type(depth))
        return MethodSig(CallKind(kind), bool(head & HASTHIS), bool(head & EXPLICITTHIS),
                         generic_count, ret, tuple(params), sentinel)


def _whole(blob: bytes, parse):
    d = _Decoder(blob)
    result = parse(d)
    d.finish()
    return result


def decode_type(blob: bytes) -> TypeSig:
    """A blob holding exactly one Type."""
    return _whole(blob, lambda d: d.type())


def decode_type_spec(blob: bytes) -> TypeSig:
    """A TypeSpec blob (II.23.2.14). ECMA lists the forms a TypeSpec may take; compilers
    only emit those, and we accept any Type as CoreCLR does."""
    return decode_type(blob)


def decode_method_sig(blob: bytes) -> MethodSig:
    """A MethodDefSig or MethodRefSig (a vararg call site's MethodRefSig has a SENTINEL)."""
    return _whole(blob, lambda d: d.method())


def decode_field_sig(blob: bytes) -> FieldSig:
    """FIELD CustomMod* Type."""
    def parse(d: _Decoder) -> FieldSig:
        head = d.byte()
        if head != CallKind.FIELD:
            raise d.fail(f"field signature starts with 0x{head:02X}, not 0x06")
        return FieldSig(d.type())
    return _whole(blob, parse)


def decode_property_sig(blob: bytes) -> PropertySig:
    """PROPERTY [HASTHIS] ParamCount CustomMod* Type Param*."""
    def parse(d: _Decoder) -> PropertySig:
        head = d.byte()
        if head & ~HASTHIS != CallKind.PROPERTY:
            raise d.fail(f"property signature starts with 0x{head:02X}, not 0x08/0x28")
        n = d.count("parameter count")
        t = d.type()
        return PropertySig(bool(head & HASTHIS), t, tuple(d.type() for _ in range(n)))
    return _whole(blob, parse)


def decode_locals_sig(blob: bytes) -> LocalVarSig:
    """LOCAL_SIG Count local+. A local may be TYPEDBYREF, BYREF, PINNED (II.23.2.6)."""
    def parse(d: _Decoder) -> LocalVarSig:
        head = d.byte()
        if head != CallKind.LOCAL_SIG:
            raise d.fail(f"local variable signature starts with 0x{head:02X}, not 0x07")
        n = d.count("local count")
        return LocalVarSig(tuple(d.type(pinned_ok=True) for _ in range(n)))
    return _whole(blob, parse)


def decode_method_spec(blob: bytes) -> MethodSpecSig:
    """GENERICINST (0x0A) GenArgCount Type+ (a MethodSpec's Instantiation blob)."""
    def parse(d: _Decoder) -> MethodSpecSig:
        head = d.byte()
        if head != CallKind.GENERICINST:
            raise d.fail(f"method instantiation starts with 0x{head:02X}, not 0x0A")
        n = d.count("generic argument count")
        if n == 0:
            raise d.fail("method instantiation with no arguments")
        return MethodSpecSig(tuple(d.type() for _ in range(n)))
    return _whole(blob, parse)


def decode_member_ref_sig(blob: bytes) -> MethodSig | FieldSig:
    """A MemberRef's signature: a FieldSig when it starts with 0x06, else a MethodRefSig."""
    if not blob:
        raise _bad("empty member reference signature")
    return decode_field_sig(blob) if blob[0] == CallKind.FIELD else decode_method_sig(blob)


def decode_standalone_sig(blob: bytes) -> LocalVarSig | MethodSig | FieldSig:
    """A StandAloneSig: locals (0x07), a calli target's method signature, or (rarely, for
    debuggers) a field signature."""
    if not blob:
        raise _bad("empty standalone signature")
    if blob[0] == CallKind.LOCAL_SIG:
        return decode_locals_sig(blob)
    if blob[0] == CallKind.FIELD:
        return decode_field_sig(blob)
    return decode_method_sig(blob)
