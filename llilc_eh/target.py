"""One place for a target's facts: what the code we generate must be for the runtime that calls it.

RyuJIT keeps every register convention of a target in one header and LLVM asks one
Subtarget object; we do the same (STYLE.md, "one place for a target's facts"). The reader,
the final image and the runtime stage ask a `Target` -- calling convention keyword, function
attributes, funclet entry thunk, whether external data go through cells, write barriers,
filter result normalisation, how value types travel -- instead of testing `if linux` here
and there. Two targets exist:

`WIN_X64` is what llilc-eh always produced: the Win64 convention of the Windows triple
(LLVM's default there), no attributes, funclets entered as LLVM's CoreCLR prologs expect
(establisher frame in RCX, exception in RDX), external data referenced directly (REL32 to
the symbol), no write barriers, value types passed by pointer to a copy. It is the default
of every view, and its IR, tables and image are byte-identical to before targets existed
(tests/target/test_win_x64_unchanged.py holds them to digests taken before).

`LINUX_X64` is code the CoreCLR 3.1 runtime on Linux can call (../shared/ALTJIT.md, ABI
section, every fact verified there in the pinned runtime):

* `x86_64_sysvcc` on every define, declare, call and invoke -- our methods, their callees,
  the CORINFO_HELP_* helpers, the outlined filters. Managed code and helpers are SysV on
  Linux; Win64 code under SysV callers is silently wrong (RSI/RDI/XMM6-15 are caller-saved
  in SysV: an O2 filter kept a value in RSI across a call and printed a wrong count). The
  triple stays Windows: funclets, .pdata/.xdata and LLVM's CLR EH table exist only there,
  and LLVM accepts the SysV convention on it. LLVM intrinsics (memcpy, localescape, ...)
  are no calls and keep the default convention.
* every defined function gets `noredzone` (on the Windows triple LLVM kept out of the red
  zone only as a side effect of its `__chkstk` probes, and a SysV-convention function may
  use it; the runtime's signal handling and funclets do not allow it) and
  `"probe-stack"="__llilc_stack_probe"`: there is no `__chkstk` in CoreCLR on Linux, and
  never `no-stack-arg-probe`, which turned the red zone on. ALTJIT.md's
  `"probe-stack"="inline-asm"` is no inline probing on the Windows triple: LLVM 22 reads the
  attribute there as the *name* of the probe routine and calls a symbol "inline-asm"
  (measured: a 20000-byte frame, and every localloc). So the probe is ours: the final image
  places a 32-byte routine after the code (`backend.relink.STACK_PROBE_CODE`, __chkstk's
  contract: size in RAX, preserved, R10/R11/flags clobbered; it reads one word per page from
  the caller's RSP down to RSP - RAX, as RyuJIT's probes do) and resolves the calls to it.
* the funclet entry thunk `mov rcx, rdi; mov rdx, rsi` (48 89 f9 48 89 f2): the runtime
  calls a funclet as `handler(establisher=RDI, exception=RSI)` and LLVM's CoreCLR funclet
  prolog reads RCX and RDX whatever the convention. The final image puts it at the start of
  every catch, filter-handler, finally and fault funclet; the range, the handler start, the
  RUNTIME_FUNCTION and the UNWIND_INFO (prolog size, code offsets: +6) start at it. Outlined
  filters are our own SysV functions `(establisher, exception)`: no thunk.
* external data through cells: every data address the runtime provides (string literal
  handles, class/method/field handles, static field addresses, unknown field offsets,
  varargs cookies, ldftn entry points) is a load from an 8-byte `external global ptr` cell
  that the final image places in its read-only data and the installer fills with the
  absolute value; nothing guarantees that a REL32 from the code reaches the runtime's
  address. Calls stay `call rel32` to their symbol (the installer gives each a reachable
  target). The filter frame constants are resolved by the final image and stay as they are.
* write barriers: every store of an object reference into memory that may be the GC heap
  calls CORINFO_HELP_CHECKED_ASSIGN_REF(dst, ref) (JIT_CheckedWriteBarrier: it tests whether
  dst is in the heap, so it is right for any address); a value type holding references is
  copied and each of its references stored again through it (CORINFO_HELP_ASSIGN_STRUCT,
  which needs the class handle, only where the layout cannot be walked). A static of a
  struct type is reached through its box (CoreCLR keeps it on the GC heap).
* no C library calls: LLVM lowers a large or variable `llvm.memcpy`/`llvm.memset` and
  `frem` to calls of memcpy/memset/fmod in the *triple's* convention (Win64), to symbols the
  runtime does not provide. Copies of a constant size use `llvm.memcpy.inline` /
  `llvm.memset.inline` (never a call); cpblk/initblk and the zeroing of localloc call
  CORINFO_HELP_MEMCPY / CORINFO_HELP_MEMSET (JIT_MemCpy, JIT_MemSet), and `rem` of F calls
  CORINFO_HELP_DBLREM (JIT_DblRem), all SysV helpers of the runtime.
* a filter returns exactly 0 or 1: the VM runs the handler only for EXCEPTION_EXECUTE_HANDLER
  (1); `endfilter`'s value is normalised (`!= 0`).
* value types by value travel as CoreCLR passes them, by the SysV classification
  (llilc_eh.reader.abi): up to 16 bytes in registers, one LLVM value per eightbyte (i64 or
  double / float / <2 x float>) when enough registers are left, else -- and above 16 bytes
  -- in memory (`byval`); results up to 16 bytes in RAX/RDX/XMM0/XMM1, larger ones through
  the return buffer after `this`, returned in RAX. What it cannot classify (explicit
  layout, a field straddling an eightbyte) and vararg methods and calls are refused with
  ReaderError kind `abi-unsupported` naming the method and the parameter (or the call's
  IL offset), so `run` declines them (RyuJIT compiles them) instead of running wrong code.
"""

