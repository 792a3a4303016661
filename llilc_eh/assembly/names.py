"""Names for metadata tokens: what a catch clause, an IL operand or a method is called.

`MetadataNames` answers the assembly stage's naming questions from a `dnfile.dnPE`
opened lazily (`fast_load=True, clr_lazy_load=True`, then the COM descriptor directory
parsed). It reads only what a question needs, and caches every answer, because a corpus
run names the same TypeRef thousands of times.

Why it reads dnfile's raw row structs and heap bytes instead of dnfile's row objects:
under `clr_lazy_load`, touching any row attribute that resolves a coded index or a row
list (`TypeRef.ResolutionScope`, `TypeDef.MethodList`, `MemberRef.Class`, ...) makes
dnfile parse *every row of every table* first: 1.1 s for Python.Runtime.dll and 4.3 s for
System.Private.CoreLib.dll, against ~15 µs per row read lazily. `row.struct.<Column>`
(the undecoded column) never triggers that, so all coded indexes are decoded here.
Blobs are read from the heap bytes directly too: dnfile's `BlobHeap.get` copies the rest
of the heap on every call.

Text follows ILDasm's ilasm syntax (see `signatures`): TypeRefs carry their resolution
scope (`[System.Runtime]System.Exception`), nested types are `Outer/Inner` with the
outermost namespace, a member's owner is written bare for a TypeDef/TypeRef and as its
type (`class X`1<int32>`) for a TypeSpec, user strings are quoted and escaped as monodis
does. Identifiers are not quoted.

Unresolvable tokens (rid 0, past the end of the table, absent table, a kind that cannot
be asked) raise `AssemblyError(kind="unresolved-token")` naming the token in hex;
malformed blobs raise kind "bad-signature"; heap indexes past a heap, rows whose bytes
cannot be read and heaps their stream header misplaces raise "bad-metadata".
Edit-and-continue indirection tables (MethodPtr, FieldPtr) are not followed: compilers
do not emit them into shipped assemblies.
"""

from __future__ import annotations

import bisect
import struct
from collections import namedtuple

from llilc_eh.errors import AssemblyError
from llilc_eh.assembly.signatures import (
    FieldSig, LocalVarSig, MethodSig, MethodSpecSig, TypeSig,
    decode_field_sig, decode_member_ref_sig, decode_method_sig,
    decode_method_spec, decode_standalone_sig, decode_type_spec,
)

__all__ = ["MetadataNames", "TokenKind", "quote_user_string"]


class TokenKind:
    """The table numbers that appear in the top byte of a token (II.22, II.24.2.6)."""

    MODULE = 0x00
    TYPE_REF = 0x01
    TYPE_DEF = 0x02
    FIELD = 0x04
    METHOD_DEF = 0x06
    MEMBER_REF = 0x0A
    STANDALONE_SIG = 0x11
    MODULE_REF = 0x1A
    TYPE_SPEC = 0x1B
    ASSEMBLY_REF = 0x23
    NESTED_CLASS = 0x29
    METHOD_SPEC = 0x2B
    USER_STRING = 0x70


# Coded indexes (II.24.2.6): tag bits and the tables they select, in tag order.
_RESOLUTION_SCOPE = (2, (TokenKind.MODULE, TokenKind.MODULE_REF, TokenKind.ASSEMBLY_REF, TokenKind.TYPE_REF))
_MEMBER_REF_PARENT = (3, (TokenKind.TYPE_DEF, TokenKind.TYPE_REF, TokenKind.MODULE_REF,
                          TokenKind.METHOD_DEF, TokenKind.TYPE_SPEC))
_METHOD_DEF_OR_REF = (1, (TokenKind.METHOD_DEF, TokenKind.MEMBER_REF))

