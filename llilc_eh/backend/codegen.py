"""LLVM code generation in isolated worker processes: module text in, COFF object and
assembly text out.

Why a worker: llvmlite's LLVM is built with assertions, and some verifier-clean IR makes
it abort the process (a non-constant catchpad argument, `llvm.eh.recoverfp` with a CLR
parent, ...); `report_fatal_error` exits it. Either must cost one method, never the run.
So LLVM runs in a small pool of long-lived child processes (`CodegenPool`), each one
`python -c` importing this module and serving requests over its stdin/stdout pipes
(length-prefixed pickles; the child moves its own fd 1 onto stderr first, so nothing LLVM
prints can corrupt the protocol). A worker that dies is reported as
`BackendError(kind="llvm-abort")` with the signal or exit status and the tail of its
stderr (LLVM's assertion text); one that does not answer within the timeout is killed and
reported as `kind="llvm-timeout"`. Either way the next request gets a fresh worker.
Workers start lazily and are reused, so the per-method cost is one pipe round trip.

What a worker does with a module (`_compile`): parse and verify; at opt > 0 run LLVM's
default `O<opt>` pipeline (new pass manager); print the assembly text (after optimisation,
of a bitcode copy: see the direct route for why copies); then make the object
by *assembling that text* with LLVM's own assembler (the text as the `module asm` of an
otherwise empty module, emitted by a TargetMachine of the same triple, code model and
features at codegen level 0: the assembler (LLVM's MC layer) does not look at the codegen
level, but emitting the wrapper runs that level's whole codegen pipeline on an empty
module -- 1.2 ms at O2 whatever the text, less at O0; measured over 200 CoreLib methods:
assembling 2.18 -> 1.37 ms per method, every object identical). Why not emit the object
directly as well: codegen (instruction selection, register allocation) is most of LLVM's
time and a second emission repeats all of it, while assembling the text costs a quarter
of one; and the object is then by construction the code the text describes, which
`recover` checks instruction by instruction anyway. Measured over the corpus
(`tools/object_routes.py`): the assembled object is byte-identical to a direct emission for
every method but those with `llvm.localescape` (a filter reading its parent's frame): there
the text has already folded the frame-escape symbols to numbers, so the assembler picks
8-bit displacements where the direct emission keeps 32-bit ones. Those methods, and any
worker asked for `object_route="emit"`, take the direct route: two identical copies of the
optimised module (codegen's IR passes change the module they run on; `ModuleRef.clone()`
is not identical -- it changes use-list order, and codegen's choices follow it: seen on
CoreLib at O2 -- so the copies are two parses of its bitcode, or of the text at O0), one
emitted as the object and one as the text. `CodegenResult.route` says which route a module
took.

Target: `x86_64-pc-windows-msvc`, small code model (`call rel32`), relocation model static
(LLVM's COFF default), codegen level `opt`, CPU features `-fast-15bytenop`: what the
functions' subtarget has already (their alignment padding is 10- and 5-byte NOPs), stated
so that the assembler's subtarget, which is the TargetMachine's own, pads alike (without
it the assembled object pads with one 15-byte NOP).

`-trap-unreachable` (on by default, `CodegenPool(trap_unreachable=...)`): `llvm.set_option`
reaches LLVM's command-line flag in the worker before any TargetMachine exists, and the
flag works: every `unreachable` becomes `ud2`. Without it the Windows x64 target already
keeps return addresses inside their function -- a `nop` after a call followed by
unreachable code, an `int3` after a call that ends a function or funclet (LLVM's
"avoid trailing call" rule) -- but lets a noreturn helper that does return fall through
into whatever follows. With it, that is a trap at the spot; `ud2` is 2 bytes, so it costs
one byte per throw site.
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from ..errors import BackendError

TRIPLE = "x86_64-pc-windows-msvc"
CODE_MODEL = "small"
FEATURES = "-fast-15bytenop"    # see the module docstring: the assembler pads as the functions do
OBJECT_ROUTES = {"assemble": "assembled", "emit": "emitted"}   # route -> how its objects are called
DEFAULT_TIMEOUT = 60.0
STARTUP_TIMEOUT = 60.0
STDERR_TAIL = 2000          # characters of a dead worker's stderr quoted in the error
_STDERR_LIMIT = 1 << 20     # a worker's stderr file is emptied when it grows past this
ASSEMBLER_LEVEL = 0         # the codegen level of the TargetMachine that assembles (docstring)
MAX_COMPILES = 2000         # a worker is replaced after this many modules (see _Worker.compile)


@dataclass(frozen=True)
class CodegenTimings:
    """Seconds. `parse` includes verification (and the copies of the direct route); `asm` is
    the codegen run that prints the assembly text; `codegen` makes the object (assembling
    the text, or on the direct route a second codegen run); `worker` is all the worker
    spent; `roundtrip` is what the caller waited (worker time + pickling + pipes: the
    isolation overhead is the difference). All of those are wall time; `cpu` is the CPU
    time the worker's process spent on the module (its own clock, so it survives the
    worker: a recycled worker's /proc entry goes with it) -- what the module costs a core
    whatever else the machine runs."""

    parse: float
    opt: float
    codegen: float
    asm: float
    worker: float
    roundtrip: float = 0.0
    cpu: float = 0.0

    @property
    def overhead(self) -> float:
        return self.roundtrip - self.worker

    def __str__(self) -> str:
        ms = lambda s: f"{s * 1e3:.2f}"
        return (f"parse {ms(self.parse)} ms, opt {ms(self.opt)} ms, codegen {ms(self.codegen)} ms, "
                f"asm {ms(self.asm)} ms; worker {ms(self.worker)} ms, round trip "
                f"{ms(self.roundtrip)} ms")


@dataclass(frozen=True)
class CodegenResult:
    """One compiled module: the COFF object bytes and LLVM's assembly text of the same code."""

    obj: bytes
    asm: str
    opt: int
    timings: CodegenTimings
    diagnostics: str = ""    # what LLVM wrote to stderr while compiling (usually nothing)
    route: str = "assemble"  # how the object was made: "assemble" (from the text) or "emit"
    cached: bool = False     # from the pool's result cache (`backend.cache`): LLVM did not run,
                             # the timings are zero but `roundtrip` (the lookup)

    def __str__(self) -> str:
        return (f"O{self.opt}: object {len(self.obj)} bytes ({OBJECT_ROUTES[self.route]}), assembly "
                f"{self.asm.count(chr(10))} lines; " + ("from the cache" if self.cached else f"{self.timings}"))


