"""Assembly resolution on real-world layouts (issue 12, item 6), with mcs-built assemblies.

* A GAC-style layout: two strong-named assemblies that reference each other (GacA <-> GacB,
  built in three steps) live in `gac/NAME/VERSION__TOKEN/NAME.dll`, and a library folder
  holds symlinks to them, as Mono and .NET Framework installations do. Every EH method of
  both, named through the library folder, goes through the whole pipeline clean. Controls:
  the same file named by its GAC path finds nothing beside it (so "beside" really is the
  folder named), and finds its partner with `references=[gac]`; a partner of an older
  version or without the strong name is refused, and the message says why.
* A Mono assembly (mscorlib 4.0, b77a5c561934e089) using types .NET Core 3.1's mscorlib
  facade does not forward (System.ReadOnlyMemory`1) and an assembly .NET Core does not ship
  (System.Windows.Forms) binds in the machine's Mono; control: bound in .NET Core alone, as
  before, the same methods fail with unresolved-type.
* A missing reference is `reader/unresolved-type` naming the identity and every place tried.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.resolve import (
    Identity, assembly_identity, key_token, mismatch, mono_framework, reference_identity,
)
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.errors import ReaderError
from llilc_eh.pipeline import Pipeline, eh_methods
from llilc_eh.reader.jitee import JitEE

from reader_builds import mcs_library

FRAMEWORK = Corpus().framework_dir
ECMA_KEY = bytes.fromhex("00000000000000000400000000000000")

A_CS = """
[assembly: System.Reflection.AssemblyVersion("VERSION")]
namespace GacA {
  public class AError : System.Exception { public int Code; public long Extra; public AError(int c) { Code = c; } }
  public struct Cell { public int Value; public string Label; }
  public class Worker {
    public int Count; public Cell Last; public static int Total;
    public static int Divide(int a, int b) { try { return a / b; } catch (System.DivideByZeroException) { Total++; return 0; } }
    public int Guarded(int x) {
      try { if (x < 0) throw new AError(x); Count += x; Last.Value = x; return Count; }
      catch (AError e) { return e.Code; } finally { Total++; } }
#if WITH_B
    public static int ViaB(GacB.User u) {
      try { return u.Use(new Worker()); } catch (GacB.BError e) { return e.Code + e.Depth; } }
#endif
  }
}
"""

B_CS = """
[assembly: System.Reflection.AssemblyVersion("2.0.0.0")]
namespace GacB {
  public class BError : GacA.AError { public int Depth; public BError(int c, int d) : base(c) { Depth = d; } }
  public class User {
    public GacA.Cell Seen;
    public int Use(GacA.Worker w) {
      try { Seen = w.Last; return w.Guarded(Seen.Value) + w.Count; }
      catch (GacA.AError e) { throw new BError(e.Code, 1); } finally { GacA.Worker.Total--; } }
    public static int Both(int x) {
      try { return GacA.Worker.Divide(10, x); } catch (BError b) { return b.Depth; }
      catch (GacA.AError a) when (a.Code > 0) { return a.Code; } }
  }
}
"""

MONO_CS = """
using System;
namespace MonoOnly {
  public class Program {
    public static int MemoryLength(byte[] data) {
      try { ReadOnlyMemory<byte> m = new ReadOnlyMemory<byte>(data); return m.Length; }
      catch (ArgumentException) { return -1; } }
    public static string Dialog(int x) {
      try { System.Windows.Forms.DialogResult r = (System.Windows.Forms.DialogResult)x; return r.ToString(); }
      catch (InvalidCastException) { return "?"; } }
    public static int Plain(int x) { try { return 10 / x; } catch (DivideByZeroException) { return 0; } }
  }
}
"""

LIB_CS = "namespace Lib { public class Thing { public int X; } public struct Pair { public int A; } }"
APP_CS = """
namespace App {
  public class Program {
    public static int UsesLib(Lib.Thing t) { try { return t.X; } catch (System.Exception) { return 1; } }
    public static int Catches() { try { return 0; } catch (System.Exception) { return 2; } }
    public static int UsesPair() { Lib.Pair p = default(Lib.Pair); try { p.A = 1; return p.A; } catch (System.Exception) { return 3; } }
  }
}
"""


def _into_gac(gac: Path, dll: Path) -> Path:
    """Install like Mono's gacutil: gac/NAME/VERSION__TOKEN/NAME.dll."""
    ident = assembly_identity(Assembly(dll))
    folder = gac / ident.name / f"{'.'.join(map(str, ident.version))}__{ident.token.hex()}"
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(dll, folder / dll.name))


