"""Exceptions counted through our frames: an out-of-process EventPipe session on the run.

What `run` reports: how many exceptions were thrown and how many catch, finally, fault and
filter handlers ran, in the methods llilc-eh compiled and in all, exactly -- with a control:
the in-process AppDomain.FirstChanceException count must equal the ExceptionThrown events the
session received, else the report says how many were lost.

Why out of process. The runtime's Exception keyword (0x8000) gives ExceptionThrown_V1 (the
throwing frame's IP) and ExceptionCatchStart / FinallyStart / FilterStart (the funclet's first
instruction and the MethodDesc whose handler runs). An in-process EventListener sees them only
when a thread's EventPipe buffer fills (3.1), so a short run loses them (measured: 0 of 11,
docs/runtime.md). A session opened over the diagnostics socket
(`$TMPDIR/dotnet-diagnostic-<pid>-<key>-socket`, on by default in 3.1) loses nothing: at exit
the runtime itself disables every session -- EEShutDownHelper calls EventPipe::Shutdown, which
writes every thread's buffers to the stream and ends it with the null-reference tag, and only
then raises ProcessExit (ceemain.cpp; the socket file is unlinked at the same point, so
StopTracing is only the fallback for a stream still open at ProcessExit).

How the program is held. 3.1 has no way to start a runtime suspended until a session is on
(DOTNET_DiagnosticPorts is 5.0+), so a startup hook (exception_hook.cs, built with mcs,
DOTNET_STARTUP_HOOKS) does it: before Main it tells the driver it started (the socket exists
by then: the diagnostics server starts before managed code) and waits; the driver opens the
session and answers. At ProcessExit the hook sends its first-chance count (every exception
the program saw: the control) and waits until the driver has read the stream to its end.
On an unhandled exception (the runtime dies without its shutdown) the hook sends the count
from AppDomain.UnhandledException and the driver stops the session itself (StopTracing: the
socket still exists then), so those runs are counted whole too. The two talk over two
inherited pipes, so a driver that dies releases the program (end of pipe), and a program
that dies otherwise (a crash) cuts the stream -- then the report says the control is unknown
and the counts are what the stream held.
Exceptions thrown after the runtime's shutdown began (in ProcessExit handlers, finalizers at
exit) are in the first-chance count but not in the stream: the control reports them as lost.

What is ours: the compiled events carry each method's MethodDesc (`method_handle`, what
the runtime names in a handler event), its code address (`entry`) and size -- an exception
was thrown in our method when the innermost frame of the ExceptionThrown event's stack (the
session captures one per event) is in its code -- and its native
clauses (`handlers`: kind and handler offset) -- a finally and a fault both raise
ExceptionFinallyStart, the handler's address tells them apart in our methods; in RyuJIT's
they are counted together ("finally or fault").

The session also takes the Interop keyword (0x2000): ILStubGenerated names every IL stub the
runtime generated during the run, the method it marshals for and its IL as text -- the
report's `il_stubs` (with the number of EH clauses each has), which says what the "IL stub"
declines are (docs/runtime.md, "IL stubs").
"""

from __future__ import annotations

import glob
import hashlib
import os
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .eventpipe_structs import (IPC_HEADER_SIZE, CollectTracing2, ErrorReply, ExceptionHandlingPayload,
                                ExceptionThrownPayload, ILStubGeneratedPayload, IpcHeader, SessionIdReply, StopTracing)
from .nettrace import NettraceError, Trace, read

HOOK_SOURCE = Path(__file__).with_name("exception_hook.cs")
HOOK_FDS_ENV = "LLILC_EH_HOOK_FDS"

RUNTIME_PROVIDER = "Microsoft-Windows-DotNETRuntime"
EXCEPTION_KEYWORD = 0x8000
INTEROP_KEYWORD = 0x2000      # ILStubGenerated: which IL stubs the run made, with or without EH
LEVEL_INFORMATIONAL = 4
COMMAND_SET_EVENTPIPE, COMMAND_SET_SERVER = 0x02, 0xFF
COMMAND_STOP_TRACING, COMMAND_COLLECT_TRACING2 = 0x01, 0x03
SERVER_OK, SERVER_ERROR = 0x00, 0xFF
FORMAT_NETTRACE = 1