_TABLE_NAMES = {
    TokenKind.MODULE: "Module", TokenKind.TYPE_REF: "TypeRef", TokenKind.TYPE_DEF: "TypeDef",
    TokenKind.FIELD: "Field", TokenKind.METHOD_DEF: "MethodDef", TokenKind.MEMBER_REF: "MemberRef",
    TokenKind.STANDALONE_SIG: "StandAloneSig", TokenKind.MODULE_REF: "ModuleRef",
    TokenKind.TYPE_SPEC: "TypeSpec", TokenKind.ASSEMBLY_REF: "AssemblyRef",
    TokenKind.NESTED_CLASS: "NestedClass", TokenKind.METHOD_SPEC: "MethodSpec",
}

def _unresolved(token: int, why: str) -> AssemblyError:
    return AssemblyError(f"token 0x{token:08X}: {why}", kind="unresolved-token")


def quote_user_string(units: bytes) -> str:
    """A #US string as monodis writes an `ldstr` operand.

    monodis quotes a string when every UTF-16 unit is a printable ASCII character or one
    of `\\r \\n \\t`, escaping `\\ " \\r \\n \\t` C-style (glib's g_strescape); any other
    string becomes a `bytearray (...)` of its UTF-16LE bytes, which is what ilasm accepts
    for text it cannot quote. (monodis also dumps the heap's trailing flag byte and wraps
    the bytes over lines with an ASCII column; we write the string's bytes on one line.)
    """
    chars = []
    for i in range(0, len(units) - 1, 2):
        lo, hi = units[i], units[i + 1]
        if hi or not (0x20 <= lo <= 0x7E or lo in (0x0D, 0x0A, 0x09)):
            return "bytearray (" + units.hex(" ") + ")"
        chars.append(chr(lo))
    text = "".join(chars)
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("\r", "\\r"), ("\n", "\\n"), ("\t", "\\t")):
        text = text.replace(raw, escaped)
    return f'"{text}"'