@pytest.fixture(scope="module")
def gac_layout(tmp_path_factory):
    """(lib folder of symlinks, gac root, build folder): GacA <-> GacB, strong-named."""
    root = tmp_path_factory.mktemp("gaclayout")
    build = root / "build"
    build.mkdir()
    subprocess.run(["sn", "-k", str(build / "key.snk")], check=True, capture_output=True, timeout=60)
    key = f"-keyfile:{build / 'key.snk'}"
    a_source = A_CS.replace("VERSION", "1.2.0.0")
    (build / "first").mkdir()
    a1 = mcs_library(build / "first" / "GacA.dll", a_source, key)                      # GacA without GacB
    b = mcs_library(build / "GacB.dll", B_CS, key, f"-r:{a1}")                         # GacB -> GacA
    a2 = mcs_library(build / "GacA.dll", a_source, key, "-define:WITH_B", f"-r:{b}")   # GacA -> GacB
    gac, lib = root / "gac", root / "lib"
    lib.mkdir()
    for dll in (a2, b):
        target = _into_gac(gac, dll)
        os.symlink(os.path.relpath(target, lib), lib / dll.name)
    return lib, gac, build


def _translate_all(path: Path, **jitee_args) -> tuple[JitEE, list]:
    asm = Assembly(path)
    with CodegenPool(1) as pool:
        pipeline = Pipeline(asm, pool, opt=2)
        pipeline._ee = JitEE(asm, **jitee_args)
        runs = pipeline.run_many(eh_methods(asm))
    return pipeline.ee, runs


def _failures(runs) -> list[str]:
    return [f"{r.name}: {r.error}" if r.error else f"{r.name}: findings {r.findings} {r.image_findings}"
            for r in runs if not r.ok]


# ------------------------------------------------------------------------------------ identity

def test_identities():
    assert key_token(ECMA_KEY).hex() == "b77a5c561934e089"
    facade = assembly_identity(Assembly(FRAMEWORK / "mscorlib.dll"))
    assert (facade.name, facade.version, facade.token.hex()) == ("mscorlib", (4, 0, 0, 0), "b77a5c561934e089")
    net_http = Assembly(FRAMEWORK / "System.Net.Http.dll")
    refs = {r.name: r for r in (reference_identity(net_http.names, 0x23000000 | i)
                                for i in range(1, net_http.names.row_count(0x23) + 1))}
    assert str(refs["System.Runtime"]) == \
        "System.Runtime, Version=4.2.2.0, Culture=neutral, PublicKeyToken=b03f5f7f11d50a3a"
    runtime = assembly_identity(Assembly(FRAMEWORK / "System.Runtime.dll"))
    assert mismatch(refs["System.Runtime"], runtime) is None
    # A version older than the one referenced, another key, another culture: each refused, with why.
    ref = Identity("X", (2, 0, 0, 0), "", bytes(8))
    assert "older than the 2.0.0.0 referenced" in mismatch(ref, Identity("X", (1, 9, 0, 0), "", bytes(8)))
    assert "public key token null" in mismatch(ref, Identity("X", (2, 0, 0, 0)))
    assert "culture de" in mismatch(ref, Identity("X", (2, 0, 0, 0), "de", bytes(8)))
    assert mismatch(ref, Identity("x", (4, 0, 0, 0), "", bytes(8))) is None      # newer binds
    assert mismatch(Identity("X", (9, 0, 0, 0), "", b"\1" * 8, retargetable=True), Identity("X")) is None