EVENT_EXCEPTION_THROWN = 80
EVENT_CATCH_START, EVENT_FINALLY_START, EVENT_FILTER_START = 250, 252, 254
EVENT_IL_STUB_GENERATED = 88
STUB_FLAGS = ((0x1, "reverse"), (0x2, "COM"), (0x8, "delegate"), (0x10, "vararg"), (0x20, "unmanaged callee"))
RETHROWN_FLAG = 0x4

SOCKET_WAIT = 30.0       # s: the socket file appears before managed code runs; a loaded machine is slow
STOP_WAIT = 120.0        # s: StopTracing flushes every buffer; the stream then ends
ENDED_WAIT = 10.0        # s: at ProcessExit the runtime's shutdown has already ended the stream


class SessionError(Exception):
    """The session could not be opened or read (the reason goes into the report)."""


def build_hook() -> Path:
    """The startup hook's assembly, compiled with mcs once per source (cached like the alt JIT)."""
    from ..assembly.corpus import cache_root
    from ..check.toolchain import compile_cs
    digest = hashlib.sha256(HOOK_SOURCE.read_bytes()).hexdigest()[:16]
    out = cache_root() / "altjit" / f"llilc_eh_exception_hook-{digest}.dll"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.stem}.{os.getpid()}.dll")
        compile_cs(HOOK_SOURCE, tmp, "-target:library", "-unsafe", "-optimize+")
        os.replace(tmp, out)
    return out


# -- the diagnostics IPC --------------------------------------------------------------------

def socket_path(pid: int) -> str | None:
    """The runtime's diagnostics socket (diagnosticserver.cpp: dotnet-diagnostic-<pid>-<key>-socket
    in the temporary folder), or None while it does not exist."""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    found = sorted(glob.glob(os.path.join(tmp, f"dotnet-diagnostic-{pid}-*-socket")))
    return found[-1] if found else None


def _send(sock: socket.socket, command_set: int, command_id: int, payload: bytes) -> None:
    header = IpcHeader.build({"size": IPC_HEADER_SIZE + len(payload), "command_set": command_set,
                              "command_id": command_id, "reserved": 0})
    sock.sendall(header + payload)


def _receive_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise SessionError(f"the runtime closed the diagnostics connection after {len(data)} of {n} bytes")
        data += chunk
    return data


def _reply(sock: socket.socket) -> int:
    """The session id of an OK reply; SessionError with the HRESULT of an error reply."""
    header = IpcHeader.parse(_receive_exact(sock, IPC_HEADER_SIZE))
    body = _receive_exact(sock, header.size - IPC_HEADER_SIZE)
    if header.command_set == COMMAND_SET_SERVER and header.command_id == SERVER_OK:
        return SessionIdReply.parse(body).session_id
    if header.command_id == SERVER_ERROR:
        raise SessionError(f"the runtime refused: HRESULT 0x{ErrorReply.parse(body).hresult:08X}")
    raise SessionError(f"unexpected reply: command set {header.command_set}, id {header.command_id}")