from __future__ import annotations

from dataclasses import dataclass

THUNK_MOV_RCX_RDI = bytes.fromhex("4889f9")     # mov rcx, rdi  (REX.W 89 /r, modrm 11 111 001)
THUNK_MOV_RDX_RSI = bytes.fromhex("4889f2")     # mov rdx, rsi  (REX.W 89 /r, modrm 11 110 010)


@dataclass(frozen=True)
class Target:
    """Everything the stages ask about the platform the code is for (module docstring)."""

    name: str                              # "win-x64" | "linux-x64" (`translate --target`)
    calling_convention: str                # LLVM keyword on define/declare/call/invoke; "" = the triple's
    function_attributes: tuple[str, ...]   # on every defined function
    funclet_entry_thunk: bytes             # placed at the start of every handler funclet
    data_cells: bool                       # external data addresses are loaded from 8-byte cells
    write_barriers: bool                   # reference stores into the heap call the barrier helpers
    normalize_filter_result: bool          # a filter returns exactly 0 or 1
    struct_passing: str                    # "pointer" (to a copy: ours) | "sysv" (CoreCLR's, reader/abi.py)
    c_library_calls: bool                  # LLVM may call memcpy/memset/fmod (in the triple's convention)
    stack_probe: str | None                # the probe routine LLVM calls for a large or dynamic frame, when the
                                           # final image places it (None: the platform's, __chkstk)

    # -- what the reader writes ------------------------------------------------------------------

    @property
    def cc(self) -> str:
        """The convention keyword followed by a space, or "" (for `call {cc}{type} ...`)."""
        return f"{self.calling_convention} " if self.calling_convention else ""

    @property
    def define_attributes(self) -> str:
        """The attribute text after a definition's parameters ("" when none)."""
        return " ".join(self.function_attributes)

    def declare(self, text: str) -> str:
        """A `declare ...` line of a real callee (a method, a helper) in this convention."""
        if not self.calling_convention:
            return text
        assert text.startswith("declare "), text
        return f"declare {self.calling_convention} {text[len('declare '):]}"

    @property
    def thunk_size(self) -> int:
        return len(self.funclet_entry_thunk)

    def __str__(self) -> str:
        return self.name


WIN_X64 = Target(
    name="win-x64",
    calling_convention="",
    function_attributes=(),
    funclet_entry_thunk=b"",
    data_cells=False,
    write_barriers=False,
    normalize_filter_result=False,
    struct_passing="pointer",
    c_library_calls=True,
    stack_probe=None,
)

LINUX_X64 = Target(
    name="linux-x64",
    calling_convention="x86_64_sysvcc",
    function_attributes=("noredzone", '"probe-stack"="__llilc_stack_probe"', '"no-builtins"'),
    funclet_entry_thunk=THUNK_MOV_RCX_RDI + THUNK_MOV_RDX_RSI,
    data_cells=True,
    write_barriers=True,
    normalize_filter_result=True,
    struct_passing="sysv",
    c_library_calls=False,
    stack_probe="__llilc_stack_probe",
)

TARGETS = {t.name: t for t in (WIN_X64, LINUX_X64)}
DEFAULT_TARGET = WIN_X64


def target_named(name: str | Target) -> Target:
    """The target called `name` ("win-x64", "linux-x64"); a Target is returned as is."""
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(TARGETS)})") from None


__all__ = ["DEFAULT_TARGET", "LINUX_X64", "TARGETS", "Target", "WIN_X64", "target_named"]