class MetadataNames:
    """Names and signatures of the tokens of one module, read lazily and cached.

    Also a `signatures.Namer`: `type_name(token)` names the TypeDef/TypeRef/TypeSpec
    tokens inside signatures.
    """

    def __init__(self, pe):
        net = getattr(pe, "net", None)
        if net is None or getattr(net, "mdtables", None) is None:
            raise AssemblyError("no CLR metadata (is the COM descriptor directory parsed?)",
                                kind="no-metadata")
        self._pe = pe
        self._tables = dict(net.mdtables.tables)   # table number -> dnfile table
        self._strings = _heap_bytes(net.strings, "#Strings")
        self._blobs = _heap_bytes(net.blobs, "#Blob")
        self._user_strings = _heap_bytes(net.user_strings, "#US")
        self._string_cache: dict[int, str] = {}
        self._type_names: dict[int, str] = {}
        self._signatures: dict[int, object] = {}
        self._texts: dict[int, str] = {}
        self._rows: dict[int, object] = {}           # token -> raw row struct
        self._row_readers: dict[int, object] = {}    # table number -> rid -> raw row struct
        self._naming: set[int] = set()               # types being named (cycle guard)
        self._enclosing: dict[int, int] | None = None
        self._method_starts: list[int] | None = None
        self._field_starts: list[int] | None = None

    # ------------------------------------------------------------------ raw access

    def row_count(self, kind: int) -> int:
        table = self._tables.get(kind)
        return table.num_rows if table is not None else 0

    def _row(self, token: int, kind: int | None = None):
        """The raw columns of the row a token names, by dnfile's column names (cached: the
        reader asks for some rows hundreds of times)."""
        row = self._rows.get(token)
        if row is not None and (kind is None or token >> 24 == kind):
            return row
        row = self._rows[token] = self._read_row(token, kind)
        return row

    def _read_row(self, token: int, kind: int | None):
        """`_row` uncached: check the token, then read the row."""
        table_id, rid = token >> 24, token & 0xFFFFFF
        if kind is not None and table_id != kind:
            raise _unresolved(token, f"not a {_TABLE_NAMES.get(kind, hex(kind))} token")
        table = self._tables.get(table_id)
        if table is None:
            raise _unresolved(token, f"no {_TABLE_NAMES.get(table_id, f'0x{table_id:02X}')} table")
        if rid == 0 or rid > table.num_rows:
            raise _unresolved(token, f"row {rid} is outside {table.name} (1..{table.num_rows})")
        reader = self._row_readers.get(table_id)
        if reader is None:
            reader = self._row_readers[table_id] = self._row_reader(table)
        row = reader(rid)
        if row is None:
            raise AssemblyError(f"token 0x{token:08X}: {table.name} row {rid} cannot be read (the table runs "
                                f"past the #~ stream or the file)", kind="bad-metadata")
        return row

    def _row_reader(self, table):
        """rid -> raw row of `table` (None when it cannot be read).

        dnfile's lazy row costs ~20 us the first time (a row object and two pefile
        Structures); the same columns unpacked straight from the table's bytes, with the
        struct format of dnfile's own first row, into a named tuple cost ~1 us. Tables whose
        layout that cannot reproduce (no readable first row, a column with two names, bytes
        cut short) are read through dnfile."""
        first = _dnfile_row(table, 1)
        size = table.row_size * table.num_rows
        if first is not None and all(len(keys) == 1 for keys in first.__keys__):
            layout = struct.Struct(first.__format_str__)
            data = self._pe.get_data(table.rva, size)
            if layout.size == table.row_size and len(data) == size:
                make = namedtuple(f"{table.name}Row", [keys[0] for keys in first.__keys__])._make
                unpack = layout.unpack_from
                return lambda rid: make(unpack(data, (rid - 1) * layout.size))
        return lambda rid: _dnfile_row(table, rid)

    def string(self, index: int) -> str:
        """A #Strings entry (UTF-8, NUL-terminated)."""
        cached = self._string_cache.get(index)
        if cached is not None:
            return cached
        if index >= len(self._strings) and index:
            raise AssemblyError(f"#Strings index 0x{index:X} is past the heap (size 0x{len(self._strings):X})",
                                kind="bad-metadata")
        end = self._strings.find(b"\0", index)
        raw = self._strings[index:] if end < 0 else self._strings[index:end]
        text = raw.decode("utf-8", errors="replace")
        self._string_cache[index] = text
        return text

    def blob(self, index: int) -> bytes:
        """A #Blob entry's bytes, without its compressed length."""
        data = self._blobs
        if index >= len(data):
            raise AssemblyError(f"#Blob index 0x{index:X} is past the heap (size 0x{len(data):X})",
                                kind="bad-metadata")
        try:
            size, start = _compressed(data, index)
        except ValueError:
            raise AssemblyError(f"#Blob entry 0x{index:X} has a bad length byte 0x{data[index]:02X}",
                                kind="bad-metadata") from None
        if start + size > len(data):
            raise AssemblyError(f"#Blob entry 0x{index:X} of {size} bytes runs past the heap", kind="bad-metadata")
        return data[start:start + size]

    @staticmethod
    def _decode_coded(value: int, coded) -> int:
        bits, tables = coded
        tag = value & ((1 << bits) - 1)
        if tag >= len(tables):
            # Returned as an impossible table number so the caller reports the token.
            return (0xFF << 24) | (value >> bits)
        return (tables[tag] << 24) | (value >> bits)

    def _signature_of(self, token: int, kind: int, column: str, decode):
        """Decode (once) the blob in `column` of the row `token` names, if it is a `kind` token.
        The kind is checked first: all signatures share one cache keyed by token."""
        if token >> 24 != kind:
            raise _unresolved(token, f"not a {_TABLE_NAMES[kind]} token")
        sig = self._signatures.get(token)
        if sig is None:
            sig = decode(self.blob(getattr(self._row(token), column)))
            self._signatures[token] = sig
        return sig

    @staticmethod
    def _rid_token(kind: int, rid: int) -> int:
        if not 0 <= rid <= 0xFFFFFF:
            raise AssemblyError(f"{_TABLE_NAMES[kind]} rid 0x{rid:X} does not fit a token", kind="unresolved-token")
        return (kind << 24) | rid

    # --------------------------------------------------------------------- types

    def type_name(self, token: int) -> str:
        """A TypeDef, TypeRef or TypeSpec as a catch clause or signature names it:
        `Ns.Outer/Inner`, `[System.Runtime]System.Exception`, `class X`1<!0>`."""
        cached = self._type_names.get(token)
        if cached is None:
            # Enclosing types, TypeRef scopes and TypeSpec arguments recurse through here,
            # so each is named once; a token met again while being named is a cycle.
            if token in self._naming:
                raise _unresolved(token, "refers to itself (a cycle of nested types or TypeSpecs)")
            self._naming.add(token)
            try:
                cached = self._name_type(token)
            finally:
                self._naming.discard(token)
            self._type_names[token] = cached
        return cached

    def _name_type(self, token: int) -> str:
        kind = token >> 24
        if kind == TokenKind.TYPE_DEF:
            row = self._row(token)
            name = self._qualified(row.TypeNamespace_StringIndex, row.TypeName_StringIndex)
            outer = self._enclosing_class(token & 0xFFFFFF)
            if outer:
                return self.type_name((TokenKind.TYPE_DEF << 24) | outer) + "/" + name
            return name
        if kind == TokenKind.TYPE_REF:
            row = self._row(token)
            name = self._qualified(row.TypeNamespace_StringIndex, row.TypeName_StringIndex)
            scope = self._decode_coded(row.ResolutionScope_CodedIndex, _RESOLUTION_SCOPE)
            scope_kind, scope_rid = scope >> 24, scope & 0xFFFFFF
            if scope_rid == 0 or scope_kind == TokenKind.MODULE:
                # Null scope: the type is exported from elsewhere (ExportedType);
                # Module scope: it is defined in this very module. Neither needs brackets.
                return name
            if scope_kind == TokenKind.TYPE_REF:
                return self.type_name(scope) + "/" + name
            if scope_kind == TokenKind.ASSEMBLY_REF:
                return f"[{self.string(self._row(scope).Name_StringIndex)}]{name}"
            if scope_kind == TokenKind.MODULE_REF:
                return f"[.module {self.string(self._row(scope).Name_StringIndex)}]{name}"
            raise _unresolved(token, f"bad resolution scope 0x{row.ResolutionScope_CodedIndex:X}")
        if kind == TokenKind.TYPE_SPEC:
            return self.type_spec(token).format(self)
        raise _unresolved(token, "not a TypeDef, TypeRef or TypeSpec token")

    def _qualified(self, ns_index: int, name_index: int) -> str:
        ns = self.string(ns_index)
        name = self.string(name_index)
        return f"{ns}.{name}" if ns else name

    def _enclosing_class(self, typedef_rid: int) -> int:
        """The TypeDef rid enclosing a nested TypeDef, or 0. The NestedClass table is read
        whole on first use: it is small (517 rows in CoreLib) and unsorted lookups by
        nested class would otherwise need a binary search over raw rows anyway."""
        if self._enclosing is None:
            enclosing: dict[int, int] = {}
            table = self._tables.get(TokenKind.NESTED_CLASS)
            for i in range(table.num_rows if table is not None else 0):
                row = self._row((TokenKind.NESTED_CLASS << 24) | (i + 1))
                enclosing[row.NestedClass_Index] = row.EnclosingClass_Index
            self._enclosing = enclosing
        return self._enclosing.get(typedef_rid, 0)

    def type_spec(self, token: int) -> TypeSig:
        """A TypeSpec token's decoded type."""
        return self._signature_of(token, TokenKind.TYPE_SPEC, "Signature_BlobIndex", decode_type_spec)

    def _owner(self, rid: int, kind: int) -> int:
        """The TypeDef token whose MethodList/FieldList run contains a method/field rid.

        TypeDef rows give only where each run starts; a run ends where the next type's
        begins, so the owner is the last type whose start is <= rid (types with empty
        runs share their start with the next type and are skipped by bisect_right).
        """
        if kind == TokenKind.METHOD_DEF:
            if self._method_starts is None:
                self._method_starts = self._run_starts("MethodList_Index")
            starts = self._method_starts
        else:
            if self._field_starts is None:
                self._field_starts = self._run_starts("FieldList_Index")
            starts = self._field_starts
        i = bisect.bisect_right(starts, rid)
        token = (kind << 24) | rid
        if i == 0:
            raise _unresolved(token, "no TypeDef owns it")
        return (TokenKind.TYPE_DEF << 24) | i

    def _run_starts(self, column: str) -> list[int]:
        starts = []
        for i in range(self.row_count(TokenKind.TYPE_DEF)):
            starts.append(getattr(self._row((TokenKind.TYPE_DEF << 24) | (i + 1)), column))
        if any(a > b for a, b in zip(starts, starts[1:])):
            raise AssemblyError(f"TypeDef {column} is not sorted", kind="bad-metadata")
        return starts

    def method_owner(self, rid: int) -> int:
        """The TypeDef token declaring MethodDef `rid`."""
        self._row(self._rid_token(TokenKind.METHOD_DEF, rid))
        return self._owner(rid, TokenKind.METHOD_DEF)

    def field_owner(self, rid: int) -> int:
        """The TypeDef token declaring Field `rid`."""
        self._row(self._rid_token(TokenKind.FIELD, rid))
        return self._owner(rid, TokenKind.FIELD)

    def method_row(self, rid: int):
        """MethodDef `rid`'s raw columns (`Rva`, `ImplFlags`, ...): what the loader asks to find
        a body, read like every other row (bad-metadata when its bytes cannot be read)."""
        return self._row(self._rid_token(TokenKind.METHOD_DEF, rid), TokenKind.METHOD_DEF)

    def method_name(self, rid: int) -> str:
        """`Ns.Type::Name` (nested: `Ns.Outer/Inner::Name`): how users name a method."""
        row = self._row(self._rid_token(TokenKind.METHOD_DEF, rid))
        return f"{self.type_name(self._owner(rid, TokenKind.METHOD_DEF))}::{self.string(row.Name_StringIndex)}"

    def member_name(self, token: int) -> str:
        """The bare name of a MethodDef, Field or MemberRef (for a MethodSpec, of the
        method it instantiates): what intrinsic recognition and `::Name` lookups compare."""
        kind = token >> 24
        if kind == TokenKind.METHOD_SPEC:
            token, kind = self.method_spec_method(token), self.method_spec_method(token) >> 24
        if kind not in (TokenKind.METHOD_DEF, TokenKind.FIELD, TokenKind.MEMBER_REF):
            raise _unresolved(token, "not a MethodDef, Field, MemberRef or MethodSpec token")
        return self.string(self._row(token).Name_StringIndex)

    def method_def_signature(self, rid: int) -> MethodSig:
        """MethodDef `rid`'s decoded MethodDefSig."""
        return self._signature_of(self._rid_token(TokenKind.METHOD_DEF, rid), TokenKind.METHOD_DEF,
                                  "Signature_BlobIndex", decode_method_sig)

    def method_params(self, rid: int) -> str:
        """`(int32, string)`: what tells overloads of one name apart (with the return
        type for the rare overloads that differ only there, e.g. op_Explicit)."""
        return self.method_def_signature(rid).param_list(self)

    def method_text(self, rid: int) -> str:
        """`instance void Ns.Type::Name(int32, string)`: the full ILDasm form."""
        return self.token(self._rid_token(TokenKind.METHOD_DEF, rid))

    def field_signature(self, rid: int) -> FieldSig:
        """Field `rid`'s decoded FieldSig."""
        return self._signature_of(self._rid_token(TokenKind.FIELD, rid), TokenKind.FIELD,
                                  "Signature_BlobIndex", decode_field_sig)

    def member_ref_parent(self, token: int) -> int:
        """A MemberRef's parent token (TypeDef, TypeRef, ModuleRef, MethodDef or TypeSpec)."""
        row = self._row(token, TokenKind.MEMBER_REF)
        parent = self._decode_coded(row.Class_CodedIndex, _MEMBER_REF_PARENT)
        if parent >> 24 == 0xFF:
            raise _unresolved(token, f"bad MemberRefParent 0x{row.Class_CodedIndex:X}")
        return parent

    def member_ref_signature(self, token: int) -> MethodSig | FieldSig:
        """A MemberRef's MethodRefSig (a call site's: vararg ones have a sentinel) or FieldSig."""
        return self._signature_of(token, TokenKind.MEMBER_REF, "Signature_BlobIndex", decode_member_ref_sig)

    def method_spec_method(self, token: int) -> int:
        """The MethodDef or MemberRef token a MethodSpec instantiates."""
        row = self._row(token, TokenKind.METHOD_SPEC)
        return self._decode_coded(row.Method_CodedIndex, _METHOD_DEF_OR_REF)

    def method_spec(self, token: int) -> MethodSpecSig:
        """A MethodSpec's instantiation (its method: `method_spec_method`)."""
        return self._signature_of(token, TokenKind.METHOD_SPEC, "Instantiation_BlobIndex", decode_method_spec)

    def standalone_signature(self, token: int) -> LocalVarSig | MethodSig | FieldSig:
        """A StandAloneSig: a body's locals, or a calli target's method signature."""
        return self._signature_of(token, TokenKind.STANDALONE_SIG, "Signature_BlobIndex", decode_standalone_sig)

    def locals_signature(self, token: int) -> LocalVarSig:
        """The locals of a method body's LocalVarSigTok (a StandAloneSig token). A body
        without locals has token 0, which callers test for: it names no row."""
        sig = self.standalone_signature(token)
        if not isinstance(sig, LocalVarSig):
            raise AssemblyError(f"StandAloneSig 0x{token:08X} is not a local variable signature",
                                kind="bad-signature")
        return sig

    def signature(self, token: int):
        """The structured signature behind any token that has one."""
        kind = token >> 24
        if kind == TokenKind.METHOD_DEF:
            return self.method_def_signature(token & 0xFFFFFF)
        if kind == TokenKind.FIELD:
            return self.field_signature(token & 0xFFFFFF)
        if kind == TokenKind.MEMBER_REF:
            return self.member_ref_signature(token)
        if kind == TokenKind.METHOD_SPEC:
            return self.method_spec(token)
        if kind == TokenKind.STANDALONE_SIG:
            return self.standalone_signature(token)
        if kind == TokenKind.TYPE_SPEC:
            return self.type_spec(token)
        raise _unresolved(token, "has no signature")

    def user_string(self, token: int) -> str:
        """An `ldstr` operand's value."""
        return self._user_string_units(token).decode("utf-16-le", errors="surrogatepass")

    def _user_string_units(self, token: int) -> bytes:
        if token >> 24 != TokenKind.USER_STRING:
            raise _unresolved(token, "not a user string token")
        offset = token & 0xFFFFFF
        if offset == 0 or offset >= len(self._user_strings):
            raise _unresolved(token, f"offset is outside #US (1..0x{len(self._user_strings) - 1:X})")
        try:
            size, start = _compressed(self._user_strings, offset)
        except ValueError:
            raise _unresolved(token, "bad #US entry length") from None
        if start + size > len(self._user_strings):
            raise _unresolved(token, "#US entry runs past the heap")
        return self._user_strings[start:start + size - (size & 1)]   # drop the flag byte

    # -------------------------------------------------------------------- operands

    def token(self, t: int) -> str:
        """Any IL operand token as ILDasm writes it after the opcode."""
        cached = self._texts.get(t)
        if cached is None:
            cached = self._token_text(t)
            self._texts[t] = cached
        return cached

    def owner_text(self, parent: int) -> str:
        """A member's parent as ILDasm writes it before `::`: a TypeDef/TypeRef bare, a
        TypeSpec as its type (`class X`1<int32>`), a ModuleRef as `[.module m]`, a
        MethodDef (vararg call sites) as its declaring type."""
        kind = parent >> 24
        if kind == TokenKind.MODULE_REF:
            return f"[.module {self.string(self._row(parent).Name_StringIndex)}]"
        if kind == TokenKind.METHOD_DEF:
            # A vararg call site's MemberRef hangs off the MethodDef it calls.
            return self.type_name(self._owner(parent & 0xFFFFFF, TokenKind.METHOD_DEF))
        return self.type_name(parent)

    def _token_text(self, t: int) -> str:
        kind, rid = t >> 24, t & 0xFFFFFF
        if kind in (TokenKind.TYPE_DEF, TokenKind.TYPE_REF, TokenKind.TYPE_SPEC):
            return self.type_name(t)
        if kind == TokenKind.USER_STRING:
            return quote_user_string(self._user_string_units(t))
        if kind == TokenKind.METHOD_DEF:
            row = self._row(t)
            owner = self.type_name(self._owner(rid, TokenKind.METHOD_DEF))
            return self.method_def_signature(rid).format(self, self.string(row.Name_StringIndex), owner)
        if kind == TokenKind.FIELD:
            row = self._row(t)
            owner = self.type_name(self._owner(rid, TokenKind.FIELD))
            return self.field_signature(rid).format(self, self.string(row.Name_StringIndex), owner)
        if kind == TokenKind.MEMBER_REF:
            row = self._row(t)
            owner = self.owner_text(self.member_ref_parent(t))
            return self.member_ref_signature(t).format(self, self.string(row.Name_StringIndex), owner)
        if kind == TokenKind.METHOD_SPEC:
            method = self.method_spec_method(t)
            if method >> 24 == TokenKind.METHOD_DEF:
                row = self._row(method)
                sig = self.method_def_signature(method & 0xFFFFFF)
                owner = self.type_name(self._owner(method & 0xFFFFFF, TokenKind.METHOD_DEF))
            else:
                row = self._row(method)
                sig = self.member_ref_signature(method)
                if not isinstance(sig, MethodSig):
                    raise _unresolved(t, f"instantiates field reference 0x{method:08X}")
                owner = self.owner_text(self.member_ref_parent(method))
            return sig.format(self, self.string(row.Name_StringIndex), owner, generic_args=self.method_spec(t))
        if kind == TokenKind.STANDALONE_SIG:
            return self.standalone_signature(t).format(self)
        raise _unresolved(t, "not a kind of token an IL instruction takes")


