"""The documentation site: built offline from the code, rendered by a real browser.

* ``mkdocs build --strict`` succeeds, and no page references anything off the site.
* The claim pages follow ``spec.claims``: a changed statement or a failing proof changes
  the page; a generated kernel line that no longer matches its spec term stops the build.
* Every page, opened in Debian's headless Chromium (driven by Playwright, never with a
  downloaded browser), renders all of its math with the site's own KaTeX, requests nothing
  from any host but the local server, and logs no console error. A screenshot of the merge
  page is saved to ``.artifacts/merge.png``.

Prerequisites (``bash docs/setup_katex.sh``, which ``bash dev.sh test`` runs): the KaTeX
copy under ``docs/assets/katex/`` and ``/usr/bin/chromium``.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import json
import re
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / ".artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SETUP_HINT = "run `bash docs/setup_katex.sh` (as root it installs libjs-katex, fonts-katex and chromium)"


def build_site(site_dir: Path) -> Path:
    """``mkdocs build --strict`` into ``site_dir``, in this process (so monkeypatches apply)."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    if not (ROOT / "docs/assets/katex/katex.min.js").exists():
        pytest.fail(f"docs/assets/katex/ is missing: {SETUP_HINT}")
    build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site_dir), strict=True))
    return site_dir


def use_session_proofs(mp: pytest.MonkeyPatch, proved: dict) -> None:
    """Every claim's ``prove`` returns the session's result (conftest's ``proved``: one ``prove_all()`` per run,
    checked by tests/test_claims.py), so a build renders those results instead of proving every claim twice
    more (the hooks' ``_proofs()`` and the verification page's timing re-run: about a minute of CPU a build).
    The hooks still call each claim's ``prove`` and render what it returns; the pages' statuses, details and
    residuals are checked below, with a mutated claim too."""
    from spec import claims

    for cid, c in claims.REGISTRY.items():
        mp.setitem(claims.REGISTRY, cid, dataclasses.replace(c, prove=lambda r=proved[cid]: r))


@pytest.fixture(scope="module")
def site(tmp_path_factory, proved) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        use_session_proofs(mp, proved)
        return build_site(tmp_path_factory.mktemp("site"))


def pages(site_dir: Path) -> list[str]:
    """Every HTML page of the site, as a URL path."""
    return sorted("/" + p.relative_to(site_dir).as_posix().removesuffix("index.html")
                  for p in site_dir.rglob("*.html"))


def claim_section(html_text: str, cid: str) -> str:
    """The HTML of one claim's section on the merge page (from its heading to the next h3)."""
    start = html_text.index(f'id="{cid}"')
    end = html_text.find("<h3", start)
    return html_text[start:end if end != -1 else len(html_text)]


