"""Assembly resolution: which file an AssemblyRef names, by identity, within one framework.

A runtime binds a reference by the assembly's *identity* -- name, version, culture, public
key token (ECMA-335 II.22.5 AssemblyRef, II.22.2 Assembly) -- and it binds every reference of
a process within the one framework it runs (a .NET Core shared folder, or a .NET Framework /
Mono installation with its GAC). We do the same, so that a type means what the runtime that
can load the assembly would make of it:

* Places, in order: *beside* the compiled assembly -- the folder the user named, not the
  symlink-resolved one (a library folder of symlinks into a GAC is the layout of Mono and of
  .NET Framework installations) --, then every `--reference` folder (a flat folder or a GAC
  root), then the places of the framework chosen for the compiled assembly.
* A place holds `NAME.dll` / `NAME.exe` (flat) and, for a GAC, `NAME/VERSION_CULTURE_TOKEN/NAME.dll`
  (Mono's layout, `4.0.0.0__b77a5c561934e089`; .NET Framework 4's GAC_MSIL writes
  `v4.0_4.0.0.0__b77a5c561934e089`; the exact version first, then newer ones). File names
  match in any case, as runtimes match simple names.
* A file stands for a reference when its identity *satisfies* it (`mismatch`): same name and
  culture; the same public key token when the reference is strong-named (not for a
  retargetable reference, II.23.1.2); a version at least the referenced one (both runtimes
  bind a framework reference to their newer version; nobody binds to an older one).
* Frameworks (`installed_frameworks`): .NET Core 3.1.23, the corpus's shared folder (the runtime
  whose layouts we model); Mono, the machine's installation (`<prefix>/lib/mono`: its GAC, `4.5`
  and `4.5/Facades`) when there is one. Which one an assembly gets is decided by the JIT-EE
  (`JitEE.framework`), which can look types up: see docs/decisions.md, "Assembly resolution".

Nothing is cached here but what a file says about itself: `Binder` keeps each file's identity
(and its opened `Assembly`, for the JIT-EE to reuse) by real path, so a GAC file reached
through two symlinks is one assembly.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import LlilcEhError
from .loader import Assembly
from .names import TokenKind

__all__ = ["Identity", "Place", "Framework", "Binding", "Binder", "key_token", "assembly_identity",
           "reference_identity", "mismatch", "netcore_framework", "mono_framework", "installed_frameworks",
           "search_path_framework", "reference_place"]

_ASSEMBLY = 0x20
_AF_PUBLIC_KEY, _AF_RETARGETABLE = 0x0001, 0x0100      # AssemblyFlags (II.23.1.2)


@dataclass(frozen=True)
class Identity:
    """An assembly's identity as a reference or a definition states it."""

    name: str
    version: tuple[int, int, int, int] = (0, 0, 0, 0)
    culture: str = ""                  # "" is neutral
    token: bytes = b""                 # public key token (8 bytes); b"": none given
    retargetable: bool = False

    def __str__(self) -> str:
        version = ".".join(str(v) for v in self.version)
        text = (f"{self.name}, Version={version}, Culture={self.culture or 'neutral'}, "
                f"PublicKeyToken={self.token.hex() or 'null'}")
        return text + (", Retargetable=Yes" if self.retargetable else "")


def key_token(public_key: bytes) -> bytes:
    """The public key token of a full public key: the last 8 bytes of its SHA-1, reversed
    (II.6.3; the 16-byte ECMA key gives b77a5c561934e089)."""
    return hashlib.sha1(public_key).digest()[-8:][::-1]


def _identity(names, row, is_reference: bool) -> Identity:
    key = names.blob(row.PublicKey_BlobIndex) if row.PublicKey_BlobIndex else b""
    flags = row.Flags
    if key and (not is_reference or flags & _AF_PUBLIC_KEY):
        key = key_token(key)          # a definition always carries the full key; a reference may
    culture = names.string(row.Culture_StringIndex) if row.Culture_StringIndex else ""
    if culture.lower() == "neutral":
        culture = ""
    return Identity(names.string(row.Name_StringIndex),
                    (row.MajorVersion, row.MinorVersion, row.BuildNumber, row.RevisionNumber),
                    culture, key, bool(is_reference and flags & _AF_RETARGETABLE))


def assembly_identity(asm: Assembly) -> Identity | None:
    """The identity an assembly's manifest (its Assembly row) declares; None for a module
    without a manifest."""
    names = asm.names
    if not names.row_count(_ASSEMBLY):
        return None
    return _identity(names, names._row((_ASSEMBLY << 24) | 1), False)


def reference_identity(names, token: int) -> Identity:
    """The identity an AssemblyRef token asks for."""
    if token >> 24 != TokenKind.ASSEMBLY_REF:
        raise ValueError(f"0x{token:08X} is not an AssemblyRef token")
    return _identity(names, names._row(token), True)


