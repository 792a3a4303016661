"""The compile service: what runs behind the C alt JIT's `compileMethod`, inside dotnet.

One call per method the runtime offers us (altjit.c already declined the methods without EH
unless a selection by name is on). The service
  1. identifies the method: its module's assembly name and MethodDef token, asked of the
     runtime (getMethodModule, getModuleAssembly, getAssemblyName, getMethodDefFromMethod);
     IL stubs (CORJIT_FLAG_IL_STUB via getJitFlags), dynamic methods (no MethodDef) and modules
     with no file in the program's or the framework's folder are declined;
  2. decides whether it is selected: by default every method with EH of the program's own
     assembly; with `--methods GLOB` every method whose `Ns.Type::Name` matches;
  3. runs our Pipeline on (file, token) for the linux-x64 target in this process, with LLVM
     in a worker process (the CodegenPool spawns `sys.executable`, which the alt JIT set to the
     venv's python when it started the interpreter);
  4. installs the result through ICorJitInfo (llilc_eh.runtime.install) and returns CORJIT_OK,
     or records a decline with the reason and returns CORJIT_SKIPPED (RyuJIT compiles it).

Nothing escapes: every exception, LLVM aborts included (they kill a worker, not us), becomes a
decline. Every selected method ends up as one event line in the events file (JSON lines,
appended and flushed one by one, so a crash of the program loses nothing already decided);
`llilc-eh run` turns the events into the report and the summary.

Compiles are serialised by one re-entrant lock: the pipeline's caches are not thread-safe,
and the runtime may call compileMethod from several threads (the GIL alone is released while
we wait for the LLVM worker).
"""

from __future__ import annotations

import fnmatch
import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .jitinfo import JitInfo
from .structs import (
    CORINFO_FLG_INTRINSIC,
    CORINFO_FLG_JIT_INTRINSIC,
    CORINFO_FLG_SHAREDINST,
    CORINFO_FLG_SYNCH,
    CORINFO_GENERICS_CTXT_MASK,
    CORINFO_METHOD_INFO,
    CORJIT_FLAG_CALL_GETJITFLAGS,
    CORJIT_FLAG_IL_STUB,
    CORJIT_OK,
    CORJIT_SKIPPED,
)

CONFIG_ENV = "LLILC_EH_RUN_CONFIG"
RUN_FRAMEWORK = "netcore"     # the framework the JIT-EE binds references in, inside CoreCLR
JITEE_CHOICES = ("runtime", "metadata")


@dataclass
class RunConfig:
    """What `llilc-eh run` asks for (written by the driver as JSON, named by CONFIG_ENV)."""

    program: str                       # the program's path
    assembly: str                      # its assembly name (the default selection)
    search_dirs: list[str]             # where assembly files are looked up, in order
    events: str                        # the events file (JSON lines)
    methods: list[str] = field(default_factory=list)    # globs on Ns.Type::Name
    opt: int = 2
    clone_finally: bool = False
    damage: str | None = None          # a negative control (see install.DAMAGES), tests only
    compare_jitee: bool = False        # ask the runtime what the metadata JIT-EE answered (compare.py)
    all_eh: bool = False               # --all-eh: every method with EH of any assembly (R2R off)
    limit: int | None = None           # bisection: compile only the first N selected methods
    only: list[str] = field(default_factory=list)   # bisection: compile only these names (exact)
    jitee: str = "runtime"             # who answers the reader's layout questions: runtime | metadata (ee.py)

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunConfig:
        return cls(**json.loads(Path(path).read_text()))

    def dump(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.__dict__, indent=1, sort_keys=True) + "\n")


class Declined(Exception):
    """This method is left to RyuJIT, for the reason given (`method`: its name, when the
    raiser knows it better than the caller)."""

    def __init__(self, reason: str, method: str | None = None):
        super().__init__(reason)
        self.method = method


class NotSelected(Exception):
    """Not a method of the selection: skipped without a record."""