# ------------------------------------------------------------------------------------ GAC layout

@pytest.mark.parametrize("name", ["GacA.dll", "GacB.dll"])
def test_gac_symlink_layout_translates_clean(gac_layout, name):
    lib, gac, _ = gac_layout
    path = lib / name
    partner = "GacB.dll" if name == "GacA.dll" else "GacA.dll"
    assert path.is_symlink() and not (Path(os.path.realpath(path)).parent / partner).exists()
    ee, runs = _translate_all(path)
    assert len(runs) == {"GacA.dll": 3, "GacB.dll": 2}[name]
    assert _failures(runs) == []
    for run in runs:     # every field laid out across the two assemblies: no offset left to the linker
        assert "fieldoffset:" not in str(run.reader.module), run.name
    assert ee.framework[0].name == "netcore" and "holds every type" in ee.framework[1]
    assert lib in ee.search_path and gac not in ee.search_path


def test_gac_file_named_directly(gac_layout):
    """Control: named by its GAC path, GacB has nothing beside it; `references=[gac]` finds
    GacA in the GAC layout."""
    lib, gac, _ = gac_layout
    real = Path(os.path.realpath(lib / "GacB.dll"))
    ee = JitEE(Assembly(real))
    with pytest.raises(ReaderError) as e:
        _typeref(ee, "GacA.AError")
    assert e.value.kind == "unresolved-type"
    assert "GacA, Version=1.2.0.0" in e.value.reason and str(real.parent) in e.value.reason
    ee, runs = _translate_all(real, references=[gac])
    assert len(runs) == 2 and _failures(runs) == []
    assert gac in ee.search_path
    # .NET Framework 4's GAC_MSIL spelling of the version folder, v4.0_VERSION__TOKEN.
    msil = gac.parent / "GAC_MSIL"
    a = Path(os.path.realpath(lib / "GacA.dll"))
    (msil / "GacA" / ("v4.0_" + a.parent.name)).mkdir(parents=True, exist_ok=True)
    shutil.copy(a, msil / "GacA" / ("v4.0_" + a.parent.name) / "GacA.dll")
    ee = JitEE(Assembly(real), references=[msil])
    assert ee.layout(_typeref(ee, "GacA.Cell")).size == 16


def test_identity_mismatch_is_refused(gac_layout, tmp_path):
    """A GacA beside GacB that is older, or not strong-named, does not stand for the GacA
    1.2.0.0 GacB references; the error names the file and why."""
    lib, gac, build = gac_layout
    key = f"-keyfile:{build / 'key.snk'}"
    variants = {"older": (A_CS.replace("VERSION", "1.0.0.0"), (key,), "version 1.0.0.0, older than the 1.2.0.0 referenced"),
                "unsigned": (A_CS.replace("VERSION", "1.2.0.0"), (), "public key token null, not ")}
    for what, (source, flags, why) in variants.items():
        folder = tmp_path / what
        folder.mkdir()
        mcs_library(folder / "GacA.dll", source, *flags)
        os.symlink(os.path.realpath(lib / "GacB.dll"), folder / "GacB.dll")
        ee = JitEE(Assembly(folder / "GacB.dll"))
        with pytest.raises(ReaderError) as e:
            _typeref(ee, "GacA.AError")
        assert e.value.kind == "unresolved-type"
        assert f"{folder / 'GacA.dll'}: {why}" in e.value.reason, e.value.reason


def _typeref(ee: JitEE, full: str):
    """The type a TypeRef of the compiled assembly names (resolving it)."""
    names = ee.asm.names
    for rid in range(1, names.row_count(0x01) + 1):
        token = 0x01000000 | rid
        if names.type_name(token).endswith("]" + full):
            return ee.token_type(token)
    raise AssertionError(f"no TypeRef {full}")


# ------------------------------------------------------------------------------------ frameworks

@pytest.fixture(scope="module")
def mono_only(tmp_path_factory):
    out = tmp_path_factory.mktemp("mono") / "MonoOnly.dll"
    return mcs_library(out, MONO_CS, "-r:System.Windows.Forms.dll")


