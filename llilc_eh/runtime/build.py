"""Build the C alt JIT (altjit.c) with the machine's gcc and put it where the runtime looks.

Why built here and not shipped: the library embeds *this* machine's libpython (the
interpreter the venv runs on), so it is compiled against that interpreter's headers and
linked with an rpath to its libpython; nothing prebuilt is committed.

Where it goes: `<cache>/altjit/libllilc_eh_altjit-<digest>.so`, the digest covering the C
source, the compiler command and the Python it embeds -- a changed source gives a new file,
an unchanged one is not rebuilt (idempotent; `tools/bootstrap` calls `ensure_built`).

How the runtime finds it: CoreCLR 3.1 (src/vm/codeman.cpp, LoadAndInitializeJIT) replaces the
file name of libcoreclr.so's own path with COMPlus_AltJitName, so the name is looked up *in
the runtime folder* (an absolute path is appended to the folder and fails). `install_into_runtime`
therefore copies the built library into the runtime folder of the cache under a fixed name
(`ALTJIT_NAME`), replacing it only when the bytes differ.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ..assembly.corpus import cache_root

SOURCE = Path(__file__).with_name("altjit.c")
ALTJIT_NAME = "libllilc_eh_altjit.so"     # the file name in the runtime folder


class BuildError(RuntimeError):
    """gcc or the Python headers are missing, or the compile failed (message: gcc's output)."""


def _python_paths() -> tuple[str, str, str]:
    include = sysconfig.get_paths()["include"]
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if not ldlib.endswith(".so") or not (Path(libdir) / ldlib).exists():
        raise BuildError(f"this Python ({sys.executable}) has no shared libpython to embed "
                         f"(LDLIBRARY={ldlib!r} in {libdir!r}); build Python with --enable-shared")
    if not (Path(include) / "Python.h").is_file():
        raise BuildError(f"Python.h not found in {include}")
    return include, libdir, ldlib


def command(output: Path) -> list[str]:
    include, libdir, ldlib = _python_paths()
    lib = ldlib[3:-3] if ldlib.startswith("lib") else ldlib    # libpython3.11.so -> python3.11
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError("gcc not found on PATH (Debian: apt-get install gcc)")
    return [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
            f"-I{include}", str(SOURCE), "-o", str(output), f"-L{libdir}", f"-l{lib}",
            f"-Wl,-rpath,{libdir}", "-lpthread", "-ldl"]


def built_path() -> Path:
    """The library for the current source and interpreter (it may not exist yet)."""
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(" ".join(command(Path("OUT"))).encode())
    return cache_root() / "altjit" / f"libllilc_eh_altjit-{digest.hexdigest()[:16]}.so"


def ensure_built() -> Path:
    """Compile altjit.c unless the library for this source already exists; return its path."""
    out = built_path()
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        proc = subprocess.run(command(Path(tmp)), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise BuildError(f"gcc failed on {SOURCE} (exit {proc.returncode}):\n"
                             f"{(proc.stdout + proc.stderr).strip()}")
        os.replace(tmp, out)       # atomic: a concurrent build never leaves half a library
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def install_into_runtime(runtime_dir: Path, library: Path | None = None) -> Path:
    """Copy the built library into the runtime folder as ALTJIT_NAME (only if it differs)."""
    library = library if library is not None else ensure_built()
    target = Path(runtime_dir) / ALTJIT_NAME
    data = library.read_bytes()
    if not target.is_file() or target.read_bytes() != data:
        tmp = target.with_name(f".{ALTJIT_NAME}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return target


def main() -> int:
    """`python -m llilc_eh.runtime.build`: what tools/bootstrap runs."""
    try:
        path = ensure_built()
    except BuildError as e:
        print(f"llilc-eh: cannot build the alt JIT: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
