"""What every external symbol of the reader's IR means, for whoever must resolve it.

The reader names what the runtime provides by symbols (`str:0x70000001`,
`class:[System.Runtime]System.Exception`, `CORINFO_HELP_THROW`, a method's symbol...).
Their text is made for people and for stable IR; an installer must not parse it to find
out what to ask the runtime. `External` says it outright: the kind, the metadata token in
the compiled module, the helper's name, how a method is called and its LLVM prototype, and
whether the symbol is a *cell* (linux-x64: an 8-byte slot the code loads the runtime's
address or value from, placed by the final image in its read-only data, filled by the
installer) or the thing itself (a call target, reached by `call rel32`; win-x64 data).

Kinds:
  helper          a CORINFO_HELP_* helper (call)
  method          a method called directly, by newobj, or jumped to (`call` = direct | newobj | jmp)
  method-handle   a CORINFO_METHOD_HANDLE (virtual calls through CORINFO_HELP_VIRTUAL_FUNC_PTR, ldtoken)
  method-class    the class a method token resolves to (CORINFO_HELP_VIRTUAL_FUNC_PTR's class argument;
                  linux-x64 only)
  method-entry    a method's entry point as a value (ldftn)
  string          a string literal: the address of its pinned handle (constructStringLiteral,
                  IAT_PVALUE: the code loads the object from there)
  class           a CORINFO_CLASS_HANDLE (allocation, casts, box, ldtoken, typed refs)
  ldtoken-class   ... of a class only ldtoken names (linux-x64): resolved as an ldtoken token, which
                  may be System.Void or an open generic type
  array-class     the array class a newarr allocates (its token resolved as CORINFO_TOKENKIND_Newarr;
                  linux-x64 only, where it is a cell of its own)
  field-class     the class handle of a field's (value) type (ASSIGN_STRUCT of a field)
  field-owner     the class declaring a static field (CORINFO_HELP_INITCLASS before the access; linux-x64)
  static          a static field's address
  statics-module  a [ThreadStatic] field's class: the module id its statics helper takes (linux-x64)
  statics-class-id  ... and the class id (getClassDomainID; the cell holds the number)
  thread-static   ... and the field's offset from the base `helper` returns (getFieldInfo); `boxed`:
                  the code reads a boxed value there (a value type's static lives in a box)
  field           a CORINFO_FIELD_HANDLE (ldtoken)
  field-offset    an instance field's offset, where metadata could not lay its class out
  vasig-cookie    a vararg call site's cookie
  frame-constant  a filter's parent-frame constant; resolved by the final image, not the runtime
  method-sync     a synchronized static method's lock (getMethodSync of the compiled method; linux-x64)
  constrained-entry  `constrained. T callvirt M` on a value type T (linux-x64): the entry point of T's own
                  M, or null when T inherits M (the code then calls M on a box); `token` is M's,
                  `constrained` T's
  lookup-signature  the signature cookie of a runtime lookup in shared generic code (`lookup`: what
                  the token is used as, a key of runtime/lookup.py REQUESTS; reader/lookup.py)
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("helper", "method", "method-handle", "method-class", "method-entry", "string", "class", "ldtoken-class",
         "array-class",
         "field-class", "field-owner", "static", "statics-module", "statics-class-id", "thread-static", "field",
         "field-offset", "vasig-cookie", "frame-constant", "method-sync", "constrained-entry",
         "lookup-signature")
CALL_KINDS = ("helper", "method")


@dataclass(frozen=True)
class External:
    """One external symbol of a method's IR (module docstring)."""

    symbol: str                     # as the IR and the object name it (unquoted)
    kind: str                       # one of KINDS
    token: int | None = None        # metadata token in the compiled module (None: helpers, frame constants)
    helper: str | None = None       # kind helper: the CorInfoHelpFunc name (thread-static: the base's helper)
    call: str | None = None         # kind method: direct | newobj | jmp
    prototype: str | None = None    # calls: the LLVM function type, e.g. `ptr (ptr, i64)`
    cell: bool = False              # an 8-byte cell holding the runtime's value (linux-x64 data)
    lookup: str | None = None       # kind lookup-signature: what the token is used as
    boxed: bool = False             # kind thread-static: the code unboxes the static (its value after the header)
    constrained: int | None = None  # kind constrained-entry: the token of the `constrained.` type

    @property
    def is_call(self) -> bool:
        return self.kind in CALL_KINDS

    def __str__(self) -> str:
        bits = [self.kind]
        if self.token is not None:
            bits.append(f"0x{self.token:08X}")
        if self.helper:
            bits.append(self.helper)
        if self.call:
            bits.append(self.call)
        if self.prototype:
            bits.append(self.prototype)
        if self.lookup:
            bits.append(f"lookup {self.lookup}")
        if self.cell:
            bits.append("cell")
        return f"{self.symbol}: {' '.join(bits)}"


__all__ = ["CALL_KINDS", "KINDS", "External"]
