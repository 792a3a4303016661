"""The real corpus: assemblies from pinned PyPI wheels, fetched into a cache outside git.

`corpus/packages.tsv` pins each wheel by version and sha256; `corpus/manifest.tsv` pins
every assembly inside them by sha256. `tools/fetch_corpus.py` downloads the wheels with
pip, unpacks them whole into the cache (the dotnetcore2 wheel is also the CoreCLR 3.1
runtime we run test programs on) and verifies every hash. Tests and tools find the files
through `Corpus`.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO / "corpus"


def cache_root() -> Path:
    """Where large downloaded things live: $LLILC_EH_CACHE, else ~/.cache/llilc-eh."""
    env = os.environ.get("LLILC_EH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "llilc-eh"


def _read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        lines = [line for line in f if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    wheel: str
    sha256: str

    @property
    def directory(self) -> Path:
        return cache_root() / "corpus" / f"{self.name}-{self.version}"


@dataclass(frozen=True)
class CorpusFile:
    package: Package
    path: str
    sha256: str
    size: int

    @property
    def location(self) -> Path:
        return self.package.directory / self.path

    @property
    def name(self) -> str:
        return Path(self.path).name


class Corpus:
    """The pinned corpus as the manifest describes it."""

    def __init__(self, corpus_dir: Path = CORPUS_DIR):
        self.packages = {row["package"]: Package(row["package"], row["version"], row["wheel"], row["sha256"])
                         for row in _read_tsv(corpus_dir / "packages.tsv")}
        self.files = [CorpusFile(self.packages[row["package"]], row["path"], row["sha256"], int(row["size"]))
                      for row in _read_tsv(corpus_dir / "manifest.tsv")]

    def of(self, package: str) -> list[CorpusFile]:
        return [f for f in self.files if f.package.name == package]

    def find(self, name: str) -> CorpusFile:
        """A corpus assembly by file name, e.g. 'System.Private.CoreLib.dll'."""
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"{name} is not in corpus/manifest.tsv")

    def locate(self, name: str) -> Path:
        """What a tool's argument names: a file given by its path, else the corpus assembly of
        that file name (`find`)."""
        path = Path(name)
        return path if path.is_file() else self.find(name).location

    def missing(self) -> list[CorpusFile]:
        return [f for f in self.files if not f.location.is_file()]

    @property
    def dotnet(self) -> Path:
        """The CoreCLR 3.1 host shipped in the dotnetcore2 wheel."""
        return self.packages["dotnetcore2"].directory / "dotnetcore2" / "bin" / "dotnet"

    @property
    def framework_dir(self) -> Path:
        return self.dotnet.parent / "shared" / "Microsoft.NETCore.App" / self.packages["dotnetcore2"].version

    def fetch(self, log=print) -> None:
        """Download, unpack and verify every package whose files are not all present."""
        for pkg in self.packages.values():
            files = self.of(pkg.name)
            if all(f.location.is_file() for f in files) and self._verified(pkg):
                continue
            self._fetch_package(pkg, log)
        self.verify()

    def verify(self) -> None:
        bad = [f for f in self.files if not f.location.is_file() or sha256_of(f.location) != f.sha256]
        if bad:
            names = ", ".join(f.path for f in bad[:5])
            raise RuntimeError(f"{len(bad)} corpus file(s) missing or with a wrong sha256: {names}")
        for pkg in self.packages.values():
            (pkg.directory / ".verified").write_text(pkg.sha256 + "\n")

    @staticmethod
    def _verified(pkg: Package) -> bool:
        stamp = pkg.directory / ".verified"
        return stamp.is_file() and stamp.read_text().strip() == pkg.sha256

    @staticmethod
    def _fetch_package(pkg: Package, log) -> None:
        log(f"fetching {pkg.name}=={pkg.version} ...")
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                            "--only-binary=:all:", "--platform", "manylinux1_x86_64",
                            "--python-version", "3.11", "-d", tmp, f"{pkg.name}=={pkg.version}"],
                           check=True)
            wheel = Path(tmp) / pkg.wheel
            if not wheel.is_file():
                raise RuntimeError(f"pip did not produce {pkg.wheel}: got {os.listdir(tmp)}")
            digest = sha256_of(wheel)
            if digest != pkg.sha256:
                raise RuntimeError(f"{pkg.wheel}: sha256 {digest} != pinned {pkg.sha256}")
            if pkg.directory.exists():
                shutil.rmtree(pkg.directory)
            pkg.directory.mkdir(parents=True)
            with zipfile.ZipFile(wheel) as z:
                for info in z.infolist():
                    z.extract(info, pkg.directory)
                    mode = (info.external_attr >> 16) & 0o777
                    if mode:
                        os.chmod(pkg.directory / info.filename, mode)
        log(f"  unpacked into {pkg.directory}")