# -- the worker process ---------------------------------------------------------------------

_LENGTH = struct.Struct("<I")


def _send(stream, message) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(payload)) + payload)
    stream.flush()


def _read_all(stream, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _worker_main() -> None:
    """Entry point of a worker process (`python -c`): serve compile requests until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent decides when we stop
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)                                   # stray prints (LLVM's too) go to stderr
    sys.stdout = sys.stderr

    def receive():
        header = _read_all(requests, _LENGTH.size)
        if header is None:
            return None
        payload = _read_all(requests, _LENGTH.unpack(header)[0])
        return None if payload is None else pickle.loads(payload)

    config = receive()
    if config is None:
        return
    llvm, machine = _start_llvm(config["llvm_options"])
    _send(replies, ("ready", os.getpid()))
    while (request := receive()) is not None:
        opt = request["opt"]
        try:
            reply = ("ok", *_compile(llvm, machine, request["ir"], opt, request["route"]))
        except _CompileFailure as e:
            reply = ("error", e.kind, e.reason)
        except Exception as e:  # noqa: BLE001 -- any failure is this module's, not the worker's
            reply = ("error", "llvm-error", f"{type(e).__name__}: {e}")
        _send(replies, reply)


def _start_llvm(llvm_options: Iterable[str]):
    """Initialise llvmlite in a worker; returns the binding module and `machine(opt)`, the
    TargetMachine of an O level (made on first use)."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_asmparser()               # `module asm`, and assembling the text
    for option in llvm_options:
        llvm.set_option("llilc-eh", option)          # before any TargetMachine reads them
    target = llvm.Target.from_triple(TRIPLE)
    machines = {}

    def machine(opt: int):
        if opt not in machines:
            machines[opt] = target.create_target_machine(opt=opt, codemodel=CODE_MODEL, features=FEATURES)
        return machines[opt]
    return llvm, machine


def _check_route(route: str) -> str:
    if route not in OBJECT_ROUTES:
        raise ValueError(f"object route {route!r} (one of {', '.join(OBJECT_ROUTES)})")
    return route


def object_route(ir: str, configured: str) -> str:
    """The route a module's object takes under a pool's policy: the configured one, except
    that frame escapes (`llvm.localescape`) are emitted directly (see the module docstring)."""
    return "emit" if configured == "assemble" and "@llvm.localescape" in ir else configured


class _CompileFailure(Exception):
    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def _compile(llvm, machines, ir: str, opt: int, route: str):
    """One module on the given route: (object, text, route, timings); `machines(level)` is
    the worker's TargetMachine of a codegen level. Failures are `_CompileFailure`s (an LLVM
    abort takes the worker with it)."""
    # A context per module: the global one would keep every module's types and constants
    # for the worker's lifetime.
    context = llvm.create_context()
    modules = []
    try:
        return _compile_in(llvm, machines, ir, opt, route, context, modules)
    finally:
        for module in reversed(modules):
            module.close()
        context.close()


def _compile_in(llvm, machines, ir: str, opt: int, route: str, context, modules: list):
    clock = time.perf_counter
    machine = machines(opt)
    cpu0, t0 = time.process_time(), clock()
    try:
        module = llvm.parse_assembly(ir, context=context)
    except RuntimeError as e:
        raise _CompileFailure("llvm-parse", str(e).strip()) from None
    modules.append(module)
    try:
        module.verify()
    except RuntimeError as e:
        raise _CompileFailure("llvm-verify", str(e).strip()) from None
    t1 = clock()
    if opt > 0:
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt)
        builder = llvm.create_pass_builder(machine, tuning)
        passes = builder.getModulePassManager()
        try:
            passes.run(module, builder)
        finally:
            passes.close()
            builder.close()
            tuning.close()
    t2 = clock()
    copies = _copies(llvm, module, ir, opt, context, modules)
    if route == "assemble":
        for_assembly = next(copies)
        t3 = clock()
        asm = machine.emit_assembly(for_assembly)
        t4 = clock()
        obj = _assemble(llvm, machines(ASSEMBLER_LEVEL), asm, context, modules)
        t5 = clock()
    else:
        for_object, for_assembly = next(copies), next(copies)
        t3 = clock()
        obj = machine.emit_object(for_object)
        t4 = clock()
        asm = machine.emit_assembly(for_assembly)
        t5 = clock()
    parse = (t1 - t0) + (t3 - t2)
    emit_object, emit_text = (t5 - t4, t4 - t3) if route == "assemble" else (t4 - t3, t5 - t4)
    return obj, asm, route, (parse, t2 - t1 if opt > 0 else 0.0, emit_object, emit_text, t5 - t0,
                             time.process_time() - cpu0)


