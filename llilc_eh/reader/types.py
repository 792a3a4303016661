"""What the JIT-EE interface answers: the value types both of its implementations return
(`reader.jitee.JitEE` from metadata, `runtime.ee.RuntimeJitEE` from the live runtime) and the
fixed layout facts of CoreCLR 3.1 on x64 that the reader builds on.

Why a module of its own: the reader, the ABI planner, the runtime's JIT-EE and the protocol
(`ee.protocol`) all name these types; they should not have to load the metadata
implementation (assembly binding, CoreCLR's field layout) to do so.

`llvm_global(name)` quotes and escapes an external symbol for LLVM IR (`@"..."`, `\\22` for
`"`, `\\5C` for `\\`, other bytes outside printable ASCII as `\\XX` of their UTF-8).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from llilc_eh.assembly.signatures import CallKind, TypeSig
from llilc_eh.errors import ReaderError

__all__ = [
    "StackKind", "TypeInfo", "TypeLayout", "LayoutField", "FieldInfo", "MethodInfo", "ext_attr",
    "llvm_global", "POINTER_SIZE", "OBJECT_HEADER_SIZE", "ARRAY_LENGTH_OFFSET", "SZARRAY_DATA_OFFSET",
    "STRING_LENGTH_OFFSET", "STRING_CHARS_OFFSET", "md_array_data_offset", "TYPEDREF_SIZE",
    "TYPEDREF_VALUE_OFFSET", "TYPEDREF_TYPE_OFFSET",
]

POINTER_SIZE = 8
OBJECT_HEADER_SIZE = 8        # the method-table pointer: instance fields of an object start here
ARRAY_LENGTH_OFFSET = 8       # int32 length of any array
SZARRAY_DATA_OFFSET = 16      # first element of a single-dimensional zero-based array
STRING_LENGTH_OFFSET = 8      # int32 length of a System.String
STRING_CHARS_OFFSET = 12      # its first UTF-16 unit
TYPEDREF_SIZE = 16            # System.TypedReference: a byref and a type handle
TYPEDREF_VALUE_OFFSET = 0     # its data pointer (CoreLib's `Value`, a ByReference<byte>)
TYPEDREF_TYPE_OFFSET = 8      # its type handle (CoreLib's `Type`, an IntPtr)


def md_array_data_offset(rank: int) -> int:
    """First element of a rank-`rank` (multi-dimensional or non-zero-based) array."""
    return 16 + 8 * rank


class StackKind(enum.Enum):
    """The evaluation-stack types of ECMA-335 I.12.3.2.1."""

    __hash__ = object.__hash__   # identity: cheaper than Enum's name hash (see il.opcodes.OperandKind)

    INT32 = "int32"
    INT64 = "int64"
    NATIVE_INT = "native int"
    F = "F"
    OBJ = "O"
    BYREF = "&"
    VALUE = "value"


_NEEDS_ESCAPE = re.compile(r'[^\x20\x21\x23-\x5B\x5D-\x7E]')


def llvm_global(name: str) -> str:
    """`@"name"` with LLVM's escapes: `"` -> `\\22`, `\\` -> `\\5C`, any byte outside printable
    ASCII -> `\\XX` (names are UTF-8 in LLVM). Most names need none (a hot path of the reader)."""
    if not _NEEDS_ESCAPE.search(name):
        return f'@"{name}"'
    out = []
    for b in name.encode("utf-8"):
        if 0x20 <= b <= 0x7E and b not in (0x22, 0x5C):
            out.append(chr(b))
        else:
            out.append(f"\\{b:02X}")
    return '@"' + "".join(out) + '"'


# ------------------------------------------------------------------------------- results

@dataclass(frozen=True)
class TypeInfo:
    """Everything the reader needs to store, load and pass a value of one type."""

    sig: TypeSig
    text: str
    stack_kind: StackKind | None      # None for void
    storage: str                      # LLVM type in memory ("void" for void)
    size: int
    align: int
    signed: bool                      # integer types: whether widening sign-extends
    gc: bool                          # is or holds an object reference or a managed pointer
    pinned: bool = False

    def __str__(self) -> str:
        kind = self.stack_kind.name if self.stack_kind else "-"
        return f"{self.text}: {kind} {self.storage} size {self.size} align {self.align}"


@dataclass(frozen=True)
class LayoutField:
    name: str
    offset: int        # from the start of the value, or from the object reference for a class
    size: int
    gc: bool           # an object reference (or a struct holding some) lives here
    token: int         # the FieldDef token in its declaring assembly
    assembly: str      # the declaring assembly's name


@dataclass(frozen=True)
class TypeLayout:
    """A type's instance layout as CoreCLR 3.1 computes it."""

    text: str
    kind: str          # primitive | enum | sequential | explicit | auto | class | reference
    size: int          # value types: the value's size; classes: field bytes after the header
    align: int
    gc: bool
    fields: tuple[LayoutField, ...]   # instance fields of the type and (classes) its bases

    def __str__(self) -> str:
        body = ", ".join(f"{f.name}@{f.offset}" for f in self.fields)
        return f"{self.text} [{self.kind}] size {self.size} align {self.align} {{{body}}}"


