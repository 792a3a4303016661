"""Metadata names on real assemblies: every signature decodes, names agree with monodis,
bad tokens are reported, answers are cached, and dnfile is never made to load everything.

The monodis oracle (Mono 6.8's `monodis --typeref/--typedef/--typespec/--memberref/
--methodspec/--method/--fields/--userstrings`). Its text differs from ours (ILDasm's
ilasm syntax) in ways that carry no information; these, and only these, are normalised
away on both sides before comparing:

1. Assembly scopes inside signatures. monodis loads the referenced assemblies through
   Mono's own class libraries and prints the scope of what it found (`[mscorlib]`,
   `[System.Core]`, nothing for the image itself); we print the TypeRef's own scope
   (`[netstandard]`), never loading anything. Signatures are compared without `[...]`
   scopes; the scopes themselves are compared exactly in the TypeRef table.
2. Spelling: `unsigned int8` = `uint8`, `native unsigned int` = `native uint`,
   `TypedByRef` = `typedref`, `string::`/`object::` = `System.String::`/`System.Object::`,
   the optional `default` calling-convention word, quotes around identifiers, `class` before
   a method owner that is a TypeRef/TypeDef, whitespace (`modreq (X)`, `int32 [0...]`, `, `
   vs `,` between generic arguments, trailing blanks).
3. Not part of a signature blob: `[out]`/`[in]`/`[opt]` parameter attributes, parameter
   names (monodis invents `A_1`), `marshal (...)` clauses.
4. Generic parameters: the method table prints them by name (`!!T`, `Name<T>`), we print
   them by number (`!!0`, `Name<[1]>`); names are mapped to numbers through the
   GenericParam table.
5. monodis's own limitations, skipped or worked around: entries it prints without a
   generic context (`!(null)`) are skipped; `--method`/`--fields` headers name a nested
   type by its own name only (`.<>c`); `--userstrings` walks the heap assuming 1-byte
   lengths, so only entries at true entry offsets are compared, and its `bytearray` dump
   includes the heap's flag byte, which is dropped.
6. System.Private.CoreLib only: monodis decides `class` vs `valuetype` by loading the type
   into Mono, which does not treat CoreLib's own value types as value types (it prints
   `class System.Span`1<char>` where the blob says VALUETYPE), so for CoreLib the keywords
   are dropped. For other assemblies they are compared.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import time
from collections import defaultdict

import dnfile
import pefile
import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.names import MetadataNames, TokenKind, quote_user_string
from llilc_eh.assembly.signatures import (
    FieldSig, LocalVarSig, MethodSig, decode_compressed_uint,
)
from llilc_eh.errors import AssemblyError

CORELIB = "System.Private.CoreLib.dll"
PYRUNTIME = "Python.Runtime.dll"


@functools.lru_cache(maxsize=None)
def _location(file_name: str):
    path = Corpus().find(file_name).location
    return path if path.is_file() else None


def open_lazily(file_name: str) -> dnfile.dnPE:
    """Open a corpus assembly the way the loader does: lazily, CLR directory only."""
    path = _location(file_name)
    if path is None:
        pytest.skip(f"{file_name} is not in the corpus cache (run tools/fetch_corpus.py)")
    pe = dnfile.dnPE(str(path), fast_load=True, clr_lazy_load=True)
    pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR"]])
    return pe


@functools.lru_cache(maxsize=None)
def shared_names(file_name: str) -> MetadataNames:
    return MetadataNames(open_lazily(file_name))


# ------------------------------------------------------------ (a) decode everything

EXPECTED_ROWS = {
    CORELIB: {TokenKind.METHOD_DEF: 21220, TokenKind.TYPE_SPEC: 1063, TokenKind.MEMBER_REF: 3043,
              TokenKind.STANDALONE_SIG: 2508, TokenKind.METHOD_SPEC: 1095, TokenKind.FIELD: 7053,
              TokenKind.TYPE_DEF: 1891, TokenKind.TYPE_REF: 0},
    PYRUNTIME: {TokenKind.METHOD_DEF: 3920, TokenKind.TYPE_SPEC: 316, TokenKind.MEMBER_REF: 1297,
                TokenKind.STANDALONE_SIG: 629, TokenKind.METHOD_SPEC: 167, TokenKind.FIELD: 1757,
                TokenKind.TYPE_DEF: 320, TokenKind.TYPE_REF: 280},
}
# StandAloneSigs are locals, except calli targets' method signatures.
EXPECTED_LOCALS = {CORELIB: 2508, PYRUNTIME: 546}


@pytest.mark.parametrize("file_name", [CORELIB, PYRUNTIME])
def test_every_signature_decodes(file_name, record_property):
    pe = open_lazily(file_name)
    names = MetadataNames(pe)          # a fresh instance: nothing cached yet
    counts, seconds = {}, {}
    locals_count = 0
    for kind, expected in EXPECTED_ROWS[file_name].items():
        assert names.row_count(kind) == expected
        start = time.perf_counter()
        for rid in range(1, expected + 1):
            token = (kind << 24) | rid
            if kind in (TokenKind.TYPE_DEF, TokenKind.TYPE_REF):
                names.type_name(token)
                continue
            sig = names.signature(token)
            if kind == TokenKind.STANDALONE_SIG and isinstance(sig, LocalVarSig):
                assert names.locals_signature(token) is sig
                locals_count += 1
            if kind == TokenKind.MEMBER_REF:
                assert isinstance(sig, (MethodSig, FieldSig))
        decoded = time.perf_counter()
        for rid in range(1, expected + 1):
            assert names.token((kind << 24) | rid)
        counts[f"0x{kind:02X}"] = expected
        seconds[f"0x{kind:02X}"] = (round(decoded - start, 3), round(time.perf_counter() - decoded, 3))
    assert locals_count == EXPECTED_LOCALS[file_name]
    record_property("rows", counts)
    record_property("seconds (decode, text)", seconds)
    print(f"{file_name}: rows {counts}; seconds (decode, text) {seconds}")
    # The whole point of reading raw row structs: dnfile never parsed all tables.
    assert pe.net.mdtables._loaded is False


# ---------------------------------------------------------------- (b) monodis

requires_monodis = pytest.mark.skipif(shutil.which("monodis") is None, reason="monodis (mono-utils) not installed")


@functools.lru_cache(maxsize=None)
def monodis(option: str, file_name: str) -> tuple[str, ...]:
    out = subprocess.run(["monodis", f"--{option}", str(_location(file_name))],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return tuple(out.splitlines()[1:])    # drop the table title


_SCOPE = re.compile(r"\[(?:\.module )?[A-Za-z_][\w.\-]*\]")
_MARSHAL = re.compile(r" ?marshal \([^()]*(?:\([^()]*\))?[^()]*\)")
_GENERIC_PARAM = re.compile(r"(!!?)('[^']+'|[A-Za-z_][\w`]*)")


def normalise(text: str, keywordless: bool) -> str:
    """Apply the documented normalisations (module docstring) to one side's text."""
    text = _MARSHAL.sub("", text)
    text = re.sub(r"\[(?:out|in|opt)\] ", "", text)
    text = _SCOPE.sub("", text)
    text = text.replace("native unsigned int", "native uint").replace("TypedByRef", "typedref")
    text = re.sub(r"unsigned int(8|16|32|64)", r"uint\1", text)
    text = re.sub(r"\bSystem\.String::", "string::", text).replace("System.Object::", "object::")
    text = re.sub(r"\bdefault ", "", text)
    text = re.sub(r"'([^']*)'", r"\1", text)
    text = re.sub(r"\b(?:class|valuetype) ([^\s<>]+)::", r"\1::", text)
    text = re.sub(r" +", " ", text).replace(", ", ",")
    for spaced in (" (", " [", " ,", " )"):
        text = text.replace(spaced, spaced[1])
    if keywordless:
        text = re.sub(r"\b(?:class|valuetype) ", "", text)
    return text.strip()