def _copies(llvm, module, ir: str, opt: int, context, modules: list):
    """Identical modules to emit, one per emission (codegen changes the module it runs on;
    see the module docstring for why not `clone()`): at O0 the parsed module itself, then
    parses of the text again; after optimisation parses of its bitcode -- the optimised
    module itself has another use-list order, and codegen follows it (printed from it, 9 of
    the corpus' 5,693 EH methods got other code at O2)."""
    if opt == 0:
        yield module
        while True:
            modules.append(llvm.parse_assembly(ir, context=context))
            yield modules[-1]
    bitcode = module.as_bitcode()
    while True:
        modules.append(llvm.parse_bitcode(bitcode, context=context))
        yield modules[-1]


# What the AsmPrinter writes at the top of every COFF module's text, which the wrapper module
# of `_assemble` writes again itself: the `@feat.00` symbol block and the `.file` directive.
_FILE_PREAMBLE = re.compile(r'\A(?:\t\.def\t@feat\.00;\n(?:\t[^\n]*\n)*?@feat\.00 = \d+\n)?'
                            r'(?:\t\.file\t[^\n]*\n)?')


def _assemble(llvm, machine, asm: str, context, modules: list) -> bytes:
    """The object of `asm`, assembled by LLVM's integrated assembler: the text becomes the
    `module asm` of an empty module (the text's own preamble dropped, the wrapper writes
    it), which `machine` emits."""
    body = _FILE_PREAMBLE.sub("", asm, count=1)
    quoted = body.replace("\\", "\\5C").replace('"', "\\22").replace("\n", "\\0A")
    wrapper = llvm.parse_assembly(f'target triple = "{TRIPLE}"\nmodule asm "{quoted}"\n', context=context)
    modules.append(wrapper)
    return machine.emit_object(wrapper)


# -- the caller's side ------------------------------------------------------------------------

class _Timeout(Exception):
    pass


class _Died(Exception):
    pass


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = ("import sys; sys.path.insert(0, {root!r}); "
         "from llilc_eh.backend.codegen import _worker_main; _worker_main()")