# ---------------------------------------------------------------------------------
# The build
# ---------------------------------------------------------------------------------
def test_site_is_self_contained(site):
    """No page links a script, stylesheet, font or image from another host (no CDN)."""
    offsite = re.compile(r'<(?:script|link|img|source|iframe)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)
    for path in pages(site):
        html_text = (site / path.lstrip("/") / ("" if path.endswith(".html") else "index.html")).read_text()
        assert not offsite.search(html_text), f"{path} loads something from the network: {offsite.search(html_text)[0]}"
    assert (site / "assets/katex/katex.min.js").exists() and list((site / "assets/katex/fonts").glob("*.woff2"))


def test_merge_page_shows_every_claim_with_its_status(site, proved):
    from spec import claims

    results = proved  # the session's one prove_all() run (conftest)
    merge = (site / "merge/index.html").read_text()
    assert claims.REGISTRY, "spec.claims.REGISTRY is empty"
    for cid, c in claims.REGISTRY.items():
        section = claim_section(merge, cid)
        status = "PROVED" if results[cid].proved else "FAILED"
        assert f'class="fp-{status.lower()}">{status}<' in section, f"{cid}: page does not show {status}"


def test_changing_a_claim_changes_the_page(site, proved, tmp_path, monkeypatch):
    """Mutate one claim in spec: a new statement and a proof that fails with a residual."""
    import sympy as sp

    from spec import claims

    use_session_proofs(monkeypatch, proved)  # the other claims: the session's results

    cid = "merge_associative" if "merge_associative" in claims.REGISTRY else next(iter(claims.REGISTRY))
    before = claim_section((site / "merge/index.html").read_text(), cid)
    statement = "MUTANT: the merge is associative except on Tuesdays"
    residual = sp.Symbol("tuesday") - 1

    def failing_proof():
        return claims.Result(cid, False, "mutated by tests/test_docs.py", (("mutant case", residual),))

    mutant = dataclasses.replace(claims.REGISTRY[cid], statement=statement, prove=failing_proof)
    monkeypatch.setitem(claims.REGISTRY, cid, mutant)
    after = claim_section((build_site(tmp_path / "site") / "merge/index.html").read_text(), cid)

    assert statement not in before and statement in after
    assert 'class="fp-failed">FAILED<' in after and "mutated by tests/test_docs.py" in after
    assert r"\mathrm{tuesday} - 1" in after  # the residual, printed by sympy.latex
    index = (tmp_path / "site/index.html").read_text()  # the summary table follows too
    assert statement in index


def test_stale_generated_line_stops_the_build(proved, tmp_path, monkeypatch, caplog):
    """A spec term whose generated kernel line no longer matches it is an error, not a page."""
    from mkdocs.exceptions import MkDocsException

    from spec import terms

    use_session_proofs(monkeypatch, proved)

    tile = list(terms.FORWARD_TILE)
    k = next(i for i, t in enumerate(tile) if t.name == "alpha")
    tile[k] = dataclasses.replace(tile[k], expr=tile[k].expr * 2)  # a kernel the spec no longer describes
    monkeypatch.setitem(terms.GROUPS, "forward_tile", tuple(tile))
    with pytest.raises(MkDocsException):
        build_site(tmp_path / "site")
    assert re.search(r"term alpha = .* has no generated line in generated/attention_fwd_", caplog.text), caplog.text


# ---------------------------------------------------------------------------------
# The browser
# ---------------------------------------------------------------------------------
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: {SETUP_HINT}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


# Visible text outside code (navigation and table of contents included), with KaTeX's MathML
# copy (which holds the TeX source) removed.
VISIBLE_TEXT_JS = """() => {
  const clone = document.body.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, .katex-mathml').forEach(e => e.remove());
  return clone.innerText;
}"""
ALL_MATH_RENDERED_JS = """() => [...document.querySelectorAll('.arithmatex')].every(e => e.querySelector('.katex'))"""
UNRENDERED_JS = """() => [...document.querySelectorAll('.arithmatex')].filter(e => !e.querySelector('.katex'))
                          .map(e => e.textContent.slice(0, 120))"""


@pytest.mark.browser
def test_every_page_renders_its_math_offline(site, server, browser):
    host = urlparse(server).netloc
    offsite, errors = [], []
    context = browser.new_context(viewport={"width": 1280, "height": 1000})

    # The search index (one file for the whole site, 1.8 MB) is fetched and indexed by the theme's search
    # worker on every page load: a third of the browser's CPU over the site. The first page gets the real
    # index (its worker's errors are checked like any other); later pages an index of the same config and
    # no documents, so each page still runs the worker and logs what it logs, without re-indexing the site.
    index = json.loads((site / "search/search_index.json").read_text())
    empty_index = json.dumps({"config": index["config"], "docs": []})
    indexed = []  # the pages that fetched the real index: the first one

    def route(r):
        url = urlparse(r.request.url)
        if url.netloc == host and url.path == "/search/search_index.json" and indexed:
            r.fulfill(status=200, content_type="application/json", body=empty_index)
        elif url.scheme in ("data", "blob") or url.netloc == host:
            if url.path == "/search/search_index.json":
                indexed.append(page.url)
            r.continue_()
        else:  # recorded and refused: the test never touches the network
            offsite.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and errors.append(f"{page.url}: console: {m.text}"))
    page.on("pageerror", lambda e: errors.append(f"{page.url}: uncaught: {e}"))

    visited, math_pages = pages(site), 0
    assert {"/", "/softmax/", "/merge/", "/tiling/", "/masks/", "/kernel/", "/backward/", "/usage/", "/api/"} <= set(visited)
    for path in visited:
        page.goto(server + path, wait_until="load")
        n_math = page.locator(".arithmatex").count()
        if n_math:
            math_pages += 1
            try:
                page.wait_for_function(ALL_MATH_RENDERED_JS, timeout=15_000)
            except Exception:
                pytest.fail(f"{path}: math left unrendered by KaTeX: {page.evaluate(UNRENDERED_JS)[:5]}")
        assert page.locator(".katex-error").count() == 0, f"{path}: KaTeX reported a parse error"
        text = page.evaluate(VISIBLE_TEXT_JS)
        for raw in ("\\(", "\\)", "\\[", "\\]", "$$"):
            assert raw not in text, f"{path}: raw {raw!r} left in the text: ...{text[max(0, text.find(raw) - 80):text.find(raw) + 80]}..."
        if path == "/merge/":
            assert n_math > 20, "the merge page should be mostly formulas"
            ARTIFACTS.mkdir(exist_ok=True)
            page.evaluate("() => document.querySelector('#the-merge').scrollIntoView()")
            page.screenshot(path=str(ARTIFACTS / "merge.png"))

    context.close()
    assert not offsite, f"requests to other hosts: {offsite[:10]}"
    assert len(indexed) == 1, f"the search index was fetched in full by {indexed} (once expected)"
    assert not errors, "\n".join(errors[:10])
    assert math_pages >= 7, f"only {math_pages} pages have math"
    assert (ARTIFACTS / "merge.png").stat().st_size > 10_000
