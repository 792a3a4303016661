"""Raw method bodies straight from dnfile, for the IL-stage corpus tests only.

A stopgap until the assembly stage's `MethodBody` is available: it reads each MethodDef's
RVA from the raw table row (the first column, II.22.26) and the tiny/fat header (II.25.4)
just far enough to find the code bytes. No EH sections, no validation.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

import dnfile

CORELIB = ("corpus/dotnetcore2-3.1.23/dotnetcore2/bin/shared/Microsoft.NETCore.App/3.1.23/"
           "System.Private.CoreLib.dll")


def corelib_path() -> Path | None:
    from llilc_eh.assembly.corpus import cache_root
    path = cache_root() / CORELIB
    return path if path.is_file() else None


def method_bodies(path: Path | str) -> Iterator[tuple[int, bytes]]:
    """(MethodDef token, IL code bytes) for every method that has a body, in table order."""
    pe = dnfile.dnPE(str(path), fast_load=True, clr_lazy_load=True)
    pe.parse_data_directories()
    data = pe.__data__
    table = pe.net.mdtables.MethodDef
    for row in range(table.num_rows):
        (rva,) = struct.unpack_from("<I", data, table.file_offset + row * table.row_size)
        if not rva:
            continue  # abstract, extern, runtime-implemented
        at = pe.get_offset_from_rva(rva)
        if data[at] & 0x3 == 0x2:   # tiny header: size in the upper 6 bits
            size, start = data[at] >> 2, at + 1
        else:                       # fat header: 4-byte units in the top nibble
            (flags,) = struct.unpack_from("<H", data, at)
            (size,) = struct.unpack_from("<I", data, at + 4)
            start = at + (flags >> 12) * 4
        yield 0x06000001 + row, bytes(data[start:start + size])
