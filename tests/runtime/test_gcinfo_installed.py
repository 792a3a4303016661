"""The GC info llilc-eh installs, decoded as the runtime reads it (issue 13 item 5).

One run of tests/runtime/programs/returns.cs (every method with EH compiled by llilc-eh) and,
for every method installed, its GC info bytes (as handed to allocGCInfo) through
llilc_eh.gcinfo.decode:
  - code length == the code size reported to the runtime (main body + funclets + thunks +
    probe; read-only data and call stubs excluded);
  - PSPSym offset == the frame's PSPSym slot the image found (filter constants), and
    WantsReportOnlyLeaf, for every method with funclets;
  - the stack base register == the frame register of the main body's unwind info;
  - the return kind == what the method's C# signature returns, written out here by hand
    (not derived from our own classification): an object OBJECT, a struct whose first
    eightbyte holds a reference OBJECT, (int, ref) SCALAR_OBJ, (ref, ref) OBJ_OBJ, a struct
    returned through the buffer or a scalar SCALAR -- as RyuJIT's GCInfo::getReturnKind.
The output must still equal RyuJIT's (a GC.Collect runs between the calls).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr
from llilc_eh.gcinfo import ReturnKind, decode

PROGRAM = Path(__file__).resolve().parent / "programs" / "returns.cs"
EXPECTED_KIND = {
    "Returns::Main": ReturnKind.SCALAR,          # int
    "Returns::Scalar": ReturnKind.SCALAR,        # int
    "Returns::Text": ReturnKind.OBJECT,          # string
    "Returns::Boxed": ReturnKind.OBJECT,         # object
    "Returns::MakeRefInt": ReturnKind.OBJECT,    # {string; int}: RAX ref, RDX int
    "Returns::MakeIntRef": ReturnKind.SCALAR_OBJ,   # {long; OneRef} (CoreCLR puts the embedded struct last)
    "Returns::MakeRefRef": ReturnKind.OBJ_OBJ,   # {string; object}
    "Returns::MakeOneRef": ReturnKind.OBJECT,    # {string}: one eightbyte
    "Returns::MakeBig": ReturnKind.SCALAR,       # 24 bytes: the return buffer
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory, run_captured):
    exe = compile_cs(PROGRAM, tmp_path_factory.mktemp("gcinfo") / "returns.exe")
    return exe, run_captured(exe, opt=2)


def test_every_method_of_the_program_installed(installed):
    exe, out = installed
    oracle = run_on_coreclr(exe)
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode)
    assert out.report["declined"] == []
    assert {c["method"] for c in out.report["compiled"]} == set(EXPECTED_KIND)


def test_installed_gc_info_decodes_to_the_installed_method(installed):
    _, out = installed
    for c in out.report["compiled"]:
        info = decode(bytes.fromhex(c["gc_info"]))
        where = c["method"]
        assert info.code_length == c["code_bytes"], where
        assert c["funclets"] > 0 and c["psp_slot"] is not None, where    # every one has a handler
        assert info.psp_sym_offset == c["psp_slot"], where
        assert info.wants_report_only_leaf, where
        assert info.stack_base_register == c["frame_register"], where
        assert info.return_kind == EXPECTED_KIND[where], (where, ReturnKind(info.return_kind).name)
        assert c["return_kind"] == EXPECTED_KIND[where].name, where
    # the kinds are not all one value: the check can see a wrong one
    assert len({c["return_kind"] for c in out.report["compiled"]}) >= 4