def split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch in "<(") - (ch in ">)")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return parts + ([current.strip()] if current.strip() else [])


def matching_open(text: str, close: str, open_: str) -> int:
    """Index of the bracket that opens the one closing `text`."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += (text[i] == close) - (text[i] == open_)
        if depth == 0:
            return i
    raise ValueError(text)


class Comparison:
    """One monodis table against our names."""

    def __init__(self, file_name: str, keywordless: bool):
        self.file_name = file_name
        self.names = shared_names(file_name)
        self.keywordless = keywordless
        self.compared = 0
        self.skipped = 0
        self.mismatches: list[str] = []

    def check(self, token: int, ours: str, theirs: str, exact: bool = False) -> None:
        self.compared += 1
        same = ours == theirs if exact else normalise(ours, self.keywordless) == normalise(theirs, self.keywordless)
        if not same:
            self.mismatches.append(f"0x{token:08X}\n  ours: {ours}\n  mono: {theirs}")

    def same_type(self, header: str, owner_token: int) -> bool:
        ours = self.names.type_name(owner_token)
        if header.startswith(".") and "/" in ours:     # `.<>c` for `Outer/<>c`
            return header[1:] == ours.rsplit("/", 1)[1]
        return header.lstrip(".") == ours

    @functools.cached_property
    def generic_params(self) -> dict[int, dict[str, int]]:
        """Owner token -> {generic parameter name: number}, from the GenericParam table."""
        table = open_lazily(self.file_name).net.mdtables.GenericParam
        by_owner: dict[int, dict[str, int]] = defaultdict(dict)
        for row in (table.rows if table is not None else ()):
            raw = row.struct
            owner = ((TokenKind.METHOD_DEF if raw.Owner_CodedIndex & 1 else TokenKind.TYPE_DEF) << 24) \
                | (raw.Owner_CodedIndex >> 1)
            by_owner[owner][self.names.string(raw.Name_StringIndex)] = raw.Number
        return by_owner

    def number_generic_params(self, text: str, method: int, owner: int) -> str:
        method_params, type_params = self.generic_params.get(method, {}), self.generic_params.get(owner, {})
        def number(m: re.Match) -> str:
            name = m[2].strip("'")
            return m[1] + str((method_params if m[1] == "!!" else type_params).get(name, name))
        return _GENERIC_PARAM.sub(number, text)

    # one method per monodis option

    def typeref(self, lines):
        for line in filter(None, lines):
            rid, _, text = line.partition(": ")
            self.check(0x01000000 | int(rid), self.names.type_name(0x01000000 | int(rid)), text, exact=True)

    def typedef(self, lines):
        for line in filter(None, lines):
            m = re.match(r"(\d+): (.*) \(flist=", line)
            if int(m[1]) == 1:        # <Module>, which monodis prints as (null)
                continue
            self.check(0x02000000 | int(m[1]), self.names.type_name(0x02000000 | int(m[1])), m[2], exact=True)

    def typespec(self, lines):
        for line in filter(None, lines):
            rid, _, text = line.partition(": ")
            if "(null)" in text:
                self.skipped += 1
                continue
            self.check(0x1B000000 | int(rid), self.names.type_name(0x1B000000 | int(rid)), text)

    def memberref(self, lines):
        for k, line in enumerate(lines):
            m = re.match(r"(\d+): \w+\[\d+\] ", line)
            if not m:
                continue
            token = 0x0A000000 | int(m[1])
            resolved = lines[k + 1].strip().removeprefix("Resolved: ")
            signature = lines[k + 2].strip().removeprefix("Signature: ")
            self.check(token, self.names.member_ref_signature(token).format(self.names), signature)
            owner = self.names.owner_text(self.names.member_ref_parent(token))
            self.check(token, f"{owner}.{self.names.member_name(token)}", resolved)

    def methodspec(self, lines):
        for line in filter(None, lines):
            rid, _, text = line.partition(": ")
            token = 0x2B000000 | int(rid)
            if "(null)" in text:
                self.skipped += 1
                continue
            # monodis: "<method text>, <instantiation>"
            self.check(token, f"{self.names.token(token)}, {self.names.method_spec(token).format(self.names)}", text)

    def method(self, lines):
        header = None
        for line in lines:
            if line.startswith("########## "):
                header = line[11:]
                continue
            m = re.match(r"(\d+): (.*)  \(param: \d+ impl_flags: .*\)$", line)
            rid = int(m[1])
            token = 0x06000000 | rid
            owner = self.names.method_owner(rid)
            self.compared += 1
            if not self.same_type(header, owner):
                self.mismatches.append(f"0x{token:08X} owner {self.names.type_name(owner)} vs {header}")
            # "<prefix> <ret> <name>[<generic params>] (<type name>, ...)"
            body = m[2]
            k = matching_open(body, ")", "(")
            head, params = body[:k].rstrip(), body[k + 1:-1]
            arity = ""
            if head.endswith(">"):
                g = matching_open(head, ">", "<")
                arity, head = f"<[{len(split_top_level(head[g + 1:-1]))}]>", head[:g]
            prefix, _, name = head.rpartition(" ")
            types = [re.sub(r"^(\[\w+\] )+", "", p).rsplit(" ", 1)[0] for p in split_top_level(params)]
            theirs = f"{prefix} {name.strip(chr(39))}{arity}({', '.join(types)})"
            ours = self.names.method_def_signature(rid).format(self.names, name=self.names.member_name(token))
            self.check(token, ours, self.number_generic_params(theirs, token, owner))

    def fields(self, lines):
        header = None
        for line in filter(None, lines):
            if line.startswith("########## "):
                header = line[11:]
                continue
            if line.startswith("\t"):     # "\trva: ..." under fields with initial data
                continue
            m = re.match(r"(\d+): (.*) (\S+): [\w ]*$", line)
            rid = int(m[1])
            token = 0x04000000 | rid
            owner = self.names.field_owner(rid)
            if not self.same_type(header, owner):
                self.mismatches.append(f"0x{token:08X} owner {self.names.type_name(owner)} vs {header}")
            theirs = self.number_generic_params(f"{m[2]} {m[3].strip(chr(39))}", 0, owner)
            ours = self.names.field_signature(rid).format(self.names, name=self.names.member_name(token))
            self.check(token, ours, theirs)

    def userstrings(self, lines):
        heap = open_lazily(self.file_name).net.user_strings
        data = heap.get_data_at_offset(0, heap.sizeof())
        starts, offset = set(), 1
        while offset < len(data):
            size, begin = decode_compressed_uint(data, offset)
            starts.add(offset)
            offset = begin + size
        k = 0
        while k < len(lines):
            m = re.match(r"([0-9a-f]+): (.*)$", lines[k])
            k += 1
            if not m:
                continue
            offset, text = int(m[1], 16), m[2]
            if text == "bytearray (":
                hexes = []
                while k < len(lines) and not re.match(r"[0-9a-f]+: ", lines[k]):
                    hexes += re.findall(r"\b[0-9a-f]{2}\b", lines[k].split("//")[0])
                    k += 1
                text = "bytearray (" + " ".join(hexes[:-1]) + ")"     # without the flag byte
            if offset == 0 or offset not in starts:
                self.skipped += 1
                continue
            self.check(0x70000000 | offset, self.names.token(0x70000000 | offset), text, exact=True)


MONODIS_TABLES = ["typeref", "typedef", "typespec", "memberref", "methodspec", "method", "fields", "userstrings"]


@requires_monodis
@pytest.mark.parametrize("table", MONODIS_TABLES)
@pytest.mark.parametrize("file_name, keywordless", [(PYRUNTIME, False), ("System.Linq.dll", False),
                                                    (CORELIB, True)])
def test_names_agree_with_monodis(file_name, keywordless, table, record_property):
    comparison = Comparison(file_name, keywordless)
    getattr(comparison, table)(monodis(table, file_name))
    record_property("compared", comparison.compared)
    record_property("skipped", comparison.skipped)
    if not (file_name == CORELIB and table == "typeref"):      # CoreLib references nothing
        assert comparison.compared > 0
    assert not comparison.mismatches, \
        f"{len(comparison.mismatches)} of {comparison.compared} differ:\n" + "\n".join(comparison.mismatches[:10])


# ----------------------------------------------------------------- known names

def test_known_names_in_python_runtime():
    names = shared_names(PYRUNTIME)
    # A nested TypeRef carries the scope of its outermost type.
    assert names.type_name(0x01000005) == "[netstandard]System.Diagnostics.DebuggableAttribute/DebuggingModes"
    assert names.type_name(0x020000D4) == "Python.Runtime.AssemblyManager/<>c"
    assert names.type_name(0x1B000006) == \
        "valuetype Python.Runtime.MaybeMethodBase`1<class [netstandard]System.Reflection.MethodBase>"
    assert names.token(0x0A000016) == \
        "instance !0 class [netstandard]System.Collections.Generic.IEnumerator`1<string>::get_Current()"
    assert names.token(0x2B000001) == "!!0[] [netstandard]System.Array::Empty<string>()"
    assert names.token(0x06000D99) == ("method unmanaged cdecl void *(valuetype Python.Runtime.BorrowedReference) "
                                       "Python.Runtime.Runtime/Delegates::get_Py_IncRef()")
    assert names.method_name(0x0E) == "Python.Runtime.AssemblyManager::ResolveHandler"
    assert names.method_params(0x0E) == "(object, class [netstandard]System.ResolveEventArgs)"
    assert names.method_text(0x0E) == ("class [netstandard]System.Reflection.Assembly "
                                       "Python.Runtime.AssemblyManager::ResolveHandler"
                                       "(object, class [netstandard]System.ResolveEventArgs)")
    assert names.token(0x04000002) == "uint8 System.Runtime.CompilerServices.NullableContextAttribute::Flag"
    assert names.token(0x11000002) == ".locals (class [netstandard]System.Reflection.Assembly)"
    assert names.token(0x70000001) == '"path"' and names.user_string(0x70000001) == "path"
    assert names.member_name(0x2B000001) == "Empty"


def test_exception_constructors_are_told_apart_by_params():
    names = shared_names(CORELIB)
    ctors = {names.method_params(rid) for rid in range(1, names.row_count(TokenKind.METHOD_DEF) + 1)
             if names.method_name(rid) == "System.Exception::.ctor"}
    assert ctors == {"()", "(string)", "(string, class System.Exception)",
                     "(class System.Runtime.Serialization.SerializationInfo, "
                     "valuetype System.Runtime.Serialization.StreamingContext)"}


def test_user_string_quoting():
    assert quote_user_string("a\"b\\c\r\n\t".encode("utf-16-le")) == r'"a\"b\\c\r\n\t"'
    assert quote_user_string(b"") == '""'
    assert quote_user_string("年".encode("utf-16-le")) == "bytearray (74 5e)"
    assert quote_user_string("\x01".encode("utf-16-le")) == "bytearray (01 00)"


# ------------------------------------------------------------- unresolved tokens

@pytest.mark.parametrize("call, token", [
    ("token", 0x02000000),               # rid 0
    ("token", 0x02FFFFFF),               # past the table
    ("token", 0x01000001),               # CoreLib has no TypeRef table
    ("token", 0x23000001),               # AssemblyRef: never an IL operand
    ("token", 0x70FFFFFF),               # past #US
    ("token", 0x70000000),
    ("type_name", 0x06000001),           # a method is not a type
    ("type_name", 0x1B000000),
    ("locals_signature", 0x11000000),
    ("locals_signature", 0x06000001),
    ("signature", 0x02000002),
    ("member_name", 0x02000002),
    ("user_string", 0x06000001),
])
def test_unresolved_tokens(call, token):
    names = shared_names(CORELIB)
    with pytest.raises(AssemblyError) as info:
        getattr(names, call)(token)
    assert info.value.kind == "unresolved-token"
    assert f"0x{token:08X}" in info.value.reason


@pytest.mark.parametrize("call, rid", [("method_name", 0), ("method_name", 10 ** 6), ("method_params", 0),
                                       ("method_def_signature", 21221), ("method_owner", 0), ("field_owner", 7054)])
def test_unresolved_rids(call, rid):
    with pytest.raises(AssemblyError) as info:
        getattr(shared_names(CORELIB), call)(rid)
    assert info.value.kind == "unresolved-token"


def test_locals_of_a_calli_signature_is_a_bad_signature():
    names = shared_names(PYRUNTIME)
    calli = next(0x11000000 | rid for rid in range(1, names.row_count(TokenKind.STANDALONE_SIG) + 1)
                 if isinstance(names.standalone_signature(0x11000000 | rid), MethodSig))
    with pytest.raises(AssemblyError) as info:
        names.locals_signature(calli)
    assert info.value.kind == "bad-signature"


# --------------------------------------------------------------------- caching

def test_lookups_are_cached(monkeypatch):
    names = MetadataNames(open_lazily(PYRUNTIME))
    calls = []
    original = names._name_type
    monkeypatch.setattr(names, "_name_type", lambda token: calls.append(token) or original(token))
    first = names.type_name(0x01000005)         # nested: names its enclosing TypeRef too
    assert calls == [0x01000005, 0x01000004]
    for _ in range(1000):
        assert names.type_name(0x01000005) is first
    assert names.type_name(0x01000004) == "[netstandard]System.Diagnostics.DebuggableAttribute"
    assert calls == [0x01000005, 0x01000004]
    assert names.method_def_signature(0x0E) is names.method_def_signature(0x0E)
    assert names.token(0x0A000016) is names.token(0x0A000016)


def test_a_cycle_of_nested_types_is_reported_not_recursed():
    names = MetadataNames(open_lazily(PYRUNTIME))
    names._enclosing = {0xD4: 0xD5, 0xD5: 0xD4}      # corrupt NestedClass: 212 <-> 213
    with pytest.raises(AssemblyError) as info:
        names.type_name(0x020000D4)
    assert info.value.kind == "unresolved-token" and "0x020000D4" in info.value.reason
