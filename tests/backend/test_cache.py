"""The LLVM result cache (`backend.cache`): a warm run does not start LLVM and gives the same
bytes; what changes the result misses; a damaged entry is a miss, never a crash.

Everything runs on the embedded sample's modules with a real LLVM worker and a cache in a
temporary folder (never the user's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llilc_eh.backend.cache import ENV_LOCATION, LlvmCache
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.cli import sample_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def modules(sample_readers) -> list[str]:
    return [reader.module for _, _, reader, _ in sample_readers]


def _compile_all(cache: LlvmCache, modules: list[str], opt: int = 2):
    with CodegenPool(1, cache=cache) as pool:
        results = pool.compile_many(modules, opt)
        return results, pool.starts


def test_warm_pool_starts_no_llvm_and_returns_the_same_bytes(tmp_path, modules):
    cold, cold_starts = _compile_all(LlvmCache(tmp_path), modules)
    assert cold_starts == 1 and not any(r.cached for r in cold)
    entries, size = LlvmCache(tmp_path).size()
    assert entries == len(set(modules)) and size > 0
    cache = LlvmCache(tmp_path)
    warm, warm_starts = _compile_all(cache, modules)
    assert warm_starts == 0                     # no LLVM process at all
    assert all(r.cached for r in warm) and cache.hits == len(modules) and cache.misses == 0
    for a, b in zip(cold, warm):
        assert (a.obj, a.asm, a.opt, a.route, a.diagnostics) == (b.obj, b.asm, b.opt, b.route, b.diagnostics)
        assert b.timings.worker == 0.0 and b.timings.cpu == 0.0


def test_changed_ir_or_opt_level_misses(tmp_path, modules):
    """Negative control: the key holds the text and the O level, so a changed module or
    another level runs LLVM again, and its result differs."""
    module = next(m for m in modules if "ret void" in m or "ret i32" in m)
    first, _ = _compile_all(LlvmCache(tmp_path), [module])
    changed = module + "\n; a comment LLVM ignores still changes the text\n"
    cache = LlvmCache(tmp_path)
    second, starts = _compile_all(cache, [changed])
    assert starts == 1 and not second[0].cached and cache.misses == 1
    cache = LlvmCache(tmp_path)
    at_o0, starts = _compile_all(cache, [module], opt=0)
    assert starts == 1 and not at_o0[0].cached
    assert at_o0[0].asm != first[0].asm
    again, starts = _compile_all(LlvmCache(tmp_path), [module])
    assert starts == 0 and again[0].cached and again[0].obj == first[0].obj


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_entry_is_a_miss_and_is_replaced(tmp_path, modules, damage):
    module = modules[0]
    first, _ = _compile_all(LlvmCache(tmp_path), [module])
    (entry,) = [Path(e.path) for e in LlvmCache(tmp_path).entries()]
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[: len(data) // 2], "empty": b"",
                       "flip": data[:-5] + bytes([data[-5] ^ 0x40]) + data[-4:],
                       "garbage": os.urandom(len(data))}[damage])
    cache = LlvmCache(tmp_path)
    again, starts = _compile_all(cache, [module])
    assert cache.damaged == 1 and starts == 1 and not again[0].cached
    assert again[0].obj == first[0].obj and again[0].asm == first[0].asm
    assert entry.read_bytes() == data            # rewritten whole


def test_trim_removes_the_least_recently_used(tmp_path, modules):
    cache = LlvmCache(tmp_path)
    _compile_all(cache, modules[:6])
    paths = sorted((Path(e.path) for e in cache.entries()), key=lambda p: p.stat().st_mtime_ns)
    assert len(paths) == 6
    now = time.time()
    for age, p in enumerate(reversed(paths)):   # paths[0] oldest by a clear margin
        os.utime(p, (now - 100 * age, now - 100 * age))
    sizes = [p.stat().st_size for p in paths]
    limited = LlvmCache(tmp_path, limit=sum(sizes) - 1)
    removed = limited.trim()
    assert removed >= 1 and not paths[0].exists() and paths[-1].exists()
    assert limited.size()[1] <= limited.limit * 0.8 + max(sizes)
    assert LlvmCache(tmp_path, limit=10 ** 9).trim() == 0      # under the cap: nothing goes


def _validate(tmp_path: Path, name: str, cache_dir: Path, *extra: str) -> bytes:
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, **{ENV_LOCATION: str(cache_dir)})
    proc = subprocess.run([sys.executable, "-m", "llilc_eh.cli", "validate", str(sample_path()), "--translate",
                           "--quiet", "--json", str(out), *extra], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return out.read_bytes()


def test_validate_translate_warm_report_is_byte_identical(tmp_path):
    cache_dir = tmp_path / "llvm"
    cold = _validate(tmp_path, "cold", cache_dir)
    entries = {e.path: e.stat().st_mtime_ns for e in LlvmCache(cache_dir).entries()}
    assert len(entries) == 67                    # the sample's EH methods, one module each
    time.sleep(0.01)
    warm = _validate(tmp_path, "warm", cache_dir)
    assert warm == cold
    after = {e.path: e.stat().st_mtime_ns for e in LlvmCache(cache_dir).entries()}
    assert set(after) == set(entries)            # nothing new was compiled ...
    assert all(after[p] > entries[p] for p in entries)   # ... and every entry was read (touched)
    # --no-cache: the same report, and the cache is neither read nor written
    bypass = _validate(tmp_path, "bypass", cache_dir, "--no-cache")
    assert bypass == cold
    assert {e.path: e.stat().st_mtime_ns for e in LlvmCache(cache_dir).entries()} == after
