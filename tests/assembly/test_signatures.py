"""ECMA-335 II.23.2 signature decoding: the spec's own examples, ilasm text, a hypothesis
round trip through an independent encoder, and the errors garbage must produce.

The encoder below is written from the spec, not from the decoder: it is the second
implementation the round trip compares against. The whole-corpus decoding and the
monodis cross-check live in test_names.py, which has the metadata to name tokens.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from llilc_eh.assembly.signatures import (
    ArrayShape, ArrayType, ByRefType, CallKind, CustomMod, ElementType, FieldSig, FnPtrType,
    GenericInstType, GenericVar, LocalVarSig, MAX_NESTING, MethodSig, MethodSpecSig,
    ModifiedType, NamedType, PinnedType, PointerType, PrimitiveType, PropertySig, SzArrayType,
    TypeSig, decode_compressed_int, decode_compressed_uint, decode_field_sig, decode_locals_sig,
    decode_member_ref_sig, decode_method_sig, decode_method_spec, decode_property_sig,
    decode_standalone_sig, decode_type, decode_type_def_or_ref,
)
from llilc_eh.errors import AssemblyError

TYPEREF_EXCEPTION = 0x01000012
TYPEREF_SPAN = 0x01000020
TYPEREF_ISVOLATILE = 0x01000030
TYPEREF_ISCONST = 0x01000031


class FakeNamer:
    """Names a handful of tokens the way MetadataNames would."""

    names = {
        TYPEREF_EXCEPTION: "[mscorlib]System.Exception",
        TYPEREF_SPAN: "[System.Runtime]System.Span`1",
        TYPEREF_ISVOLATILE: "[System.Runtime]System.Runtime.CompilerServices.IsVolatile",
        TYPEREF_ISCONST: "[System.Runtime]System.Runtime.CompilerServices.IsConst",
        0x02000005: "X",
    }

    def type_name(self, token: int) -> str:
        return self.names[token]


NAMER = FakeNamer()


# ------------------------------------------------------------------ the encoder

def enc_uint(value: int) -> bytes:
    """II.23.2 compressed unsigned integer."""
    if value < 0x80:
        return bytes([value])
    if value < 0x4000:
        return bytes([0x80 | (value >> 8), value & 0xFF])
    assert value < 0x20000000
    return (0xC0000000 | value).to_bytes(4, "big")


def enc_sint(value: int) -> bytes:
    """II.23.2 compressed signed integer: rotate left within the smallest width that fits."""
    for bits, size in ((7, 1), (14, 2), (29, 4)):
        if -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            raw = ((value << 1) & ((1 << bits) - 1)) | (1 if value < 0 else 0)
            return raw.to_bytes(size, "big") if size == 1 else \
                ((0x8000 if size == 2 else 0xC0000000) | raw).to_bytes(size, "big")
    raise ValueError(value)


def enc_token(token: int) -> bytes:
    tag = {0x02: 0, 0x01: 1, 0x1B: 2}[token >> 24]
    return enc_uint(((token & 0xFFFFFF) << 2) | tag)


def enc_type(t: TypeSig) -> bytes:
    if isinstance(t, PrimitiveType):
        return bytes([t.element_type])
    if isinstance(t, NamedType):
        return bytes([0x11 if t.value_type else 0x12]) + enc_token(t.token)
    if isinstance(t, GenericVar):
        return bytes([0x1E if t.method else 0x13]) + enc_uint(t.number)
    if isinstance(t, GenericInstType):
        return (bytes([0x15, 0x11 if t.generic.value_type else 0x12]) + enc_token(t.generic.token)
                + enc_uint(len(t.args)) + b"".join(enc_type(a) for a in t.args))
    if isinstance(t, PointerType):
        return b"\x0f" + enc_type(t.target)
    if isinstance(t, ByRefType):
        return b"\x10" + enc_type(t.target)
    if isinstance(t, SzArrayType):
        return b"\x1d" + enc_type(t.element)
    if isinstance(t, ArrayType):
        s = t.shape
        return (b"\x14" + enc_type(t.element) + enc_uint(s.rank)
                + enc_uint(len(s.sizes)) + b"".join(enc_uint(x) for x in s.sizes)
                + enc_uint(len(s.lower_bounds)) + b"".join(enc_sint(x) for x in s.lower_bounds))
    if isinstance(t, FnPtrType):
        return b"\x1b" + enc_method(t.method)
    if isinstance(t, ModifiedType):
        return b"".join(bytes([0x1F if m.required else 0x20]) + enc_token(m.token)
                        for m in t.modifiers) + enc_type(t.target)
    if isinstance(t, PinnedType):
        return b"\x45" + enc_type(t.target)
    raise TypeError(t)


def enc_method(m: MethodSig) -> bytes:
    head = int(m.call_kind) | (0x10 if m.generic_param_count else 0) | (0x20 if m.has_this else 0) \
        | (0x40 if m.explicit_this else 0)
    out = bytes([head])
    if m.generic_param_count:
        out += enc_uint(m.generic_param_count)
    out += enc_uint(len(m.params)) + enc_type(m.return_type)
    for i, p in enumerate(m.params):
        if i == m.sentinel:
            out += b"\x41"
        out += enc_type(p)
    return out


def enc_locals(sig: LocalVarSig) -> bytes:
    return b"\x07" + enc_uint(len(sig.locals)) + b"".join(enc_type(t) for t in sig.locals)


def enc_method_spec(sig: MethodSpecSig) -> bytes:
    return b"\x0a" + enc_uint(len(sig.args)) + b"".join(enc_type(t) for t in sig.args)


# --------------------------------------------------------- the spec's own examples

@pytest.mark.parametrize("value, encoded", [
    (0x03, "03"), (0x7F, "7f"), (0x80, "8080"), (0x2E57, "ae57"), (0x3FFF, "bfff"),
    (0x4000, "c0004000"), (0x1FFFFFFF, "dfffffff"),
])
def test_compressed_uint_ecma_examples(value, encoded):
    data = bytes.fromhex(encoded)
    assert decode_compressed_uint(data) == (value, len(data))
    assert enc_uint(value) == data


@pytest.mark.parametrize("value, encoded", [
    (3, "06"), (-3, "7b"), (64, "8080"), (-64, "01"), (8192, "c0004000"), (-8192, "8001"),
    (268435455, "dffffffe"), (-268435456, "c0000001"),
])
def test_compressed_int_ecma_examples(value, encoded):
    data = bytes.fromhex(encoded)
    assert decode_compressed_int(data) == (value, len(data))
    assert enc_sint(value) == data


def test_type_def_or_ref_ecma_example():
    # II.23.2.8: TypeRef token 0x01000012 is encoded as 0x49.
    assert decode_type_def_or_ref(b"\x49") == (0x01000012, 1)
    assert decode_type_def_or_ref(b"\x08") == (0x02000002, 1)
    assert decode_type_def_or_ref(b"\x0a") == (0x1B000002, 1)


# ---------------------------------------------------------------- ilasm text

def tok(token: int) -> str:
    return enc_token(token).hex()


@pytest.mark.parametrize("blob, text", [
    ("08", "int32"),
    ("0e", "string"),
    ("1c", "object"),
    ("05", "uint8"),
    ("09", "uint32"),
    ("18", "native int"),
    ("19", "native uint"),
    ("16", "typedref"),
    ("12" + tok(TYPEREF_EXCEPTION), "class [mscorlib]System.Exception"),
    ("1511" + tok(TYPEREF_SPAN) + "0105", "valuetype [System.Runtime]System.Span`1<uint8>"),
    ("1300", "!0"),
    ("1e00", "!!0"),
    ("1e8080", "!!128"),
    ("1d08", "int32[]"),
    ("1d1d0e", "string[][]"),
    ("14080200020000", "int32[0...,0...]"),
    ("1408010000", "int32[...]"),
    ("140802020a0b0102", "int32[1...10,11]"),
    ("1408030001" + "7b", "int32[-3...,,]"),
    ("0f05", "uint8*"),
    ("0f01", "void*"),
    ("1008", "int32&"),
    ("1b000101" + "08", "method void *(int32)"),
    ("1b20000e", "method instance string *()"),
    ("1b02010108", "method unmanaged stdcall void *(int32)"),
    ("1f" + tok(TYPEREF_ISVOLATILE) + "08", "int32 modreq([System.Runtime]System.Runtime.CompilerServices.IsVolatile)"),
    # The modifier nearest the type in the blob is written first (ILDasm's order).
    ("1f" + tok(TYPEREF_ISVOLATILE) + "20" + tok(TYPEREF_ISCONST) + "08",
     "int32 modopt([System.Runtime]System.Runtime.CompilerServices.IsConst) "
     "modreq([System.Runtime]System.Runtime.CompilerServices.IsVolatile)"),
    ("1512" + tok(0x02000005) + "02" + "1300" + "1511" + tok(TYPEREF_SPAN) + "011e01",
     "class X<!0,valuetype [System.Runtime]System.Span`1<!!1>>"),
])
def test_type_text(blob, text):
    assert decode_type(bytes.fromhex(blob)).format(NAMER) == text


def test_type_without_namer_shows_tokens():
    assert str(decode_type(bytes.fromhex("12" + tok(TYPEREF_EXCEPTION)))) == "class token(0x01000012)"


def test_method_text():
    sig = decode_method_sig(bytes.fromhex("200201080e"))
    assert sig == MethodSig(CallKind.DEFAULT, True, False, 0, PrimitiveType(ElementType.VOID),
                            (PrimitiveType(ElementType.I4), PrimitiveType(ElementType.STRING)))
    assert sig.format(NAMER, name="Name", owner="class X") == "instance void class X::Name(int32, string)"
    assert sig.format(NAMER) == "instance void(int32, string)"
    assert sig.param_list() == "(int32, string)"


def test_generic_method_text():
    sig = decode_method_sig(bytes.fromhex("1001011e001e00"))
    assert sig.generic_param_count == 1 and sig.is_generic
    assert sig.format(NAMER, name="M", owner="X") == "!!0 X::M<[1]>(!!0)"
    spec = decode_method_spec(bytes.fromhex("0a02080e"))
    assert spec == MethodSpecSig((PrimitiveType(ElementType.I4), PrimitiveType(ElementType.STRING)))
    assert sig.format(NAMER, name="M", owner="X", generic_args=spec) == "!!0 X::M<int32,string>(!!0)"


def test_vararg_call_site():
    # MethodRefSig of `call vararg void F(int32, ..., int32, string)`.
    sig = decode_method_sig(bytes.fromhex("0503010841080e"))
    assert sig.call_kind == CallKind.VARARG and sig.sentinel == 1
    assert sig.fixed_params == (PrimitiveType(ElementType.I4),)
    assert sig.vararg_params == (PrimitiveType(ElementType.I4), PrimitiveType(ElementType.STRING))
    assert sig.format(NAMER, name="F") == "vararg void F(int32, ..., int32, string)"


def test_explicit_this():
    sig = decode_method_sig(bytes.fromhex("600001"))
    assert sig.has_this and sig.explicit_this
    assert sig.format(NAMER, name="F") == "instance explicit void F()"


def test_locals_field_property_member_ref():
    local = decode_locals_sig(bytes.fromhex("07034510080e1f" + tok(TYPEREF_ISVOLATILE) + "4508"))
    assert local.locals[0] == PinnedType(ByRefType(PrimitiveType(ElementType.I4)))
    assert [local.pinned(i) for i in range(3)] == [True, False, True]
    assert local.locals[2].strip() == PrimitiveType(ElementType.I4)
    assert local.format(NAMER) == (".locals (int32& pinned, string, int32 pinned "
                                   "modreq([System.Runtime]System.Runtime.CompilerServices.IsVolatile))")
    assert decode_locals_sig(b"\x07\x00") == LocalVarSig(())

    field = decode_field_sig(bytes.fromhex("061d08"))
    assert field == FieldSig(SzArrayType(PrimitiveType(ElementType.I4)))
    assert field.format(NAMER, name="f", owner="X") == "int32[] X::f"
    assert decode_member_ref_sig(bytes.fromhex("061d08")) == field
    assert isinstance(decode_member_ref_sig(bytes.fromhex("200001")), MethodSig)

    prop = decode_property_sig(bytes.fromhex("28010e08"))
    assert prop == PropertySig(True, PrimitiveType(ElementType.STRING), (PrimitiveType(ElementType.I4),))
    assert prop.format() == "instance string(int32)"

    assert isinstance(decode_standalone_sig(bytes.fromhex("070108")), LocalVarSig)
    assert decode_standalone_sig(bytes.fromhex("02010108")).format() == "unmanaged stdcall void(int32)"


# ---------------------------------------------------------- hypothesis round trip

tokens = st.builds(lambda table, rid: (table << 24) | rid,
                   st.sampled_from([0x01, 0x02, 0x1B]), st.integers(1, 0xFFFFFF))
named = st.builds(NamedType, tokens, st.booleans())
primitives = st.sampled_from([e for e in ElementType if 0x02 <= e <= 0x0E or e in (0x16, 0x18, 0x19, 0x1C)]
                             ).map(PrimitiveType)
modifiers = st.lists(st.builds(CustomMod, st.booleans(), tokens), min_size=1, max_size=3).map(tuple)
VOID = PrimitiveType(ElementType.VOID)


def modified(inner):
    """Custom modifiers in a row decode as one ModifiedType, so never nest two."""
    return st.builds(lambda t, mods: t if isinstance(t, ModifiedType) else ModifiedType(t, mods),
                     inner, modifiers)


def methods(types):
    @st.composite
    def build(draw):
        kind = draw(st.sampled_from([CallKind.DEFAULT, CallKind.VARARG, CallKind.C, CallKind.STDCALL,
                                     CallKind.THISCALL, CallKind.FASTCALL, CallKind.UNMANAGED,
                                     CallKind.NATIVEVARARG]))
        has_this = draw(st.booleans())
        params = tuple(draw(st.lists(st.one_of(types, types.map(ByRefType)), max_size=4)))
        sentinel = None
        if kind in (CallKind.VARARG, CallKind.NATIVEVARARG) and params and draw(st.booleans()):
            sentinel = draw(st.integers(0, len(params) - 1))
        ret = draw(st.one_of(st.just(VOID), types, types.map(ByRefType), modified(st.just(VOID))))
        return MethodSig(kind, has_this, has_this and draw(st.booleans()), draw(st.integers(0, 200)),
                         ret, params, sentinel)
    return build()


def extend(children):
    shapes = st.integers(1, 5).flatmap(lambda rank: st.builds(
        ArrayShape, st.just(rank),
        st.lists(st.integers(0, 0x1FFFFFFF), max_size=rank).map(tuple),
        st.lists(st.integers(-(1 << 28), (1 << 28) - 1), max_size=rank).map(tuple)))
    return st.one_of(
        children.map(SzArrayType),
        children.map(ByRefType),
        st.one_of(children, st.just(VOID), modified(st.just(VOID))).map(PointerType),
        st.builds(ArrayType, children, shapes),
        st.builds(GenericInstType, named, st.lists(children, min_size=1, max_size=4).map(tuple)),
        modified(children),
        methods(children).map(FnPtrType),
    )


types = st.recursive(
    st.one_of(primitives, named, st.builds(GenericVar, st.integers(0, 0x1FFFFFFF), st.booleans())),
    extend, max_leaves=12)


@given(types)
@settings(max_examples=400)
def test_type_round_trip(t):
    blob = enc_type(t)
    decoded = decode_type(blob)
    assert decoded == t
    assert decoded.format() == t.format()


@given(methods(types))
@settings(max_examples=300)
def test_method_round_trip(m):
    assert decode_method_sig(enc_method(m)) == m


@given(st.lists(st.one_of(types, types.map(PinnedType), types.map(ByRefType).map(PinnedType)), max_size=6))
def test_locals_round_trip(local_types):
    sig = LocalVarSig(tuple(local_types))
    assert decode_locals_sig(enc_locals(sig)) == sig


@given(st.lists(types, min_size=1, max_size=4))
def test_method_spec_round_trip(args):
    sig = MethodSpecSig(tuple(args))
    assert decode_method_spec(enc_method_spec(sig)) == sig


@given(st.integers(0, 0x1FFFFFFF))
def test_compressed_uint_round_trip(value):
    data = enc_uint(value)
    assert decode_compressed_uint(data + b"\xff") == (value, len(data))


@given(st.integers(-(1 << 28), (1 << 28) - 1))
def test_compressed_int_round_trip(value):
    data = enc_sint(value)
    assert decode_compressed_int(data + b"\xff") == (value, len(data))


# --------------------------------------------------------------- bad signatures

def bad(decode, blob: bytes) -> AssemblyError:
    with pytest.raises(AssemblyError) as info:
        decode(blob)
    assert info.value.kind == "bad-signature", info.value
    return info.value


@given(methods(types))
@settings(max_examples=200)
def test_every_truncation_is_a_bad_signature(m):
    """Signatures are a prefix-free code: a proper prefix can never decode completely."""
    blob = enc_method(m)
    for end in range(len(blob)):
        bad(decode_method_sig, blob[:end])
    assert "trailing" in bad(decode_method_sig, blob + b"\x08").reason


@given(types)
def test_every_type_truncation_is_a_bad_signature(t):
    blob = enc_type(t)
    for end in range(len(blob)):
        bad(decode_type, blob[:end])


@given(st.binary(max_size=40))
@settings(max_examples=500)
def test_garbage_decodes_or_says_bad_signature(blob):
    """Arbitrary bytes never escape as IndexError, RecursionError, ValueError ..."""
    for decode in (decode_type, decode_method_sig, decode_locals_sig, decode_field_sig,
                   decode_method_spec, decode_standalone_sig, decode_member_ref_sig, decode_property_sig):
        try:
            decode(blob)
        except AssemblyError as e:
            assert e.kind == "bad-signature"


@pytest.mark.parametrize("decode, blob, words", [
    (decode_type, "", "truncated"),
    (decode_type, "17", "bad element type 0x17"),
    (decode_type, "00", "bad element type 0x00"),
    (decode_type, "21", "bad element type 0x21"),       # ELEMENT_TYPE_INTERNAL: runtime-only
    (decode_type, "41", "bad element type 0x41"),       # SENTINEL outside a method signature
    (decode_type, "01", "VOID"),
    (decode_type, "1d01", "VOID"),
    (decode_type, "4508", "PINNED"),
    (decode_type, "1508", "GENERICINST"),
    (decode_type, "1512" + "08" + "00", "no arguments"),
    (decode_type, "1408" + "00", "rank 0"),
    (decode_type, "14080102050500", "rank 1 with 2 sizes"),
    (decode_type, "1203", "tag 3"),
    (decode_type, "1201", "null"),
    (decode_type, "12e0", "lead byte 0xE0"),
    (decode_type, "12c000", "truncated"),
    (decode_type, "1d" * 300 + "08", "nest deeper"),
    (decode_type, "0808", "trailing"),
    (decode_method_sig, "00010101", "VOID"),
    (decode_method_sig, "00020108410808", "SENTINEL"),   # not vararg
    (decode_method_sig, "0502014108410808", "SENTINEL"),  # two sentinels
    (decode_method_sig, "060008", "calling convention"),
    (decode_method_sig, "400001", "EXPLICITTHIS"),
    (decode_method_sig, "0003", "exceeds"),
    (decode_method_sig, "00ff", "lead byte 0xFF"),
    (decode_locals_sig, "0601", "not 0x07"),
    (decode_locals_sig, "0702", "exceeds"),
    (decode_field_sig, "0701", "not 0x06"),
    (decode_method_spec, "0a00", "no arguments"),
    (decode_member_ref_sig, "", "empty"),
    (decode_standalone_sig, "", "empty"),
])
def test_bad_signature(decode, blob, words):
    error = bad(decode, bytes.fromhex(blob))
    assert words in error.reason
    assert "blob" in error.reason or not blob      # the reason shows the bytes


def test_max_nesting_is_enough_and_bounded():
    deep = b"\x1d" * MAX_NESTING + b"\x08"
    assert decode_type(deep).format().endswith("[]" * MAX_NESTING)
    bad(decode_type, b"\x1d" * (MAX_NESTING + 1) + b"\x08")
