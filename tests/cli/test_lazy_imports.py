"""The command line's parser loads no LLVM and no capstone (`llilc-eh --help` stays quick:
the pipeline's modules are imported by `cli.main` once a command runs), and a Ctrl-C while
those modules load is an interruption (status 130, one line), not a traceback.

Each check runs in a fresh interpreter: this process has imported everything already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("llvmlite", "capstone", "llilc_eh.backend", "llilc_eh.batch", "dnfile")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def _loaded_after(code: str) -> list[str]:
    proc = _python(code + "\nimport sys\nprint(' '.join(m for m in %r if m in sys.modules))" % (HEAVY,))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_parser_loads_no_llvm_or_capstone():
    assert _loaded_after("import llilc_eh.cli as c\nc.build_parser()") == []


def test_help_loads_no_llvm_or_capstone():
    code = ("import contextlib, io, llilc_eh.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert c.main(['--help']) == 0\n"
            "    assert c.main(['validate', '--help']) == 0")
    assert _loaded_after(code) == []


def test_a_command_does_load_them():
    """Negative control: the probe sees the modules when a command has run."""
    code = ("import contextlib, io, llilc_eh.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.main(['translate', '--stage', 'clauses'])")
    loaded = _loaded_after(code)
    assert {"llvmlite", "capstone", "llilc_eh.batch"} <= set(loaded)


# A Ctrl-C arriving while a module loads: an import hook raises KeyboardInterrupt when
# `llilc_eh.batch` is looked up (the first of the pipeline's modules main imports).
_INTERRUPT_ON_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "llilc_eh.batch":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
"""


def test_interrupt_while_importing_is_status_130_without_traceback():
    proc = _python(_INTERRUPT_ON_IMPORT + "import llilc_eh.cli as c\nsys.exit(c.main(['il']))")
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "llilc-eh: interrupted"


def test_interrupt_hook_control():
    """Negative control: the same hook outside main's handling is a traceback, so the test
    above would see one."""
    proc = _python(_INTERRUPT_ON_IMPORT + "import llilc_eh.batch")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "KeyboardInterrupt" in proc.stderr