def test_mono_types_bind_in_mono(mono_only):
    assert mono_framework() is not None, "mono-devel is installed by the test command"
    ee, runs = _translate_all(mono_only)
    framework, why = ee.framework
    assert framework.name == "mono", why
    assert ".NET Core 3.1.23 lacks [mscorlib]System.ReadOnlyMemory`1" in why
    assert "[System.Windows.Forms]System.Windows.Forms.DialogResult" in why
    assert len(runs) == 3 and _failures(runs) == []
    memory = next(r for r in runs if r.name.endswith("MemoryLength"))
    local = ee.local_types(memory.il.body)[0]
    assert ee.size_and_align(local) == (16, 8)         # object _object; int _index; int _length


@pytest.mark.parametrize("how", [{"search_path": [FRAMEWORK]}, {"framework": "netcore"}], ids=["folder", "named"])
def test_mono_types_in_netcore_alone_fail(mono_only, how):
    """Control: bound in .NET Core 3.1 alone (the old behaviour; what a caller running the
    code in CoreCLR asks for) they are unresolved."""
    ee, runs = _translate_all(mono_only, **how)
    failed = {r.name.split("::")[-1]: r.error for r in runs if r.error is not None}
    assert set(failed) == {"MemoryLength", "Dialog"}
    assert all(e.kind == "unresolved-type" for e in failed.values())
    assert "System.ReadOnlyMemory`1" in failed["MemoryLength"].reason
    assert "assembly System.Windows.Forms, Version=4.0.0.0" in failed["Dialog"].reason


MIXED_IL = """
.assembly extern mscorlib { .publickeytoken = (B7 7A 5C 56 19 34 E0 89) .ver 4:0:0:0 }
.assembly extern netstandard { .publickeytoken = (CC 7B 13 FF CD 2D DD 51) .ver 2:0:0:0 }
.assembly extern System.Windows.Forms { .publickeytoken = (B7 7A 5C 56 19 34 E0 89) .ver 4:0:0:0 }
.assembly Mixed { .ver 1:0:0:0 }
.class public auto ansi beforefieldinit Mixed.Program extends [mscorlib]System.Object {
  .method public static int32 Run(int32 x) cil managed {
    .maxstack 2
    .locals init (valuetype [System.Windows.Forms]System.Windows.Forms.DialogResult r, int32 v)
    .try {
      ldarg.0
      stloc.0
      ldloc.0
      box [System.Windows.Forms]System.Windows.Forms.DialogResult
      callvirt instance string [netstandard]System.Object::ToString()
      callvirt instance int32 [netstandard]System.String::get_Length()
      stloc.1
      leave.s done
    } catch [netstandard]System.Exception {
      pop
      ldc.i4.m1
      stloc.1
      leave.s done
    }
  done:
    ldloc.1
    ret
  }
}
"""


def test_framework_assembly_using_netstandard(tmp_path):
    """A .NET Framework assembly that also references netstandard (as one using .NET Standard
    libraries does) and uses System.Windows.Forms is still a .NET Framework assembly: it binds
    in Mono, netstandard through Mono's facade. (Sent to .NET Core for its netstandard
    reference, its DialogResult local was unresolved-type.)"""
    from llilc_eh.check.toolchain import assemble
    source = tmp_path / "Mixed.il"
    source.write_text(MIXED_IL)
    asm = Assembly(assemble(source, tmp_path, dll=True))
    pipeline = Pipeline(asm, None)
    framework, why = pipeline.ee.framework
    assert framework.name == "mono", why
    runs = [pipeline.front(rid) for rid in eh_methods(asm)]
    assert len(runs) == 1 and runs[0].error is None, runs[0].error
    assert pipeline.ee.size_and_align(pipeline.ee.local_types(runs[0].il.body)[0]) == (4, 4)