class Service:
    def __init__(self, config: RunConfig, trampoline: int | None):
        self.config = config
        self.trampoline = trampoline
        self.lock = threading.RLock()
        self._events_lock = threading.Lock()
        self._assemblies: dict[str, object] = {}     # file -> Assembly
        self._pipelines: dict[str, object] = {}      # file -> Pipeline (linux-x64, the run's options)
        self._pool = None
        self._files: dict[str, Path | None] = {}

    # -- events -----------------------------------------------------------------------------

    def record(self, event: dict) -> None:
        line = json.dumps(event, sort_keys=True) + "\n"
        with self._events_lock, open(self.config.events, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()

    # -- one method -------------------------------------------------------------------------

    def compile(self, comp: int, info_ptr: int, flags: int, entry_ptr: int, size_ptr: int) -> int:
        started = time.perf_counter()
        jit = JitInfo(comp, self.trampoline)
        info = CORINFO_METHOD_INFO.from_address(info_ptr)
        name = None
        try:
            with self.lock:
                name, asm_name, token = self._identify(jit, info, flags)
                from .install import compile_and_install
                result = compile_and_install(self, jit, info, asm_name, token, name, entry_ptr, size_ptr)
        except NotSelected:
            return CORJIT_SKIPPED
        except Declined as e:
            name = name or e.method
            self.record({"event": "declined", "method": name or self._runtime_name(jit, info),
                         "reason": str(e), **_instantiation(jit)})
            return CORJIT_SKIPPED
        except BaseException as e:     # noqa: BLE001 -- anything at all is one method's decline
            reason = f"internal error: {type(e).__name__}: {e}"
            self.record({"event": "declined", "method": name or self._runtime_name(jit, info),
                         "reason": reason, "traceback": traceback.format_exc(limit=8), **_instantiation(jit)})
            return CORJIT_SKIPPED
        result["jit_ms"] = round((time.perf_counter() - started) * 1000, 3)
        # why it was ours: its IL clauses, and/or the JIT's own monitor clause (synchronized)
        result["il_clauses"] = info.EHcount
        result["synchronized"] = self._synchronized(jit, info)
        self.record({"event": "compiled", **result})
        return CORJIT_OK

    @staticmethod
    def _runtime_name(jit: JitInfo, info) -> str:
        try:
            cls, meth = jit.method_name(info.ftn)
            return f"{cls}::{meth}"
        except Exception:   # noqa: BLE001 -- a name for a message only
            return f"<method handle 0x{info.ftn or 0:x}>"

    def _identify(self, jit: JitInfo, info, flags: int) -> tuple[str, str, int]:
        """(Ns.Type::Name, assembly name, MethodDef token) of a selected method; NotSelected or
        Declined otherwise. The selection is decided first, on the best name there is (the
        metadata's `Ns.Type::Name` when the method has a file, else the runtime's), so that a
        method the selection names is declined with its reason, never skipped in silence."""
        assembly = jit.assembly_name(jit.module_assembly(jit.method_module(info.ftn)))
        globs = self.config.methods
        # a synchronized method has EH without IL clauses: the JIT's own monitor clause
        # (clauses/synchronized.py) -- selected as a method with EH, by default and by --all-eh
        has_eh = info.EHcount > 0 or self._synchronized(jit, info)
        if not globs and (not has_eh or (assembly != self.config.assembly and not self.config.all_eh)):
            raise NotSelected
        if flags == CORJIT_FLAG_CALL_GETJITFLAGS:
            flags = jit.jit_flags()
        runtime_name = self._runtime_name(jit, info)
        il_stub = bool(flags & (1 << CORJIT_FLAG_IL_STUB))
        token = jit.method_def(info.ftn)
        has_token = token >> 24 == 0x06 and token & 0xFFFFFF != 0
        path = self.file_of(assembly) if has_token and not il_stub else None
        name = self.assembly(path).method(token & 0xFFFFFF).name if path is not None else runtime_name
        if globs and not any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(runtime_name, g) for g in globs):
            exact = self._instantiation_name(jit, info, path, token, name)
            if exact is None or not any(fnmatch.fnmatchcase(exact, g) for g in globs):
                raise NotSelected
        self._bisection(name)
        if il_stub:
            raise Declined("IL stub (no IL of its own in a file)", name)
        if not has_token:
            raise Declined("dynamic method (no MethodDef token)", name)
        if path is None:
            raise Declined(f"assembly {assembly!r} has no file in " + ", ".join(self.config.search_dirs), name)
        attribs = jit.method_attribs(info.ftn)
        if attribs & (CORINFO_FLG_INTRINSIC | CORINFO_FLG_JIT_INTRINSIC):
            # RyuJIT expands these; their IL is a fallback that may call itself
            # (Sse41.get_IsSupported returns Sse41.IsSupported: compiled as IL, it never returns)
            raise Declined("JIT intrinsic (RyuJIT expands it; its IL may call itself)", name)
        if attribs & CORINFO_FLG_SHAREDINST and not info.options & CORINFO_GENERICS_CTXT_MASK:
            # shared code goes on with its generic context (a hidden MethodDesc or MethodTable,
            # or `this`: runtime/generic.py); code shared without one is not ours to make
            raise Declined("code shared between generic instantiations", name)
        return name, assembly, token

    @staticmethod
    def _synchronized(jit: JitInfo, info) -> bool:
        """CORINFO_FLG_SYNCH: the JIT wraps the body in a monitor enter/exit and a fault clause
        of its own, so the method has EH even when its IL has no clause."""
        return bool(jit.method_attribs(info.ftn) & CORINFO_FLG_SYNCH)

    def _instantiation_name(self, jit: JitInfo, info, path, token: int, name: str) -> str | None:
        """`Pair`1<int32>::Pick` when the method is an exact generic instantiation (so that
        --methods can select one instantiation), else None."""
        if path is None or token >> 24 != 0x06:
            return None
        from .instantiation import exact_instantiation
        try:
            inst = exact_instantiation(jit, info, self.assembly(path), token & 0xFFFFFF)
        except Declined:      # shared code, or an instantiation that cannot be named
            return None
        return inst.name(name) if inst is not None else None

    def _bisection(self, name: str) -> None:
        """The bisection knobs (--limit N, --only NAME): a selected method past the first N, or
        not named, is declined as such -- still reported, so a bisected run says what it left out.
        They exist to find which compiled method breaks a run (a crash far from its cause)."""
        if self.config.only and name not in self.config.only:
            raise Declined("left out by --only (bisection)", name)
        if self.config.limit is not None:
            self._selected = getattr(self, "_selected", 0) + 1
            if self._selected > self.config.limit:
                raise Declined(f"left out by --limit {self.config.limit} (bisection)", name)

    # -- resources shared across methods ----------------------------------------------------

    def file_of(self, assembly: str) -> Path | None:
        if assembly not in self._files:
            found = None
            for d in self.config.search_dirs:
                for ext in (".dll", ".exe"):
                    p = Path(d) / (assembly + ext)
                    if p.is_file():
                        found = p
                        break
                if found:
                    break
            self._files[assembly] = found
        return self._files[assembly]

    def assembly(self, path: Path):
        from ..assembly.loader import Assembly
        key = str(path)
        if key not in self._assemblies:
            self._assemblies[key] = Assembly(path)
        return self._assemblies[key]

    def pipeline(self, assembly: str, generic_context: bool = False):
        """The Pipeline over an assembly's file: linux-x64, the run's --opt and --clone-finally,
        no LLVM differential (nothing to compare against inside the runtime). `generic_context`:
        the one for shared generic methods (Options.generic_context: the hidden argument)."""
        path = self.file_of(assembly)
        key = (str(path), generic_context)
        if key not in self._pipelines:
            from ..pipeline import Pipeline
            from ..reader.translate import Options
            from ..target import LINUX_X64
            options = Options(clone_finally=self.config.clone_finally, target=LINUX_X64,
                              generic_context=generic_context)
            # the code runs in CoreCLR: its references bind in .NET Core whatever framework the
            # assembly targets (mcs's default is Mono's mscorlib), so the layouts are CoreCLR's
            jitee = None
            if self.config.jitee == "runtime":
                from .ee import RuntimeJitEE as jitee      # the reader asks the runtime (ee.py)
            pipeline = Pipeline(self.assembly(path), self.pool(), opt=self.config.opt,
                                options=options, differential=False, framework=RUN_FRAMEWORK, jitee=jitee)
            if self.config.damage == "metadata-field-offset":    # a negative control (install.DAMAGES)
                from .ee import damage_metadata
                damage_metadata(getattr(pipeline.ee, "metadata", pipeline.ee))
            self._pipelines[key] = pipeline
        return self._pipelines[key]

    def method_il(self, jit: JitInfo, method: int) -> bytes | None:
        """A method's IL: the runtime's (getMethodInfo), else -- an instantiated generic method,
        for which 3.1 gives none (an instantiating stub is a wrapper) -- the runtime's IL of its
        generic definition (its MethodDef resolved in its module), else the definition's from
        the file of its module. The runtime's first: for CoreLib's Unsafe, Volatile,
        Interlocked, RuntimeHelpers, JitHelpers and Activator intrinsics it substitutes IL of
        its own (jitinterface.cpp getMethodInfoHelper), which is what runs when the method is
        called rather than expanded -- `Unsafe.As<T>(object)` is `ldarg.0; ret` there, its
        file's IL only throws (PlatformNotSupportedException)."""
        il = jit.method_il(method)
        if il is not None:
            return il
        token = jit.method_def(method)
        if token >> 24 == 0x06:
            try:
                from .structs import CorInfoTokenKind
                definition = jit.resolve_token(jit.method_module(method), token, CorInfoTokenKind.Method,
                                               context=method).hMethod
                il = jit.method_il(definition) if definition and definition != method else None
            except Exception:    # noqa: BLE001 -- the runtime would not say: the file's IL
                il = None
            if il is not None:
                return il
        path = self.file_of(jit.assembly_name(jit.module_assembly(jit.method_module(method))))
        if path is None or token >> 24 != 0x06:
            return None
        try:
            return self.assembly(path).body(token & 0xFFFFFF).code
        except Exception:    # noqa: BLE001 -- no body: unknown
            return None

    def pool(self):
        if self._pool is None:
            from ..backend.codegen import CodegenPool
            self._pool = CodegenPool(1)
        return self._pool