class _Worker:
    """One child process and its pipes; restarted on demand after a death or a timeout."""

    def __init__(self, config: dict, startup_timeout: float, max_compiles: int):
        self.config = config
        self.startup_timeout = startup_timeout
        self.max_compiles = max_compiles
        self.process: subprocess.Popen | None = None
        self.stderr_path: str | None = None
        self.starts = 0
        self.failures = 0     # aborts and timeouts (each costs a restart)
        self.served = 0       # compiles by the current process

    # lifecycle

    def start(self) -> None:
        fd, self.stderr_path = tempfile.mkstemp(prefix="llilc-eh-llvm-", suffix=".stderr")
        os.close(fd)
        with open(self.stderr_path, "ab") as err:   # O_APPEND: we may truncate under it
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT.format(root=_PACKAGE_ROOT)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, close_fds=True)
        self.starts += 1
        self.served = 0
        try:
            self._write(self.config)
            reply = self._receive(time.monotonic() + self.startup_timeout)
        except (_Timeout, _Died) as e:
            tail = self._stderr_tail(0)
            self.stop()
            raise BackendError(f"the LLVM worker did not start ({type(e).__name__[1:].lower()}): "
                               f"{tail}", kind="worker-start") from None
        if reply[0] != "ready":
            self.stop()
            raise BackendError(f"the LLVM worker said {reply!r} instead of ready", kind="worker-start")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            for pipe in (process.stdin, process.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.stderr_path:
            try:
                os.unlink(self.stderr_path)
            except OSError:
                pass
            self.stderr_path = None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        self.stop()

    # one request

    def compile(self, ir: str, opt: int, route: str, timeout: float, method: str | None) -> CodegenResult:
        if self.process is None:
            self.start()
        mark = self._stderr_mark()
        started = time.perf_counter()
        try:
            self._write({"ir": ir, "opt": opt, "route": route})
            reply = self._receive(time.monotonic() + timeout)
        except _Timeout:
            self.kill()
            self.failures += 1
            raise BackendError(f"LLVM did not finish within {timeout:g} s at O{opt}; worker killed",
                               kind="llvm-timeout", method=method) from None
        except _Died:
            status = self.process.wait() if self.process is not None else None
            tail = self._stderr_tail(mark)
            self.stop()
            self.failures += 1
            if status is not None and status < 0:
                try:
                    how = f"killed by {signal.Signals(-status).name}"
                except ValueError:
                    how = f"killed by signal {-status}"
            else:
                how = f"exited with status {status}"
            raise BackendError(f"LLVM {how} at O{opt}: {tail or '(no message)'}",
                               kind="llvm-abort", method=method) from None
        roundtrip = time.perf_counter() - started
        self.served += 1
        if self.served >= self.max_compiles:
            self.stop()   # recycled: LLVM's O>0 pipeline (llvmlite 0.50) leaks ~60 kB a run
        if reply[0] == "error":
            raise BackendError(reply[2], kind=reply[1], method=method)
        _, obj, asm, route, (parse, opt_time, codegen, asm_time, worker, cpu) = reply
        return CodegenResult(obj, asm, opt,
                             CodegenTimings(parse, opt_time, codegen, asm_time, worker, roundtrip, cpu),
                             self._stderr_text(mark), route)

    # pipes

    def _write(self, message) -> None:
        try:
            _send(self.process.stdin, message)
        except (BrokenPipeError, ConnectionResetError, ValueError):
            raise _Died() from None

    def _receive(self, deadline: float):
        header = self._read_exact(_LENGTH.size, deadline)
        return pickle.loads(self._read_exact(_LENGTH.unpack(header)[0], deadline))

    def _read_exact(self, n: int, deadline: float) -> bytes:
        fd = self.process.stdout.fileno()
        data = bytearray()
        while len(data) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout()
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise _Timeout()
            chunk = os.read(fd, min(n - len(data), 1 << 22))
            if not chunk:
                raise _Died()
            data += chunk
        return bytes(data)

    # stderr

    def _stderr_mark(self) -> int:
        try:
            size = os.path.getsize(self.stderr_path)
        except OSError:
            return 0
        if size > _STDERR_LIMIT:
            os.truncate(self.stderr_path, 0)
            return 0
        return size

    def _stderr_text(self, mark: int) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(mark)
                return f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    def _stderr_tail(self, mark: int) -> str:
        text = self._stderr_text(mark).strip()
        return text[-STDERR_TAIL:]


class CodegenPool:
    """A few long-lived LLVM worker processes; `compile` is thread-safe and blocks until a
    worker is free. Use as a context manager, or call `close`. `cache` (`backend.cache.
    LlvmCache`, or None: always run LLVM) is looked up before a worker is asked and given
    every successful result; its key holds everything here a worker's result depends on."""

    def __init__(self, size: int = 2, *, timeout: float = DEFAULT_TIMEOUT,
                 trap_unreachable: bool = True, llvm_options: Iterable[str] = (),
                 startup_timeout: float = STARTUP_TIMEOUT, max_compiles: int = MAX_COMPILES,
                 object_route: str = "assemble", cache=None):
        if size < 1:
            raise ValueError(f"pool size {size}")
        _check_route(object_route)
        self.size = size
        self.timeout = timeout
        options = (["-trap-unreachable"] if trap_unreachable else []) + list(llvm_options)
        self.config = {"llvm_options": options}
        self.object_route = object_route
        self.cache = cache
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._workers = [_Worker(self.config, startup_timeout, max_compiles) for _ in range(size)]
        for w in self._workers:
            self._idle.put(w)
        self._closed = False

    @property
    def restarts(self) -> int:
        """Workers lost to an abort or a timeout (each replaced by a fresh one)."""
        return sum(w.failures for w in self._workers)

    @property
    def starts(self) -> int:
        """Worker processes started so far (first starts, replacements and recycling)."""
        return sum(w.starts for w in self._workers)

    def compile(self, ir_text: str, opt: int = 0, *, timeout: float | None = None,
                method: str | None = None, route: str | None = None) -> CodegenResult:
        """Compile one module; LLVM's failures are `BackendError`s (kinds: llvm-parse,
        llvm-verify, llvm-error, llvm-abort, llvm-timeout, worker-start). `route` forces
        how the object is made; by default the pool's `object_route` policy decides."""
        if opt not in (0, 1, 2, 3):
            raise ValueError(f"opt level {opt!r} (0, 1, 2 or 3)")
        route = object_route(ir_text, self.object_route) if route is None else _check_route(route)
        if self._closed:
            raise ValueError("the codegen pool is closed")
        cache, digest = self.cache, None
        if cache is not None:
            from . import cache as results
            started = time.perf_counter()
            digest = results.key(ir_text, (TRIPLE, CODE_MODEL, FEATURES, f"assembler O{ASSEMBLER_LEVEL}",
                                           "\0".join(self.config["llvm_options"]), f"O{opt}", route))
            hit = cache.get(digest)
            if hit is not None:
                return CodegenResult(hit.obj, hit.asm, hit.opt,
                                     CodegenTimings(0.0, 0.0, 0.0, 0.0, 0.0, time.perf_counter() - started),
                                     hit.diagnostics, hit.route, cached=True)
        worker = self._idle.get()
        try:
            result = worker.compile(ir_text, opt, route, self.timeout if timeout is None else timeout, method)
        finally:
            self._idle.put(worker)
        if digest is not None:
            cache.put(digest, results.Cached(result.obj, result.asm, result.opt, result.route, result.diagnostics))
        return result

    def compile_many(self, modules: Iterable[str], opt: int = 0, *, timeout: float | None = None,
                     methods: Iterable[str | None] | None = None,
                     route: str | None = None) -> list[CodegenResult | BackendError]:
        """Compile modules on all workers at once; results in input order, each a result or
        the `BackendError` of that module."""
        modules = list(modules)
        names = list(methods) if methods is not None else [None] * len(modules)

        def one(item):
            ir, name = item
            try:
                return self.compile(ir, opt, timeout=timeout, method=name, route=route)
            except BackendError as e:
                return e

        with ThreadPoolExecutor(max_workers=self.size) as executor:
            return list(executor.map(one, zip(modules, names)))

    def close(self) -> None:
        self._closed = True
        for w in self._workers:
            w.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_default_pool: CodegenPool | None = None
_default_lock = threading.Lock()


def default_pool() -> CodegenPool:
    """The process-wide pool `compile_module` uses (two workers, closed at exit)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = CodegenPool(2)
            atexit.register(_default_pool.close)
        return _default_pool


def compile_module(ir_text: str, opt: int = 0, *, timeout: float = DEFAULT_TIMEOUT,
                   method: str | None = None) -> CodegenResult:
    """Compile one LLVM module (text) for x86_64-pc-windows-msvc in a worker process."""
    return default_pool().compile(ir_text, opt, timeout=timeout, method=method)


def object_symbol(llvm_global: str) -> str:
    """The COFF symbol name of an LLVM global as the reader or LLVM spells it (`@name`,
    `@"quoted\\22name"`): read as LLVM's lexer reads it (UnEscapeLexed: `\\\\` is one
    backslash, `\\XX` one byte, the bytes UTF-8), no prefix (x64 COFF adds none)."""
    name = llvm_global.removeprefix("@")
    if len(name) >= 2 and name[0] == name[-1] == '"':
        raw = _LEXED_ESCAPE.sub(_unescape, name[1:-1].encode("utf-8", "surrogatepass"))
        name = raw.decode("utf-8", "surrogateescape")
    return name.removeprefix("\x01")


_LEXED_ESCAPE = re.compile(rb"\\(\\|[0-9A-Fa-f]{2})")


def _unescape(m: re.Match) -> bytes:
    return b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1), 16)])