def test_packaged_mono_application(tmp_path):
    """A real application folder holding only its own file -- Mono's ilasm.exe, copied alone --
    binds its references (PEAPI, Mono.Security: in Mono's GAC only) with no options. Before,
    16 of its 75 EH methods were unresolved-type against .NET Core."""
    app = tmp_path / "ilasm"
    app.mkdir()
    shutil.copy(Path(mono_framework().places[1].folder) / "ilasm.exe", app / "ilasm.exe")
    asm = Assembly(app / "ilasm.exe")
    pipeline = Pipeline(asm, None)
    framework, why = pipeline.ee.framework
    assert framework.name == "mono" and ".NET Core 3.1.23 lacks [PEAPI]PEAPI." in why, why
    runs = [pipeline.front(rid) for rid in eh_methods(asm)]
    assert len(runs) == 75 and [str(r.error) for r in runs if r.error] == []


def test_framework_not_installed():
    with pytest.raises(ReaderError) as e:
        JitEE(Assembly(FRAMEWORK / "mscorlib.dll"), framework="dotnet-framework-4.8")
    assert e.value.kind == "no-framework" and "netcore" in e.value.reason


def test_missing_reference_names_every_place(tmp_path):
    build, app, refs = tmp_path / "build", tmp_path / "app", tmp_path / "refs"
    for d in (build, app, refs):
        d.mkdir()
    lib = mcs_library(build / "Lib.dll", LIB_CS)
    mcs_library(app / "App.dll", APP_CS, f"-r:{lib}")            # Lib.dll stays behind in build/
    ee = JitEE(Assembly(app / "App.dll"), references=[refs])
    with pytest.raises(ReaderError) as e:
        _typeref(ee, "Lib.Thing")
    reason = e.value.reason
    assert e.value.kind == "unresolved-type" and e.value.stage == "reader"
    assert "assembly Lib, Version=0.0.0.0, Culture=neutral, PublicKeyToken=null" in reason
    framework, _ = ee.framework
    for place in (app, refs, *(p.folder for p in framework.places)):
        assert f"({place})" in reason, (place, reason)
    assert f"framework {framework}:" in reason
    # Translated, the method that needs Lib's struct (its size) fails with that reason; the one
    # that reads a field of Lib's class leaves the offset to an external symbol; the last needs
    # nothing of Lib.
    with CodegenPool(1) as pool:
        runs = Pipeline(Assembly(app / "App.dll"), pool, references=[refs]).run_many(
            eh_methods(Assembly(app / "App.dll")))
    outcome = {r.name.split("::")[-1]: r.error for r in runs}
    assert outcome["Catches"] is None and outcome["UsesLib"] is None
    assert outcome["UsesPair"].kind == "unresolved-type" and str(refs) in outcome["UsesPair"].reason
    # Found in another spelling: runtimes match simple names ignoring case, Linux files do not.
    shutil.copy(lib, app / "LIB.DLL")
    again = JitEE(Assembly(app / "App.dll"), references=[refs])
    assert again.layout(_typeref(again, "Lib.Pair")).size == 4


# ------------------------------------------------------------------------------------ command line

def test_reference_option(gac_layout, capsys, tmp_path):
    """`--reference DIR` on translate and validate (also in validate's worker processes); a
    folder that is not one is a usage error (exit 1) of every subcommand."""
    from llilc_eh import cli
    lib, gac, _ = gac_layout
    real = str(Path(os.path.realpath(lib / "GacB.dll")))
    ir = ["translate", real, "--method", "GacB.User::Use", "--stage", "ir"]
    assert cli.main(ir + ["--reference", str(gac)]) == 0
    assert cli.main(ir) not in (0, 1)               # ran, and the method failed
    assert "[reader/unresolved-type]" in capsys.readouterr().err
    report = tmp_path / "report.json"
    assert cli.main(["validate", real, "--translate", "-q", "--jobs", "2", "--json", str(report),
                     "--reference", str(tmp_path), "--reference", str(gac)]) == 0
    assert '"translated": 2' in report.read_text()
    for command in (["il", real], ["translate", real], ["validate", real], ["r2r", real]):
        assert cli.main(command + ["--reference", str(tmp_path / "nowhere")]) == 1, command
        assert "--reference" in capsys.readouterr().err