class Session:
    """One EventPipe session with the runtime provider's Exception keyword, its stream read on a
    thread into memory until the runtime ends it."""

    def __init__(self, pid: int):
        self.pid = pid
        if os.environ.get("COMPlus_EnableDiagnostics") == "0":     # the runtime opens no socket at all
            raise SessionError("COMPlus_EnableDiagnostics=0: the runtime has no diagnostics socket")
        path = None
        deadline = time.monotonic() + SOCKET_WAIT
        while path is None and time.monotonic() < deadline:
            path = socket_path(pid)
            if path is None:
                time.sleep(0.01)
        if path is None:
            raise SessionError(f"no diagnostics socket for process {pid} after {SOCKET_WAIT:.0f} s "
                               "(COMPlus_EnableDiagnostics=0?)")
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
            _send(self.sock, COMMAND_SET_EVENTPIPE, COMMAND_COLLECT_TRACING2, CollectTracing2.build({
                "circular_buffer_mb": 256, "format": FORMAT_NETTRACE, "rundown": False,
                "providers": [{"keywords": EXCEPTION_KEYWORD | INTEROP_KEYWORD, "level": LEVEL_INFORMATIONAL,
                               "name": RUNTIME_PROVIDER, "filter": None}]}))
            self.session_id = _reply(self.sock)
        except OSError as e:
            self.sock.close()
            raise SessionError(f"diagnostics socket {path}: {e}") from None
        except SessionError:
            self.sock.close()
            raise
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, name="llilc-eh-eventpipe", daemon=True)
        self._reader.start()
        self._barrier()

    def _barrier(self) -> None:
        """Return only once the providers are on. The session id comes back from the session's
        constructor (eventpipesession.cpp: IpcStreamWriter sends it), *before* EnableInternal
        and the provider callbacks that switch the runtime's events on -- a program released
        right then threw its first exceptions unrecorded (measured with tiering on: 3 of 16
        ExceptionThrown events). The diagnostics server handles one request at a time
        (diagnosticserver.cpp), so the reply to a second request means the first is done: a
        StopTracing of session 0, which EventPipe::Disable ignores."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(STOP_WAIT)
            sock.connect(self.path)
            _send(sock, COMMAND_SET_EVENTPIPE, COMMAND_STOP_TRACING, StopTracing.build({"session_id": 0}))
            _reply(sock)
        except OSError as e:
            raise SessionError(f"diagnostics socket {self.path} (barrier): {e}") from None
        finally:
            sock.close()

    def _read(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return
                self._chunks.append(chunk)
        except OSError:
            return

    def stop(self) -> None:
        """StopTracing on a second connection: the runtime flushes every buffer, ends the stream."""
        stopper = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            stopper.settimeout(STOP_WAIT)
            stopper.connect(self.path)
            _send(stopper, COMMAND_SET_EVENTPIPE, COMMAND_STOP_TRACING,
                  StopTracing.build({"session_id": self.session_id}))
            _reply(stopper)
        except OSError as e:
            raise SessionError(f"StopTracing: {e}") from None
        finally:
            stopper.close()

    def ended(self, wait: float) -> bool:
        """Whether the runtime ended the stream (within `wait` seconds)."""
        self._reader.join(wait)
        return not self._reader.is_alive()

    def trace(self, wait: float) -> Trace:
        """The stream read so far (to its end, if it ends within `wait` seconds)."""
        self._reader.join(wait)
        self.sock.close()
        return read(b"".join(self._chunks))


# -- the run's side: the hook's pipes and the session around the program -----------------------

@dataclass
class Watch:
    """What the driver learned: the session's trace, the hook's first-chance count, and why
    either is missing."""

    trace: Trace | None = None
    first_chance: int | None = None         # None: the program never reached ProcessExit
    hook_started: bool = False
    ending: str | None = None               # "exit" (ProcessExit) | "unhandled exception" | None (unknown)
    problems: list[str] = field(default_factory=list)


class ExceptionWatch:
    """The driver's half: pipes for the hook, the session opened when the hook starts and
    stopped when it exits. Use: env = watch.environment(); Popen(..., pass_fds=watch.child_fds);
    watch.attach(pid); ...the program runs...; watch.finish() -> Watch."""

    def __init__(self):
        self.hook = build_hook()
        self._to_hook_r, self._to_hook_w = os.pipe()        # driver -> hook
        self._from_hook_r, self._from_hook_w = os.pipe()    # hook -> driver
        self.child_fds = (self._to_hook_r, self._from_hook_w)
        self.result = Watch()
        self._thread: threading.Thread | None = None
        self._session: Session | None = None

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        env = dict(env)
        hooks = [h for h in env.get("DOTNET_STARTUP_HOOKS", "").split(":") if h]
        env["DOTNET_STARTUP_HOOKS"] = ":".join([str(self.hook), *hooks])
        env[HOOK_FDS_ENV] = f"{self._to_hook_r},{self._from_hook_w}"
        return env

    def attach(self, pid: int) -> None:
        """The program started: close the child's ends here, serve the hook on a thread."""
        os.close(self._to_hook_r)
        os.close(self._from_hook_w)
        self._thread = threading.Thread(target=self._serve, args=(pid,), name="llilc-eh-hook", daemon=True)
        self._thread.start()

    def abandon(self) -> None:
        """The program could not start: close every end."""
        for fd in (self._to_hook_r, self._to_hook_w, self._from_hook_r, self._from_hook_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _message(self) -> tuple[str, int] | None:
        data = b""
        while len(data) < 9:
            chunk = os.read(self._from_hook_r, 9 - len(data))
            if not chunk:
                return None
            data += chunk
        return chr(data[0]), struct.unpack("<q", data[1:])[0]

    def _answer(self, ok: bool) -> None:
        try:
            os.write(self._to_hook_w, b"1" if ok else b"0")
        except OSError:
            pass

    def _serve(self, pid: int) -> None:
        r = self.result
        try:
            if self._message() is None:
                r.problems.append("the startup hook never ran (the program did not start?)")
                return
            r.hook_started = True
            try:
                self._session = Session(pid)
            except SessionError as e:
                r.problems.append(f"no EventPipe session: {e}")
            self._answer(self._session is not None)
            message = self._message()
            if message is None:
                r.problems.append("the program ended without ProcessExit or an unhandled exception (a crash?): "
                                  "the first-chance count is unknown and a thread's unflushed events may be lost")
            else:
                r.first_chance = message[1]
                r.ending = "unhandled exception" if message[0] == "U" else "exit"
            if self._session is not None:
                # at ProcessExit the runtime's shutdown has ended the stream; an unhandled
                # exception kills the process without it: stop the session ourselves
                if message is not None and (message[0] == "U" or not self._session.ended(ENDED_WAIT)):
                    try:
                        self._session.stop()
                    except SessionError as e:
                        r.problems.append(str(e))
                try:
                    r.trace = self._session.trace(STOP_WAIT)
                except NettraceError as e:
                    r.problems.append(f"the stream could not be read: {e}")
                if r.trace is not None and not r.trace.complete:
                    r.problems.append("the event stream was cut short (the session never ended cleanly)")
            if message is not None:
                self._answer(True)
        finally:
            for fd in (self._to_hook_w, self._from_hook_r):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def finish(self, wait: float = STOP_WAIT) -> Watch:
        if self._thread is not None:
            self._thread.join(wait)
            if self._thread.is_alive():
                self.result.problems.append(f"the session did not end within {wait:.0f} s")
        return self.result


# -- counting ---------------------------------------------------------------------------------

HANDLER_KINDS = ("catch", "filter", "finally", "fault")


def count(watch: Watch, compiled: list[dict]) -> dict:
    """The report's `exceptions`: thrown and handlers run, in our methods and in all, by method
    of ours, and the control. Deterministic (sorted by name)."""
    out: dict = {"il_stubs": None, "thrown": None, "thrown_ours": None, "rethrown": None,
                 "handlers": None, "handlers_ours": None, "by_method": [],
                 "first_chance": watch.first_chance, "lost": None, "sequence_gaps": None, "ending": watch.ending,
                 "complete": False, "problems": list(watch.problems)}
    trace = watch.trace
    if trace is None:
        return out
    by_handle: dict[int, dict] = {}
    ranges: list[tuple[int, int, dict]] = []
    for m in compiled:
        if m.get("method_handle") is None or m.get("entry") is None:
            continue
        by_handle[int(m["method_handle"], 16)] = m
        start = int(m["entry"], 16)
        ranges.append((start, start + (m.get("code_bytes") or 0), m))
    per: dict[str, dict[str, int]] = {}

    def tally(m: dict, kind: str) -> None:
        key = f"{m.get('assembly')}!{m['method']}"
        per.setdefault(key, {k: 0 for k in ("thrown", *HANDLER_KINDS)})[kind] += 1

    thrown = thrown_ours = rethrown = unplaced = 0
    stubs: list[dict] = []
    handlers = {"catch": 0, "filter": 0, "finally or fault": 0}
    ours = {k: 0 for k in HANDLER_KINDS}
    for e in trace.events:
        if e.provider != RUNTIME_PROVIDER:
            continue
        if e.event_id == EVENT_EXCEPTION_THROWN:
            p = ExceptionThrownPayload.parse(e.payload)
            thrown += 1
            rethrown += bool(p.flags & RETHROWN_FLAG)
            # the innermost managed frame of the event's stack: a return address just past the
            # throw helper's call (or a faulting instruction). ExceptionEIP is not it: 3.1 fires
            # the event on the caller's frame (measured: the IP after the call to the thrower).
            top = e.stack[0] if e.stack else None
            if top is None:
                unplaced += 1
            owner = next((m for lo, hi, m in ranges if top is not None and lo < top <= hi), None)
            if owner is not None:
                thrown_ours += 1
                tally(owner, "thrown")
        elif e.event_id == EVENT_IL_STUB_GENERATED:
            p = ILStubGeneratedPayload.parse(e.payload)
            kind = "+".join(n for bit, n in STUB_FLAGS if p.stub_flags & bit) or "forward P/Invoke"
            stubs.append({"for": f"{p.managed_namespace}::{p.managed_name}", "kind": kind,
                          "eh_clauses": sum(1 for ln in p.stub_il.splitlines() if ln.lstrip().startswith(".try")),
                          "signature": p.managed_signature})
        elif e.event_id in (EVENT_CATCH_START, EVENT_FINALLY_START, EVENT_FILTER_START):
            p = ExceptionHandlingPayload.parse(e.payload)
            kind = {EVENT_CATCH_START: "catch", EVENT_FILTER_START: "filter"}.get(e.event_id, "finally or fault")
            handlers[kind] += 1
            m = by_handle.get(p.method_id)
            if m is None:
                continue
            if kind == "finally or fault":
                offset = p.entry_eip - int(m["entry"], 16)
                kinds = {h[1]: h[0] for h in m.get("handlers") or []}
                kind = "fault" if kinds.get(offset) == "fault" else "finally"
            ours[kind] += 1
            tally(m, kind)
    if unplaced:
        out["problems"].append(f"{unplaced} ExceptionThrown event(s) without a stack: not placed in a method")
    out.update({"thrown": thrown, "thrown_ours": thrown_ours, "rethrown": rethrown,
                "handlers": handlers, "handlers_ours": ours,
                "by_method": [{"method": k, **v} for k, v in sorted(per.items())],
                "sequence_gaps": trace.sequence_gaps, "complete": trace.complete,
                "il_stubs": sorted(stubs, key=lambda d: (d["for"], d["signature"], d["kind"]))})
    if watch.first_chance is not None:
        out["lost"] = watch.first_chance - thrown
    return out


def summary_lines(ex: dict) -> list[str]:
    """The summary's lines on exceptions (driver.summary)."""
    if ex.get("thrown") is None:
        return ["  exceptions: not counted -- " + ("; ".join(ex.get("problems") or []) or "no session")]
    h, o = ex["handlers"], ex["handlers_ours"]
    lines = [f"  exceptions: {ex['thrown']} thrown ({ex['rethrown']} rethrown), {ex['thrown_ours']} in methods "
             f"compiled by llilc-eh; handlers run: catch {h['catch']}, filter {h['filter']}, finally or fault "
             f"{h['finally or fault']}; in ours: catch {o['catch']}, filter {o['filter']}, finally {o['finally']}, "
             f"fault {o['fault']}"]
    if ex["first_chance"] is None:
        lines.append("    control: unknown (no first-chance count from the program)")
    elif ex["lost"] == 0 and not ex["sequence_gaps"]:
        lines.append(f"    control: {ex['first_chance']} first-chance exception(s) in process = {ex['thrown']} "
                     "ExceptionThrown events received; no event lost")
    else:
        lines.append(f"    control: {ex['first_chance']} first-chance exception(s) in process, {ex['thrown']} "
                     f"ExceptionThrown events received: lost {ex['lost']} event(s)"
                     f" ({ex['sequence_gaps']} sequence gap(s) in the stream)")
    stubs = ex.get("il_stubs") or []
    if stubs:
        with_eh = sorted({d["for"] for d in stubs if d["eh_clauses"]})
        lines.append(f"  IL stubs the runtime generated: {len(stubs)}, {sum(1 for d in stubs if d['eh_clauses'])} "
                     "with EH" + (f" ({', '.join(with_eh)})" if with_eh else ""))
    if ex.get("ending") == "unhandled exception":
        lines.append("    the program ended by an unhandled exception (the session was stopped before it died)")
    lines.extend(f"    {p}" for p in ex.get("problems") or [])
    return lines


__all__ = ["ExceptionWatch", "Session", "SessionError", "Watch", "build_hook", "count", "summary_lines"]
