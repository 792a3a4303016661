"""LLVM's results on disk, content-addressed, so that a second run does not rerun LLVM.

Why: LLVM is more than half of a `validate --translate` (docs/decisions.md, "Throughput"),
and its result for a module depends only on what the worker was given. A change to the
clause generator, the validator or the checks after codegen leaves every module's text as
it was, so the rerun after such a change finds every object and assembly text here.

The key is the sha256 of everything a worker's result depends on (`key`), each part length-
prefixed: this file's entry format, the target settings the pool passes (triple, code
model, features, the assembler's codegen level, LLVM's command-line options such as
-trap-unreachable), the O level, the object route, the llvmlite version and its LLVM
library (path, size and mtime: llvmlite pins the LLVM it is built with, a rebuilt library
changes the file), the bytes of `codegen.py` itself (the worker's code: any change to how a
module is compiled is a miss), and the module text. Only successful compilations are
stored; a failure is LLVM's answer at that moment (an abort, a timeout), rerun next time.

On disk: `ROOT/ab/<62 hex digits>`, one file per result, `CacheEntry` (magic, the sha256 of
the payload, the zlib-compressed `CachedResult`). Writes go to a temporary file in ROOT and
are renamed into place (`os.replace`, atomic on one file system), so processes running
side by side (`--jobs N`, cluster workers on one machine) never read half an entry; two
writers of one key write the same bytes. A file that does not parse, or whose payload
does not match its checksum (a truncated or damaged entry), is a miss and is removed.

Bounded in size: a hit touches the entry's mtime; when a process has written an eighth of
the cap since it last looked (and at its first write), it sums the entries and, above the
cap, removes the oldest by mtime until the cache is at 80% of it (LRU by mtime, good enough
for a batch cache; a concurrent trim only finds files already gone).

Where: `$LLILC_EH_LLVM_CACHE` names the folder (`off` or `0` disables the cache), default
`$LLILC_EH_CACHE/llvm` (`~/.cache/llilc-eh/llvm`); `$LLILC_EH_LLVM_CACHE_MB` the cap
(default 2048 MB). `from_environment()` is what the command line uses (`--no-cache` sets
the variable to `off` for the run and the processes it starts, `disabled()`); a
`CodegenPool` without a cache (the library default) always runs LLVM.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from construct import Bytes, Const, ConstructError, GreedyBytes, Int8ul, Int32ul, PascalString, Prefixed, Struct

ENV_LOCATION = "LLILC_EH_LLVM_CACHE"
ENV_LIMIT_MB = "LLILC_EH_LLVM_CACHE_MB"
DISABLED = ("off", "0", "no", "false")
DEFAULT_LIMIT = 2048 << 20
TRIM_TO = 0.8                  # of the cap, after a trim
ENTRY_MAGIC = b"LLEHLLC1"      # the entry format; part of the key too
COMPRESSION = 1                # zlib level: the assembly text shrinks ~5x already

# One cache file.
CacheEntry = Struct(
    "magic" / Const(ENTRY_MAGIC),
    "checksum" / Bytes(32),                     # sha256 of payload
    "payload" / Prefixed(Int32ul, GreedyBytes),  # zlib(CachedResult)
)

# What a worker returned for one module (`CodegenResult` without the timings: a hit took no
# LLVM time).
CachedResult = Struct(
    "opt" / Int8ul,
    "route" / PascalString(Int8ul, "ascii"),
    "obj" / Prefixed(Int32ul, GreedyBytes),
    "asm" / PascalString(Int32ul, "utf8"),
    "diagnostics" / PascalString(Int32ul, "utf8"),
)


@dataclass(frozen=True)
class Cached:
    """One stored result."""

    obj: bytes
    asm: str
    opt: int
    route: str
    diagnostics: str


@cache
def _llvm_identity() -> str:
    """llvmlite's version and its LLVM library file, found without importing llvmlite (a
    cache hit must not cost LLVM's load)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        llvmlite_version = version("llvmlite")
    except PackageNotFoundError:
        llvmlite_version = "?"
    spec = importlib.util.find_spec("llvmlite")
    library = "?"
    if spec is not None and spec.submodule_search_locations:
        binding = Path(next(iter(spec.submodule_search_locations))) / "binding"
        for candidate in sorted(binding.glob("libllvmlite*")):
            st = candidate.stat()
            library = f"{candidate}:{st.st_size}:{st.st_mtime_ns}"
            break
    return f"llvmlite {llvmlite_version}; {library}"


