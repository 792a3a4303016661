"""Test programs of the reader stage built from source text in the test itself.

Several reader tests build small assemblies from C# or IL text they carry: one way to do it
(source written beside the output, the toolchain's mcs/ilasm, their failure naming the tool's
output) and one way to translate a method of such an assembly with the lint and the LLVM
verifier run over the result, so the tests differ only in what they check.
"""

from __future__ import annotations

from pathlib import Path

from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.toolchain import assemble, compile_cs
from llilc_eh.il.method import analyze
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.lint import check_module
from llilc_eh.reader.translate import Options, translate


def mcs(out: Path, source: str, *flags: str) -> Path:
    """C# text compiled by mcs into out (its .cs written beside it); flags as mcs takes them."""
    src = out.with_suffix(".cs")
    src.write_text(source)
    return compile_cs(src, out, *flags)


def mcs_library(out: Path, source: str, *flags: str) -> Path:
    """C# text compiled by mcs into the library out."""
    return mcs(out, source, "-target:library", *flags)


def il_library(folder: Path, name: str, source: str) -> Assembly:
    """IL text assembled by ilasm into folder/name.dll, loaded."""
    path = folder / f"{name}.il"
    path.write_text(source)
    return Assembly(assemble(path, folder, dll=True))


def translate_checked(asm: Assembly, name: str, target):
    """C::name translated for target; the module passes our lint and LLVM's verifier."""
    rid = asm.find_method(f"C::{name}").rid
    result = translate(asm, analyze(asm.body(rid)), JitEE(asm), Options(target=target))
    check_module(result.module, method=name)
    return result
