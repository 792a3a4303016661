"""The questions the reader asks the execution engine, written down once.

Why a protocol: a real JIT asks its execution engine (CoreCLR's ICorJitInfo) and cannot tell
who answers. llilc-eh has two answerers -- metadata alone (`reader.jitee.JitEE`: CoreCLR 3.1's
layouts recomputed from the assemblies on disk, what `translate` and `validate` use) and the
live runtime (`runtime.ee.RuntimeJitEE`: ICorJitInfo inside dotnet, what `run` uses) -- and
the reader (`reader/translate.py`, `opcodes.py`, `abi.py`) must not know which. This module
lists every question the reader asks, with the meaning of its answer; both implementations
declare that they implement it (a test holds each member to a definition of its own).

Imports stay one-way: this module imports no stage (the value types named below belong to
`reader.types` and are named for type checkers only).

Two kinds of question:
  * layout and type questions (LAYOUT_QUESTIONS): sizes, field offsets, value class or not,
    GC references inside a value, the SysV classification of a small struct, method flags --
    what the runtime decides and a runtime-backed implementation must ask it;
  * naming questions: the external symbols the IR uses for what only the runtime can give
    (class handles, string literals, static addresses ...), signatures and the compiled
    method's own argument and local types -- read from metadata by both implementations
    (the installer resolves the symbols through the runtime afterwards: runtime/install.py).

Known leaks, for whoever tightens this: `abi._leaves` walks the metadata implementation's own
type model (`_rt`, `_norm`, `_place`, `_named_layout`, `_main`) to classify struct fields, and
`opcodes._is_thread_static` / `_is_rva_field` read its `_main` module; the runtime
implementation delegates those to its metadata half.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:   # value types of the metadata implementation, shared by both
    from ..assembly.body import MethodBody
    from ..assembly.signatures import TypeSig
    from ..reader.types import FieldInfo, MethodInfo, StackKind, TypeInfo, TypeLayout

#: The questions whose answers the runtime decides (a runtime-backed implementation asks
#: ICorJitInfo for them; runtime/compare.py compares the two implementations on them).
LAYOUT_QUESTIONS = ("type_info", "stack_kind", "storage_type", "is_signed", "size_and_align", "layout",
                    "field", "method", "compiled_method", "sysv_eightbytes", "reference_offsets")


@runtime_checkable
class JitEEInterface(Protocol):
    """Everything the reader asks about one compiled assembly. Signatures (`TypeSig`) and
    tokens are those of the compiled module."""

    # -- the assembly ----------------------------------------------------------------------
    @property
    def assembly_name(self) -> str:
        """The compiled assembly's simple name (symbols of its own types carry it)."""

    # -- types -------------------------------------------------------------------------------
    def type_info(self, sig: TypeSig) -> TypeInfo:
        """Stack kind, LLVM storage type, size, alignment, signedness, GC-ness of a type."""

    def stack_kind(self, sig: TypeSig) -> StackKind | None:
        """ECMA-335 I.12.3.2.1 stack type of a value of the type; None for void."""

    def storage_type(self, sig: TypeSig) -> str:
        """The LLVM type a value of the type occupies in memory."""

    def is_signed(self, sig: TypeSig) -> bool:
        """Whether a small integer of the type sign-extends."""

    def size_and_align(self, sig: TypeSig) -> tuple[int, int]:
        """(size, alignment) in bytes of a value of the type in memory."""

    def layout(self, sig: TypeSig) -> TypeLayout:
        """The instance layout (fields and their offsets) of a class or value type."""

    def token_type(self, token: int) -> TypeSig:
        """A TypeDef/TypeRef/TypeSpec operand as a type (`class X`, `valuetype X`, a TypeSpec)."""

    def class_ancestry(self, token: int) -> tuple[str, ...]:
        """A class and its base classes down to System.Object (catch class tests)."""

    def sysv_eightbytes(self, sig: TypeSig) -> tuple[str, ...] | str | None:
        """The SysV AMD64 classification of a value type of at most 16 bytes: one LLVM type per
        eightbyte (`i64`, `double`, `float`, `<2 x float>`), `"memory"` when CoreCLR passes it
        in memory whatever its size, None when larger or not classifiable."""

    def reference_offsets(self, sig: TypeSig) -> tuple[int, ...] | None:
        """Offsets of the object references inside a value type (per-field write barriers);
        None when its layout cannot be walked."""

    def is_nullable(self, sig: TypeSig) -> bool:
        """Whether a type is System.Nullable<T>: its unbox goes through CORINFO_HELP_UNBOX_NULLABLE
        (a null reference unboxes to a Nullable without a value), as the runtime's getUnBoxHelper says."""

    # -- fields and methods ------------------------------------------------------------------
    def field(self, token: int) -> FieldInfo:
        """A FieldDef or field MemberRef: type, static or not, offset, symbols."""

    def method(self, token: int) -> MethodInfo:
        """A MethodDef, MemberRef or MethodSpec: signature, flags, symbol, LLVM prototype."""

    def compiled_method(self, rid: int) -> MethodInfo:
        """The MethodDef being compiled."""

    def arg_types(self, rid: int) -> tuple[TypeSig, ...]:
        """IL argument types of the compiled method, `this` first."""

    def local_types(self, body: MethodBody | int) -> tuple[TypeSig, ...]:
        """Local variable types of a method body (or of a LocalVarSig token)."""

    # -- symbols for what the runtime provides -------------------------------------------------
    def llvm_global(self, name: str) -> str:
        """An external symbol quoted for LLVM IR."""

    def class_handle(self, token: int) -> str:
        """The symbol of a CORINFO_CLASS_HANDLE."""

    def string_literal(self, token: int) -> str:
        """The symbol of an ldstr's string object."""

    def varargs_cookie(self, token: int) -> str:
        """The symbol of a vararg call site's cookie."""

    def static_field_address(self, token: int) -> str:
        """The symbol of a static field's address."""

    def field_offset_symbol(self, token: int) -> str:
        """The symbol standing for an instance field's offset the reader could not compute."""

    def method_handle(self, token: int) -> str:
        """The symbol of a CORINFO_METHOD_HANDLE."""


def members() -> tuple[str, ...]:
    """The names of the protocol's questions (for tests holding an implementation to it)."""
    return tuple(sorted(n for n in JitEEInterface.__dict__
                        if not n.startswith("_") and n not in ("members",)))


__all__ = ["LAYOUT_QUESTIONS", "JitEEInterface", "members"]