def _dnfile_row(table, rid: int):
    """Row `rid` of a dnfile table as dnfile parses it (its raw column struct), or None when
    dnfile cannot read it. A row dnfile fails to construct (its bytes lie past the #~ stream)
    comes back as a struct without its columns, or dnfile raises whatever its parser met
    (AssertionError, TypeError, ...): this is the dnfile call boundary, so both are None."""
    try:
        row = table.rows[rid - 1]
        struct_ = getattr(row, "struct", None) if row is not None else None
    except Exception:  # noqa: BLE001 - dnfile's lazy row parse on damaged metadata
        return None
    if struct_ is None or not all(hasattr(struct_, keys[0]) for keys in getattr(struct_, "__keys__", ())):
        return None
    return struct_


def _heap_bytes(heap, name: str) -> bytes:
    """A heap's whole contents (dnfile's public accessor, called once per heap)."""
    if heap is None:
        return b""
    try:
        data = heap.get_data_at_offset(0, heap.sizeof())
    except Exception as e:  # noqa: BLE001 - the dnfile call boundary: a heap its header misplaces
        raise AssemblyError(f"the {name} heap cannot be read: {type(e).__name__}: {e}", kind="bad-metadata") from None
    return bytes(data or b"")


def _compressed(data: bytes, pos: int) -> tuple[int, int]:
    b0 = data[pos]
    if b0 < 0x80:
        return b0, pos + 1
    if b0 < 0xC0 and pos + 2 <= len(data):
        return ((b0 & 0x3F) << 8) | data[pos + 1], pos + 2
    if b0 < 0xE0 and pos + 4 <= len(data):
        return int.from_bytes(data[pos:pos + 4], "big") & 0x1FFFFFFF, pos + 4
    raise ValueError(b0)
