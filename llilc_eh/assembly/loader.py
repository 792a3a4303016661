"""Open an assembly lazily and find its methods and their bodies.

dnfile parses CoreLib's metadata eagerly in ~3.3 s but lazily in ~0.01 s, and a corpus run
touches only the methods with EH, so everything here is lazy: the PE is opened with
`fast_load` and `clr_lazy_load`, rows are read on demand through their raw struct fields
(touching a row's *list* attributes would trigger dnfile's full load), and names are
computed by `MetadataNames` only for the methods someone asks about.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import stat
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import dnfile
import pefile
from construct import ConstructError

from ..errors import AssemblyError
from .body import MethodBody, parse_body
from .names import MetadataNames
from .structs import DosHeader, PeSignature

METHODDEF_TABLE = 0x06
COM_DESCRIPTOR = 14  # IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR

# MethodImplAttributes (II.23.1.11): CodeTypeMask values whose RVA points at IL, and
# Synchronized (the JIT wraps the body in a monitor enter / try-fault monitor exit).
CODE_TYPE_MASK = 0x0003
CODE_TYPE_IL = 0x0000
IMPL_SYNCHRONIZED = 0x0020


@dataclass(frozen=True)
class MethodRef:
    """A method found by name or token: enough to print it and to load its body."""

    token: int
    name: str        # Ns.Type::Name (nested types as Outer/Inner)
    signature: str   # the signature as ilasm would write it, for telling overloads apart

    @property
    def rid(self) -> int:
        return self.token & 0x00FFFFFF

    def __str__(self) -> str:
        return f"0x{self.token:08X} {self.signature}"


def read_image(path: Path) -> bytes:
    """A file's bytes once it is known to be a regular file that starts as a PE image: a FIFO
    or a device named x.dll would block or never end a whole read (opened non-blocking to
    ask), and a large file that is no image is refused after its first bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise AssemblyError(f"{path}: cannot read: {e.strerror}", kind="unreadable-file") from None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise AssemblyError(f"{path}: not a regular file", kind="unreadable-file")
            try:
                dos = DosHeader.parse(f.read(DosHeader.sizeof()))
                f.seek(dos.e_lfanew)
                PeSignature.parse(f.read(PeSignature.sizeof()))
            except ConstructError:
                raise AssemblyError(f"{path}: not a PE image (no MZ header or no PE signature where it "
                                    "points)", kind="bad-pe") from None
            f.seek(0)
            return f.read()
        except OSError as e:
            raise AssemblyError(f"{path}: cannot read: {e.strerror}", kind="unreadable-file") from None