@dataclass(frozen=True)
class FieldInfo:
    """A field as `ldfld`/`stfld`/`ldsfld`/`ldflda` need it."""

    token: int
    name: str
    owner: str                     # owner type as ILDasm writes it
    type: TypeSig                  # field type, generic arguments of the owner substituted
    is_static: bool | None         # None: a MemberRef whose field could not be found
    offset: int | None             # instance fields: see the module docstring; else None
    offset_reason: str | None      # why offset is None for an instance (or unknown) field
    owner_is_value_type: bool | None
    symbol: str                    # `[Asm]Ns.Type::name`: the base of the symbols below
    offset_symbol: str             # `fieldoffset:<symbol>`
    address_symbol: str | None     # static fields: `static:<symbol>`
    resolved: str | None = None    # the FieldDef it resolved to, `[Asm]0x04001234`

    def __str__(self) -> str:
        where = "static" if self.is_static else (f"@{self.offset}" if self.offset is not None
                                                 else f"@? ({self.offset_reason})")
        return f"0x{self.token:08X} {self.symbol} {where}"


@dataclass(frozen=True)
class MethodInfo:
    """A call target or the method being compiled."""

    token: int
    name: str
    display: str                   # ILDasm text of the token
    owner: str                     # owner type as ILDasm writes it
    owner_token: int | None        # TypeDef/TypeRef/TypeSpec of the owner (for class handles)
    owner_type: TypeSig | None     # the owner as a type (`this` of a class; a value type's own type)
    owner_is_value_type: bool | None
    symbol: str
    call_kind: CallKind
    has_this: bool
    explicit_this: bool
    vararg: bool
    sentinel: int | None           # index in params of the first variable argument
    params: tuple[TypeSig, ...]
    return_type: TypeSig
    generic_args: tuple[TypeSig, ...]
    is_static: bool
    is_virtual: bool | None
    is_final: bool | None
    is_abstract: bool | None
    resolved: str | None           # the MethodDef it resolved to, `[Asm]0x06001234`
    unresolved_reason: str | None
    returns_value_type: bool | None
    llvm_return: str | None
    llvm_return_attr: str | None              # signext / zeroext / ""
    llvm_params: tuple[str, ...] | None
    llvm_param_roles: tuple[str, ...] | None   # this, retbuf, vararg-cookie, arg<n>
    llvm_param_attrs: tuple[str, ...] | None   # signext / zeroext / ""
    llvm_reason: str | None

    def llvm_function_type(self) -> str:
        """`i32 (ptr, i32, double)` in our calling convention (module docstring)."""
        self._require_llvm()
        return f"{self.llvm_return} ({', '.join(self.llvm_params)})"

    def llvm_declaration(self) -> str:
        """`declare i32 @"sym"(ptr, i8 signext)`."""
        self._require_llvm()
        params = ", ".join(f"{t} {a}".rstrip() for t, a in zip(self.llvm_params, self.llvm_param_attrs))
        ret = f"{self.llvm_return_attr} {self.llvm_return}".lstrip()
        return f"declare {ret} {llvm_global(self.symbol)}({params})"

    def _require_llvm(self) -> None:
        if self.llvm_params is None:
            raise ReaderError(f"no LLVM signature for {self.display}: {self.llvm_reason}",
                              kind="unresolved-type")

    def __str__(self) -> str:
        return f"0x{self.token:08X} {self.symbol}"


def ext_attr(info: TypeInfo) -> str:
    """signext / zeroext for a small integer (SysV leaves the upper bits to whoever extends:
    the attribute makes LLVM do it at the call boundary), else ""."""
    if info.stack_kind is StackKind.INT32 and info.size < 4:
        return "signext" if info.signed else "zeroext"
    return ""
