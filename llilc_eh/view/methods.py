"""Finding methods the way a researcher names them, and listing them by EH shape.

`find_method` is `Assembly.find_method` (exact `Ns.Type::Name`, an ilasm parameter list, a
token) with a forgiving fallback, because nobody types `System.Threading.Tasks.Task::
WaitAllBlockingCore(class System.Collections.Generic.List`1<class ...>, ...)` from memory:

* a partial name -- `WaitAllBlockingCore`, `Task::WaitAllBlockingCore`, `Task.WaitAllBlockingCore`,
  `Tasks.Task.WaitAllBlockingCore` -- matches the methods whose full name ends with it at a
  name boundary;
* a C#-like parameter list -- `(List<Task>, int, CancellationToken)` -- matches by simple type
  names: C# keywords become their IL names (int -> int32, string -> string, ...), namespaces,
  `class`/`valuetype` and generic arity markers are dropped on both sides;
* a miss suggests the closest names ("did you mean"), an ambiguous partial name lists the
  candidates (pick one with the full name, a parameter list, --index or --token).

`list_methods` gives every method with EH of an assembly with its shape (clauses by kind, try
depth, mutual protection, a try inside a handler), for `llilc-eh list` and its filters.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ..errors import AssemblyError, LlilcEhError
from ..il.method import analyze
from ..il.regions import RegionKind

# C# keyword -> ECMA-335 / ilasm name of the type.
CSHARP_TYPES = {
    "bool": "bool", "byte": "uint8", "sbyte": "int8", "short": "int16", "ushort": "uint16",
    "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64", "char": "char",
    "float": "float32", "double": "float64", "string": "string", "object": "object", "void": "void",
    "nint": "nativeint", "nuint": "nativeuint", "IntPtr": "nativeint", "UIntPtr": "nativeuint",
    "Boolean": "bool", "Byte": "uint8", "SByte": "int8", "Int16": "int16", "UInt16": "uint16",
    "Int32": "int32", "UInt32": "uint32", "Int64": "int64", "UInt64": "uint64", "Char": "char",
    "Single": "float32", "Double": "float64", "String": "string", "Object": "object",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_`]*(?:\.[A-Za-z_][A-Za-z0-9_`]*)*")


def simple_params(text: str) -> str:
    """A parameter list in simple names, comparable across spellings: `(class System.Collections.
    Generic.List`1<class System.Threading.Tasks.Task>, int32)` and `(List<Task>, int)` both
    give `List<Task>,int32`."""
    text = text.strip().removeprefix("(").removesuffix(")")
    text = re.sub(r"\b(class|valuetype)\s+", "", text)
    text = text.replace("native unsigned int", "UIntPtr").replace("native int", "IntPtr")
    text = re.sub(r"\b(ref|out|in)\s+([^,]+)", r"\2&", text)           # C#'s by-reference parameters

    def simple(m: re.Match) -> str:
        name = m.group(0).split(".")[-1].split("/")[-1]
        name = re.sub(r"`\d+$", "", name)
        return CSHARP_TYPES.get(name, name)
    text = _IDENT.sub(simple, text.replace("/", "."))
    return text.replace(" ", "")


def _name_variants(query: str) -> tuple[str, ...]:
    """`A.B.C` may mean `A.B::C` (Type.Method) or a bare dotted method name (`.ctor`)."""
    q = query.strip()
    if "::" in q:
        return (q,)
    head, dot, tail = q.rpartition(".")
    return (q, f"{head}::{tail}") if dot and head else (q,)


def _ends_at_boundary(full: str, part: str) -> bool:
    return full == part or (full.endswith(part) and full[-len(part) - 1] in ".:/")


def find_method(asm, query: str, *, index: int | None = None):
    """One method for a user's query (see the module's docstring); AssemblyError
    `method-not-found` (with suggestions) or `ambiguous-method` (with the candidates)."""
    try:
        return asm.find_method(query, index=index)
    except AssemblyError as exact:
        if exact.kind not in ("method-not-found",) or query.strip().lower().startswith("0x"):
            raise
        name, paren, rest = query.partition("(")
        if not name.strip():        # `(`, `(int)`: nothing to look up, nothing to suggest
            raise AssemblyError(f"{query!r} names no method: give Ns.Type::Name or a part of it before "
                                "the parameter list", kind="method-not-found") from None
        params = simple_params(rest.rstrip().removesuffix(")")) if paren else None
        names = asm._methods_by_name            # noqa: SLF001 - the index find_method builds anyway
        hits = sorted({rid for full, rids in names.items()
                       if any(_ends_at_boundary(full, v) for v in _name_variants(name)) for rid in rids})
        if params is not None:
            hits = [rid for rid in hits if simple_params(asm.names.method_params(rid)) == params]
        if not hits:
            raise AssemblyError(_did_you_mean(asm, name.strip(), params, names), kind="method-not-found") from None
        if index is not None:
            if not 0 <= index < len(hits):
                raise AssemblyError(f"overload index {index} out of range: {query!r} matches {len(hits)}",
                                    kind="method-not-found") from None
            return asm.method(hits[index])
        if len(hits) > 1:
            shown = [f"[{i}] {asm.method(r)}" for i, r in enumerate(hits[:20])]
            more = f"\n  ... {len(hits) - 20} more" if len(hits) > 20 else ""
            raise AssemblyError(f"{query!r} matches {len(hits)} methods; name one by its full name, a parameter "
                                "list, --index or --token:\n  " + "\n  ".join(shown) + more,
                                kind="ambiguous-method") from None
        return asm.method(hits[0])