def mismatch(ref: Identity, found: Identity) -> str | None:
    """Why an assembly whose identity is `found` cannot stand for the reference `ref`, or
    None when it can (the module docstring gives the rule)."""
    if found.name.casefold() != ref.name.casefold():
        return f"it is {found.name}"
    if found.culture.casefold() != ref.culture.casefold():
        return f"culture {found.culture or 'neutral'}, not {ref.culture or 'neutral'}"
    if ref.retargetable:
        return None
    if ref.token and found.token != ref.token:
        return f"public key token {found.token.hex() or 'null'}, not {ref.token.hex()}"
    if found.version < ref.version:
        return (f"version {'.'.join(map(str, found.version))}, older than the "
                f"{'.'.join(map(str, ref.version))} referenced")
    return None


# ---------------------------------------------------------------------------------- places

@dataclass(frozen=True)
class Place:
    """One folder references are looked up in."""

    label: str                 # how a message names it: "beside App.dll", "--reference /libs", ...
    folder: Path               # as named (absolute, symlinks kept)
    flat: bool = True          # NAME.dll / NAME.exe
    gac: bool = False          # NAME/VERSION_CULTURE_TOKEN/NAME.dll

    def __str__(self) -> str:
        return f"{self.label} ({self.folder})"

    def candidates(self, ref: Identity) -> list[Path]:
        """The files that could hold `ref`, in the order a runtime would try them."""
        out = []
        if self.flat:
            out += [self.folder / (ref.name + ext) for ext in (".dll", ".exe")]
        if self.gac:
            versions = self.folder / ref.name
            entries = []
            try:
                children = list(versions.iterdir()) if versions.is_dir() else []
            except OSError:
                children = []
            for child in children:
                name = child.name
                if name.startswith("v") and "_" in name:
                    name = name.split("_", 1)[1]        # .NET Framework 4's GAC_MSIL: v4.0_VERSION__TOKEN
                version, _, rest = name.partition("_")
                try:
                    parsed = tuple(int(p) for p in version.split("."))
                except ValueError:
                    continue
                # The exact version first, then newer ones oldest first, then the rest.
                entries.append(((parsed != ref.version, parsed < ref.version, parsed, rest), child))
            for _, child in sorted(entries):
                out += [child / (ref.name + ext) for ext in (".dll", ".exe")]
        return out


def reference_place(folder: str | os.PathLike) -> Place:
    """A `--reference` folder: flat and GAC layouts both probed."""
    path = Path(os.path.abspath(folder))
    return Place(f"--reference {folder}", path, flat=True, gac=True)


@dataclass(frozen=True)
class Framework:
    """A set of places one runtime binds framework references in."""

    name: str                  # netcore | mono | search-path
    label: str                 # ".NET Core 3.1.23 (corpus)", "Mono (/usr/lib/mono)"
    places: tuple[Place, ...]

    def __str__(self) -> str:
        return self.label

    def holds(self, path: Path) -> bool:
        """Whether `path` (as named, or its real file) lies in one of the framework's folders."""
        paths = {Path(os.path.abspath(path)), Path(os.path.realpath(path))}
        for place in self.places:
            roots = {place.folder, Path(os.path.realpath(place.folder))}
            if any(root in p.parents for p in paths for root in roots):
                return True
        return False


def netcore_framework() -> Framework | None:
    """.NET Core 3.1.23: the corpus's Microsoft.NETCore.App folder, when it has been fetched."""
    try:
        from .corpus import Corpus
        corpus = Corpus()
        folder = corpus.framework_dir
        version = folder.name
    except (OSError, KeyError, ValueError):
        return None
    if not folder.is_dir():
        return None
    return Framework("netcore", f".NET Core {version}", (Place(f".NET Core {version}", folder),))


def _mono_root() -> Path | None:
    """`<prefix>/lib/mono` of the `mono` on PATH (its real file), else /usr/lib/mono."""
    candidates = []
    exe = shutil.which("mono")
    if exe:
        candidates.append(Path(os.path.realpath(exe)).parent.parent / "lib" / "mono")
    candidates.append(Path("/usr/lib/mono"))
    for root in candidates:
        if (root / "4.5" / "mscorlib.dll").is_file():
            return root
    return None


def mono_framework() -> Framework | None:
    """The machine's Mono: where the Mono runtime itself finds a .NET Framework assembly's
    references -- its GAC, then its 4.5 profile (mscorlib lives there, not in the GAC) and
    the profile's facades (netstandard, System.Runtime, ...)."""
    root = _mono_root()
    if root is None:
        return None
    places = (Place("Mono GAC", root / "gac", flat=False, gac=True),
              Place("Mono 4.5", root / "4.5"),
              Place("Mono 4.5 facades", root / "4.5" / "Facades"))
    return Framework("mono", f"Mono ({root})", places)