class Assembly:
    """A .NET assembly on disk, opened lazily."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.data = data = read_image(self.path)
        with _dnfile_warnings() as warnings:
            # The dnfile call boundary: what its parsers raise on damaged input is not part of
            # its API (AssertionError, AttributeError on a half-built object, TypeError from an
            # abstract row class of a table whose rows it cannot size, ...), so anything they
            # raise is the file's damage, named by what was being read.
            try:
                pe = dnfile.dnPE(data=data, fast_load=True, clr_lazy_load=True)
                pe.parse_data_directories(directories=[COM_DESCRIPTOR])
            except (pefile.PEFormatError, dnfile.errors.dnFormatError, ValueError, IndexError, struct.error) as e:
                raise AssemblyError(f"{self.path}: not a readable PE image: {e}", kind="bad-pe") from None
            except Exception as e:  # noqa: BLE001 - see above
                raise AssemblyError(f"{self.path}: the CLR header or metadata (root, stream headers, #~ "
                                    f"table header) cannot be parsed: {type(e).__name__}: {e}"
                                    + (f" ({'; '.join(warnings)})" if warnings else ""),
                                    kind="bad-metadata") from None
        if pe.net is None or pe.net.mdtables is None or pe.net.mdtables.MethodDef is None and \
                pe.net.mdtables.TypeDef is None:
            detail = f" ({'; '.join(warnings)})" if warnings else ""
            raise AssemblyError(f"{self.path}: no CLR metadata (not a .NET assembly, or its CLR header "
                                f"is damaged){detail}", kind="not-a-clr-assembly")
        self.pe = pe
        self._sections = sorted((s.VirtualAddress, max(s.Misc_VirtualSize, s.SizeOfRawData),
                                 s.PointerToRawData, s.SizeOfRawData) for s in pe.sections)
        self._section_starts = [s[0] for s in self._sections]

    def __repr__(self) -> str:
        return f"Assembly({str(self.path)!r})"

    @cached_property
    def names(self) -> MetadataNames:
        return MetadataNames(self.pe)

    @property
    def method_count(self) -> int:
        table = self.pe.net.mdtables.MethodDef
        return len(table) if table is not None else 0

    def rva_to_offset(self, rva: int) -> int | None:
        """File offset of an RVA, or None when no section's raw data holds it -- in the file as
        it is: a truncated file's section header still claims the raw data that was cut off."""
        i = bisect.bisect_right(self._section_starts, rva) - 1
        if i < 0:
            return None
        va, vsize, raw, rawsize = self._sections[i]
        delta = rva - va
        if delta >= min(vsize, rawsize) if rawsize else True:
            return None
        return raw + delta if raw + delta < len(self.data) else None

    def _method_row(self, rid: int):
        """The raw MethodDef row, read by `MetadataNames` (not dnfile's lazy row object, whose
        struct lacks its columns when the row could not be parsed)."""
        table = self.pe.net.mdtables.MethodDef
        if table is None or not 1 <= rid <= len(table):
            raise AssemblyError(f"method token 0x{METHODDEF_TABLE << 24 | rid:08X} is past the MethodDef "
                                f"table ({self.method_count} rows)", kind="unresolved-token")
        return self.names.method_row(rid)

    def has_il(self, rid: int) -> bool:
        """Whether the method has an IL body (not abstract, extern, runtime or native)."""
        row = self._method_row(rid)
        return row.Rva != 0 and (row.ImplFlags & CODE_TYPE_MASK) == CODE_TYPE_IL

    def is_synchronized(self, rid: int) -> bool:
        """[MethodImpl(Synchronized)]: the JIT adds an EH clause of its own to release the lock."""
        return bool(self._method_row(rid).ImplFlags & IMPL_SYNCHRONIZED)

    def method(self, rid: int) -> MethodRef:
        token = METHODDEF_TABLE << 24 | rid
        return MethodRef(token, self.names.method_name(rid), self.names.method_text(rid))

    @cached_property
    def _methods_by_name(self) -> dict[str, list[int]]:
        """`Ns.Type::Name` -> MethodDef RIDs in table order; built once, on the first lookup by name."""
        index: dict[str, list[int]] = {}
        for rid in range(1, self.method_count + 1):
            index.setdefault(self.names.method_name(rid), []).append(rid)
        return index

    def body(self, rid: int) -> MethodBody:
        """Parse the IL body of MethodDef `rid`; AssemblyError if it has none or it is damaged."""
        row = self._method_row(rid)
        token = METHODDEF_TABLE << 24 | rid
        if not self.has_il(rid):
            raise AssemblyError("method has no IL body (abstract, extern, runtime or native code)",
                                method=f"0x{token:08X} {self.names.method_name(rid)}", kind="no-il-body")
        name = self.names.method_name(rid)
        offset = self.rva_to_offset(row.Rva)
        if offset is None:
            raise AssemblyError(f"body RVA 0x{row.Rva:X} is not inside any section",
                                method=f"0x{token:08X} {name}", kind="bad-method-rva")
        return parse_body(self.data, offset, token=token, name=name, rva=row.Rva)

    def methods_with_il(self):
        """RIDs of every method with an IL body, in table order."""
        return (rid for rid in range(1, self.method_count + 1) if self.has_il(rid))

    # -- lookup -----------------------------------------------------------------------------

    def find_method(self, query: str, *, index: int | None = None) -> MethodRef:
        """Find one method by `0x06xxxxxx`, `Ns.Type::Name`, `Ns.Outer/Inner::Name`, optionally
        followed by a parameter list `(int32, string)` to pick an overload, or by `index` among
        the overloads in table order. An ambiguous name lists the candidates in the error."""
        query = query.strip()
        if query.lower().startswith("0x"):
            try:
                token = int(query, 16)
            except ValueError:
                raise AssemblyError(f"bad token {query!r}", kind="bad-query") from None
            if token >> 24 != METHODDEF_TABLE:
                raise AssemblyError(f"token {query} is not a MethodDef token (0x06xxxxxx)", kind="bad-query")
            self._method_row(token & 0xFFFFFF)
            return self.method(token & 0xFFFFFF)
        params = None
        if "(" in query:
            query, _, rest = query.partition("(")
            params = _normalize_params(rest.rstrip().removesuffix(")"))
        candidates = self._methods_by_name.get(query.strip(), [])
        if not candidates:
            raise AssemblyError(f"no method named {query!r} in {self.path.name}", kind="method-not-found")
        found = [self.method(rid) for rid in candidates]
        if params is not None:
            found = [m for m in found if _normalize_params(self.names.method_params(m.rid)) == params]
            if not found:
                raise AssemblyError(f"no overload of {query!r} takes ({params}); candidates:\n  "
                                    + "\n  ".join(str(self.method(r)) for r in candidates),
                                    kind="method-not-found")
        if index is not None:
            if not 0 <= index < len(found):
                raise AssemblyError(f"overload index {index} out of range: {query!r} has {len(found)}",
                                    kind="method-not-found")
            return found[index]
        if len(found) > 1:
            raise AssemblyError(f"{query!r} is ambiguous: {len(found)} overloads; pick one by signature "
                                f"or --index:\n  " + "\n  ".join(f"[{i}] {m}" for i, m in enumerate(found)),
                                kind="ambiguous-method")
        return found[0]


def _normalize_params(text: str) -> str:
    """`(int32, string)` and `int32,string` compare equal: spaces and outer parentheses don't matter."""
    return text.strip().removeprefix("(").removesuffix(")").replace(" ", "")


@contextlib.contextmanager
def _dnfile_warnings():
    """Collect what dnfile logs while opening a file: it reports damage as log warnings, which
    belong in our error's reason, not on the user's terminal."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    def from_dnfile(record: logging.LogRecord) -> bool:
        # Some of dnfile's modules log through the root logger (`logging.warning`), which
        # also installs a stderr handler on first use: collect those, let others pass.
        if "dnfile" in Path(record.pathname).parts:
            messages.append(record.getMessage())
            return False
        return True

    logger, root = logging.getLogger("dnfile"), logging.getLogger()
    handler, propagate = Collect(logging.WARNING), logger.propagate
    quiet = logging.NullHandler()      # root has a handler: `logging.warning` skips basicConfig
    logger.addHandler(handler)
    logger.propagate = False
    root.addFilter(from_dnfile)
    root.addHandler(quiet)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        root.removeFilter(from_dnfile)
        root.removeHandler(quiet)