@cache
def _codegen_digest() -> str:
    return hashlib.sha256(Path(__file__).with_name("codegen.py").read_bytes()).hexdigest()


def key(ir: str, settings: Sequence[str]) -> str:
    """The hex sha256 naming a module's result under the worker settings `settings` (the
    pool's target, options, O level and route, as strings)."""
    h = hashlib.sha256()
    for part in (ENTRY_MAGIC.decode(), _llvm_identity(), _codegen_digest(), *settings, ir):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class LlvmCache:
    """A folder of results (module docstring); `get` and `put` never raise for a bad file
    or a full disk: the cache is an optimisation, a failure costs a rerun."""

    def __init__(self, root: str | os.PathLike, limit: int = DEFAULT_LIMIT):
        self.root = Path(root)
        self.limit = limit
        self.hits = self.misses = self.stores = self.damaged = 0
        self._written_since_trim: int | None = None    # None: not trimmed yet in this process

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def get(self, digest: str) -> Cached | None:
        path = self.path(digest)
        try:
            data = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            entry = CacheEntry.parse(data)
            if hashlib.sha256(entry.payload).digest() != entry.checksum:
                raise ValueError("checksum")
            r = CachedResult.parse(zlib.decompress(entry.payload))
            result = Cached(bytes(r.obj), r.asm, r.opt, r.route, r.diagnostics)
        except (ConstructError, ValueError, zlib.error, UnicodeDecodeError):
            self.damaged += 1
            self.misses += 1
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)          # recently used: the trim removes the oldest first
        self.hits += 1
        return result

    def put(self, digest: str, result: Cached) -> None:
        try:
            payload = zlib.compress(CachedResult.build(dict(
                opt=result.opt, route=result.route, obj=result.obj, asm=result.asm,
                diagnostics=result.diagnostics)), COMPRESSION)
            data = CacheEntry.build(dict(checksum=hashlib.sha256(payload).digest(), payload=payload))
        except (ConstructError, UnicodeEncodeError, ValueError):
            return                  # not storable (e.g. lone surrogates in the text): not cached
        path = self.path(digest)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return
        self.stores += 1
        if self._written_since_trim is None or self._written_since_trim + len(data) > self.limit // 8:
            self.trim()
        else:
            self._written_since_trim += len(data)

    def entries(self) -> Iterator[os.DirEntry]:
        try:
            shards = list(os.scandir(self.root))
        except OSError:
            return
        for shard in shards:
            if len(shard.name) == 2 and shard.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    yield from (e for e in os.scandir(shard.path) if e.is_file(follow_symlinks=False))

    def size(self) -> tuple[int, int]:
        """(entries, bytes)."""
        n = total = 0
        for e in self.entries():
            with contextlib.suppress(OSError):
                total += e.stat().st_size
                n += 1
        return n, total

    def trim(self) -> int:
        """Remove the least recently used entries while the cache is above its cap; returns
        how many were removed."""
        self._written_since_trim = 0
        found = []
        for e in self.entries():
            with contextlib.suppress(OSError):
                st = e.stat()
                found.append((st.st_mtime_ns, e.path, st.st_size))
        total = sum(size for _, _, size in found)
        if total <= self.limit:
            return 0
        removed = 0
        for _, path, size in sorted(found):
            if total <= self.limit * TRIM_TO:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
            total -= size
        return removed


def from_environment() -> LlvmCache | None:
    """The cache the command line uses: `$LLILC_EH_LLVM_CACHE` (a folder, or off), default
    `$LLILC_EH_CACHE/llvm`."""
    where = os.environ.get(ENV_LOCATION)
    if where is not None and where.strip().lower() in DISABLED + ("",):
        return None
    if where is None:
        from ..assembly.corpus import cache_root
        where = cache_root() / "llvm"
    limit = DEFAULT_LIMIT
    with contextlib.suppress(ValueError):
        limit = int(float(os.environ.get(ENV_LIMIT_MB, "")) * (1 << 20))
    return LlvmCache(where, limit)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """`--no-cache`: no cache in this process and the processes it starts while inside."""
    before = os.environ.get(ENV_LOCATION)
    os.environ[ENV_LOCATION] = "off"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_LOCATION, None)
        else:
            os.environ[ENV_LOCATION] = before