def _did_you_mean(asm, name: str, params: str | None, names: dict) -> str:
    """`no method ...; did you mean:` the closest full names (by the whole name and by the
    method's own name), or the overloads of the name when only the parameters missed."""
    if params is not None:
        same = sorted({rid for full, rids in names.items()
                       if any(_ends_at_boundary(full, v) for v in _name_variants(name)) for rid in rids})
        if same:
            return (f"no overload of {name!r} takes ({params}); candidates:\n  "
                    + "\n  ".join(str(asm.method(r)) for r in same[:20]))
    short = {}
    for full in names:
        short.setdefault(full.rpartition("::")[2], []).append(full)
    close = difflib.get_close_matches(name, list(names), n=5, cutoff=0.6)
    for s in difflib.get_close_matches(name.replace("::", ".").rpartition(".")[2], list(short), n=5, cutoff=0.7):
        close += [f for f in short[s] if f not in close]
    text = f"no method named {name!r} in {asm.path.name}"
    return text + ("; did you mean:\n  " + "\n  ".join(close[:8]) if close else "")


# --------------------------------------------------------------------------------------------
# Listing by shape


@dataclass(frozen=True)
class MethodShape:
    token: int
    signature: str              # `0x06... bool Ns.Type::Name(params)`
    kinds: dict                 # clause kind -> count
    clauses: int
    try_depth: int
    mutual_protect: bool
    try_in_handler: bool
    il_size: int
    error: str | None           # the IL's first rule violation (stage:kind), if any

    def line(self) -> str:
        kinds = " ".join(f"{k} {v}" for k, v in self.kinds.items())
        tags = [t for t, on in (("mutual-protect", self.mutual_protect), ("try-in-handler", self.try_in_handler))
                if on]
        return (f"{self.signature}  [{self.clauses} clauses: {kinds}; depth {self.try_depth}"
                + ("; " + ", ".join(tags) if tags else "") + (f"; IL error {self.error}" if self.error else "")
                + "]")

    def as_dict(self) -> dict:
        return {"token": f"0x{self.token:08X}", "signature": self.signature.partition(" ")[2],
                "clauses": self.clauses, "kinds": self.kinds, "try_depth": self.try_depth,
                "mutual_protect": self.mutual_protect, "try_in_handler": self.try_in_handler,
                "il_size": self.il_size, "il_error": self.error}


def list_methods(asm):
    """The shape of every method with EH, in table order (a body that cannot be read is
    skipped: `validate` reports it)."""
    for rid in asm.methods_with_il():
        try:
            body = asm.body(rid)
        except LlilcEhError:
            continue
        if not body.has_eh:
            continue
        kinds: dict = {}
        for c in body.clauses:
            kinds[c.kind.word] = kinds.get(c.kind.word, 0) + 1
        depth, mutual, nested, error = 0, False, False, None
        try:
            m = analyze(body)
            tree = m.regions
            depth = tree.max_try_depth
            mutual = any(len(r.handlers) > 1 for r in tree.regions)
            nested = any(r.kind is RegionKind.TRY and tree.enclosing_handler(r) is not None for r in tree.regions)
            if m.errors:
                error = f"{m.errors[0].stage}:{m.errors[0].kind}"
        except LlilcEhError as e:
            error = f"{e.stage}:{e.kind}"
        yield MethodShape(body.token, str(asm.method(rid)), dict(sorted(kinds.items())), len(body.clauses), depth,
                          mutual, nested, body.code_size, error)


def shape_filter(args):
    """The `llilc-eh list` filters as one predicate over a MethodShape."""
    def keep(s: MethodShape) -> bool:
        return ((not args.filter or "filter" in s.kinds) and (not args.fault or "fault" in s.kinds)
                and (not args.finally_ or "finally" in s.kinds) and (not args.catch or "catch" in s.kinds)
                and (not args.mutual_protect or s.mutual_protect)
                and (not args.try_in_handler or s.try_in_handler)
                and s.try_depth >= args.min_depth and s.clauses >= args.min_clauses
                and (not args.name or args.name.lower() in s.signature.lower()))
    return keep