def installed_frameworks() -> tuple[Framework, ...]:
    """The frameworks of this machine, .NET Core first (the runtime whose layouts we model)."""
    return tuple(f for f in (netcore_framework(), mono_framework()) if f is not None)


def search_path_framework(folders: Iterable[str | os.PathLike]) -> Framework:
    """An explicit search path instead of the installed frameworks (tests, embedders)."""
    places = tuple(Place("search path", Path(os.path.abspath(d))) for d in folders)
    return Framework("search-path", "the search path", places)


# ---------------------------------------------------------------------------------- binding

@dataclass(frozen=True)
class Binding:
    """What binding one reference gave: the file (None: none), and every place tried with what
    was found there when it did not fit."""

    ref: Identity
    path: Path | None
    tried: tuple[str, ...]
    rejected: tuple[str, ...] = ()       # "<file>: <why it does not fit>"


# Files opened by any Binder of this process: (real path, path as named, size, mtime) -> what
# `Binder.open` returns, most recently used last, at most `_OPENED_LIMIT`. Why: a batch validates file after
# file, and each file's JIT-EE binds its references afresh -- every file of the framework
# opened CoreLib and System.Runtime again (dnfile's parse) and read their metadata rows again
# (MetadataNames caches rows per Assembly); an Assembly says only what its bytes say, so one
# opened file serves every Binder as long as it is the same file.
_OPENED: dict[tuple[str, str, int, int], tuple] = {}
_OPENED_LIMIT = 24


def _open_shared(key: str, path: Path) -> tuple[Identity | None, Assembly | None, str | None]:
    try:
        st = os.stat(key)
        stamp = (key, str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None
    hit = _OPENED.pop(stamp, None) if stamp is not None else None
    if hit is None:
        try:
            asm = Assembly(path)
            ident = assembly_identity(asm)
            hit = (ident, asm, None if ident is not None else "a module without an assembly manifest")
        except LlilcEhError as e:
            hit = (None, None, f"unreadable: {e.reason}")
        except Exception as e:  # noqa: BLE001 - a damaged file on disk is a reason, not a crash
            hit = (None, None, f"unreadable: {type(e).__name__}: {e}")
    if stamp is not None:
        _OPENED[stamp] = hit
        while len(_OPENED) > _OPENED_LIMIT:
            del _OPENED[next(iter(_OPENED))]
    return hit


@dataclass
class Binder:
    """Binds references of one compiled assembly: beside it, then `references`, then a
    framework's places."""

    root: Path                                      # the compiled assembly, as named
    references: tuple[Place, ...] = ()
    _files: dict[str, tuple[Identity | None, Assembly | None, str | None]] = field(default_factory=dict)
    _listings: dict[Path, dict[str, str]] = field(default_factory=dict)

    @property
    def beside(self) -> Place:
        folder = Path(os.path.abspath(self.root)).parent
        return Place(f"beside {self.root.name}", folder)

    def places(self, framework: Framework | None) -> tuple[Place, ...]:
        return (self.beside, *self.references, *(framework.places if framework else ()))

    def open(self, path: Path) -> tuple[Identity | None, Assembly | None, str | None]:
        """(identity, assembly, why unusable) of a file, read once per real file (and shared
        by every Binder of the process while the file is unchanged: `_OPENED`)."""
        key = os.path.realpath(path)
        hit = self._files.get(key)
        if hit is None:
            hit = self._files[key] = _open_shared(key, path)
        return hit

    def bind(self, ref: Identity, framework: Framework | None) -> Binding:
        tried, rejected = [], []
        for place in self.places(framework):
            tried.append(str(place))
            for path in place.candidates(ref):
                if not path.is_file():
                    path = self._other_case(path)
                if path is None or not path.is_file():   # a regular file (or a symlink to one): never a FIFO
                    continue
                ident, asm, why = self.open(path)
                if why is None:
                    why = mismatch(ref, ident)
                if why is None:
                    return Binding(ref, path, tuple(tried), tuple(rejected))
                rejected.append(f"{path}: {why}")
        return Binding(ref, None, tuple(tried), tuple(rejected))

    def _other_case(self, path: Path) -> Path | None:
        """`path` spelt in another case in its folder (runtimes match simple names ignoring
        case; Linux file names do not), or None."""
        listing = self._listings.get(path.parent)
        if listing is None:
            try:
                names = os.listdir(path.parent)
            except OSError:
                names = []
            listing = self._listings[path.parent] = {}
            for name in sorted(names):
                listing.setdefault(name.casefold(), name)
        name = listing.get(path.name.casefold())
        return path.parent / name if name is not None else None

    def assembly(self, path: Path) -> Assembly:
        """The opened assembly of a bound file."""
        return self.open(path)[1]
