"""Opening assemblies and finding methods: names, nested types, overloads, tokens, damage.

Runs on the embedded sample (our own IL) and on real corpus assemblies; damaged files are
made from the sample by truncating or patching its bytes.
"""

from __future__ import annotations

import shutil
import time

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.cli import sample_path
from llilc_eh.errors import AssemblyError


@pytest.fixture(scope="module")
def sample() -> Assembly:
    return Assembly(sample_path())


@pytest.fixture(scope="module")
def corelib() -> Assembly:
    return Assembly(Corpus().find("System.Private.CoreLib.dll").location)


def test_find_by_name_and_token(sample):
    ref = sample.find_method("Tests.TryCatch.Program::Thrower")
    assert ref.name == "Tests.TryCatch.Program::Thrower" and ref.token >> 24 == 0x06
    assert sample.find_method(f"0x{ref.token:08X}") == ref
    assert "Thrower(string)" in ref.signature


def test_nested_type_and_overloads(corelib):
    ref = corelib.find_method("System.Collections.Generic.Dictionary`2/Enumerator::MoveNext")
    assert ref.signature.endswith("Dictionary`2/Enumerator::MoveNext()")
    with pytest.raises(AssemblyError) as e:
        corelib.find_method("System.String::Concat")
    assert e.value.kind == "ambiguous-method" and "[0] 0x06" in e.value.reason
    two = corelib.find_method("System.String::Concat(string, string)")
    assert corelib.names.method_params(two.rid) == "(string, string)"
    assert corelib.find_method("System.String::Concat", index=0).rid < two.rid


@pytest.mark.parametrize("query, kind", [
    ("Tests.TryCatch.Program::NoSuchMethod", "method-not-found"),
    ("0x02000001", "bad-query"),
    ("0x06FFFFFF", "unresolved-token"),
    ("Tests.TryCatch.Program::Thrower(int64)", "method-not-found"),
])
def test_lookup_errors(sample, query, kind):
    with pytest.raises(AssemblyError) as e:
        sample.find_method(query)
    assert e.value.kind == kind


def test_lazy_open_is_fast(corelib):
    """CoreLib opens lazily; a full dnfile load takes seconds (DESIGN.md measured 3.3 s)."""
    start = time.perf_counter()
    asm = Assembly(corelib.path)
    body = asm.body(asm.find_method("0x06000001").rid)
    assert body.code
    # The lazy loader never triggers dnfile's full-table load.
    assert not asm.pe.net.mdtables._loaded
    print(f"\nCoreLib opened and one body read in {time.perf_counter() - start:.3f} s")


def test_catch_tokens_resolve(sample):
    names = {sample.names.type_name(c.class_token)
             for rid in sample.methods_with_il() for c in sample.body(rid).clauses
             if c.class_token is not None}
    assert "[mscorlib]System.Exception" in names           # TypeRef
    assert {"Tests.CustomException.MyError", "Tests.CustomException.MyDerivedError"} <= names  # TypeDef
    assert "!!0" in names                                   # TypeSpec (generic_catch)


@pytest.mark.parametrize("keep, kind", [(200, "bad-pe"), (0.4, "not-a-clr-assembly")])
def test_truncated_file(tmp_path, keep, kind):
    """Cut in the PE headers, or inside the code (ilasm puts the metadata after it)."""
    data = sample_path().read_bytes()
    short = tmp_path / "short.dll"
    short.write_bytes(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(AssemblyError) as e:
        Assembly(short)
    assert e.value.kind == kind


def test_body_past_end_of_file(tmp_path, sample):
    """A fat header whose code size runs past the file: that method fails, the others read."""
    ref = sample.find_method("Tests.CatchAndFilter.Program::CatchFilterCatch")
    body = sample.body(ref.rid)
    assert not body.tiny
    data = bytearray(sample_path().read_bytes())
    at = sample.rva_to_offset(body.rva) + 4          # FatMethodHeader.code_size
    data[at:at + 4] = (0x7FFFFFF0).to_bytes(4, "little")
    damaged = tmp_path / "long.dll"
    damaged.write_bytes(bytes(data))
    asm = Assembly(damaged)
    with pytest.raises(AssemblyError) as e:
        asm.body(ref.rid)
    assert e.value.kind == "truncated-body" and "CatchFilterCatch" in str(e.value)
    others = [rid for rid in asm.methods_with_il() if rid != ref.rid]
    assert all(asm.body(rid).code == sample.body(rid).code for rid in others)


def test_bad_method_header(tmp_path, sample):
    ref = sample.find_method("Tests.TryCatch.Program::Thrower")
    body = sample.body(ref.rid)
    data = bytearray(sample_path().read_bytes())
    data[sample.rva_to_offset(body.rva)] = 0x01   # neither tiny (10) nor fat (11)
    bad = tmp_path / "bad.dll"
    bad.write_bytes(bytes(data))
    with pytest.raises(AssemblyError) as e:
        Assembly(bad).body(ref.rid)
    assert e.value.kind == "bad-method-header"
    assert "Tests.TryCatch.Program::Thrower" in str(e.value)


def test_not_a_clr_assembly(tmp_path):
    native = shutil.which("ls")
    with pytest.raises(AssemblyError) as e:
        Assembly(native)
    assert e.value.kind == "bad-pe"