def _instantiation(jit: JitInfo) -> dict:
    """{"instantiation": `Pair`1<int32>::Pick`} when the declined method is an exact instantiation
    (install.py names it on the call's JitInfo once known, runtime/instantiation.py), else {}."""
    name = getattr(jit, "instantiation", None)
    return {"instantiation": name} if name else {}


_SERVICE: Service | None = None
_TRAMPOLINE: int | None = None


def attach(trampoline: int) -> None:
    """Called once by altjit.c after importing us: the address of llilc_call_trapped."""
    global _SERVICE, _TRAMPOLINE
    _TRAMPOLINE = trampoline
    from ..batch import tune_gc
    tune_gc()
    _SERVICE = Service(RunConfig.load(os.environ[CONFIG_ENV]), trampoline)


def compile_method(comp: int, info: int, flags: int, entry: int, size: int) -> int:
    """altjit.c's compileMethod, past the fast decline. Never raises."""
    try:
        if _SERVICE is None:
            return CORJIT_SKIPPED
        return _SERVICE.compile(comp, info, flags, entry, size)
    except BaseException:   # noqa: BLE001 -- the runtime must never see a Python exception
        return CORJIT_SKIPPED


__all__ = ["CONFIG_ENV", "RunConfig", "Service", "attach", "compile_method"]
