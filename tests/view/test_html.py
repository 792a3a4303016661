"""HTML pages in a real browser: Debian's headless Chromium driven by Playwright (no browser
download: `executable_path=/usr/bin/chromium`, installed by tools/bootstrap --debs).

Each page must load from the file system alone (every request it makes is a file: URL or
inline data), without a console error or an uncaught exception, and its cross-links must
work: selecting a clause lights up exactly the instructions its try covers, its handler's
code, its IL clause's regions and its lane in the picture; the index sorts and links to the
method pages. Screenshots go to the test's tmp folder.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.cli import DEFAULT_METHOD, sample_path

from playwright import sync_api
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ZIPFILE = Corpus().framework_dir / "System.IO.Compression.ZipFile.dll"
CORELIB = Corpus().framework_dir / "System.Private.CoreLib.dll"


def llilc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    out = {"sample": d / "sample.html", "wait": d / "wait.html", "index": d / "run" / "index.html", "dir": d}
    assert llilc("translate", "--html", str(out["sample"])).returncode == 0
    r = llilc("translate", str(CORELIB), "--method", "WaitAllBlockingCore", "--html", str(out["wait"]))
    assert r.returncode == 0, r.stderr
    r = llilc("validate", str(sample_path()), str(ZIPFILE), "--translate", "-q", "--html", str(d / "run"))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).is_file(), "tools/bootstrap --debs installs Debian's chromium"
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


class Loaded:
    def __init__(self, browser, path: Path):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors, self.requests = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())

    def clean(self) -> None:
        assert self.errors == []
        assert all(u.startswith(("file:", "data:")) for u in self.requests), self.requests


def test_method_page_cross_links(browser, pages):
    page = Loaded(browser, pages["sample"])
    page.clean()
    p = page.page
    asm = Assembly(sample_path())
    il = asm.body(asm.find_method(DEFAULT_METHOD).rid).clauses
    rows = p.locator("tr.clause")
    assert rows.count() == 5                     # the default method's table (translate's view)
    for k in range(rows.count()):
        p.evaluate(f"select({k})")
        row = p.locator(f"#clause-{k}")
        try_text, handler_text = row.locator("td").nth(2).inner_text(), row.locator("td").nth(3).inner_text()
        t0, t1 = (int(x, 16) for x in re.findall(r"0x[0-9a-f]+", try_text))
        h0, h1 = (int(x, 16) for x in re.findall(r"0x[0-9a-f]+", handler_text))
        # every instruction lit as "try" overlaps the try range, and each overlapping one is lit
        lit = [int(i, 16) for i in p.eval_on_selector_all("#code .hl-try", "es => es.map(e => e.id.slice(5))")]
        addrs = p.eval_on_selector_all("#code span.line[id]", "es => es.map(e => [e.id.slice(5), e.textContent])")
        starts = [int(a, 16) for a, _ in addrs]
        ends = starts[1:] + [10 ** 9]
        want = [s for s, e in zip(starts, ends) if s < t1 and t0 < e]
        assert lit == want and lit, (k, lit, want)
        handler = [int(i, 16) for i in p.eval_on_selector_all("#code span.line.hl-handler", "es => es.map(e => e.id.slice(5))")]
        assert handler and min(handler) == h0 and max(handler) < h1
        assert p.locator("#layout rect.hlrect").count() == 1          # its lane in the picture
        ilk = int(row.get_attribute("data-il"))
        il_lit = [int(i[3:], 16) for i in p.eval_on_selector_all("#il .hl-il-try", "es => es.map(e => e.id)")]
        assert il_lit and min(il_lit) == il[ilk].try_start and max(il_lit) < il[ilk].try_end
        assert p.evaluate("location.hash") == f"#clause-{k}"
    # the negative control: nothing lit once cleared, and a page opened at #clause-3 selects #3
    p.evaluate("clear()")
    assert p.locator(".hl-try").count() == 0
    again = Loaded(browser, pages["sample"])
    again.page.goto(pages["sample"].as_uri() + "#clause-3")
    again.page.reload()
    assert again.page.locator("tr.sel").get_attribute("id") == "clause-3"
    p.screenshot(path=str(pages["dir"] / "sample.png"))


def test_method_page_with_ryujit(browser, pages):
    page = Loaded(browser, pages["wait"])
    page.clean()
    p = page.page
    versus = p.locator("#versus").inner_text()
    assert re.search(r"clauses\s+10\s+1", versus) and "funclets" in versus
    assert p.locator("#ryujit-code .line").count() > 50
    p.screenshot(path=str(pages["dir"] / "wait.png"), full_page=True)


def test_index_sorts_and_links(browser, pages):
    page = Loaded(browser, pages["index"])
    page.clean()
    p = page.page
    assert p.locator("svg.plot").count() == 3
    rows = p.locator("#methods tbody tr")
    assert rows.count() == 76                     # 67 of the sample + 9 of ZipFile
    header = p.locator("#methods th", has_text="ours clauses")
    col = p.eval_on_selector_all("#methods th", "hs => hs.map(h => h.textContent)").index("ours clauses")
    values = lambda: [int(v) for v in p.eval_on_selector_all(  # noqa: E731
        "#methods tbody tr", f"rs => rs.map(r => r.cells[{col}].textContent)")]
    header.click()
    assert values() == sorted(values())
    header.click()
    assert values() == sorted(values(), reverse=True) and values() != sorted(values())
    hrefs = p.eval_on_selector_all("#methods a", "as => as.map(a => a.getAttribute('href'))")
    assert len(hrefs) == 76
    for href in hrefs:
        assert (pages["index"].parent / href).is_file(), href
    p.screenshot(path=str(pages["dir"] / "index.png"), full_page=False)
    p.locator("#methods a").first.click()
    p.wait_for_load_state()
    assert p.url.endswith(".html") and p.locator("tr.clause").count() >= 1 and page.errors == []
