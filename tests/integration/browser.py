"""Look at a page as a person would: Debian's headless chromium, its DOM after the page's scripts ran, a screenshot.

Tests import this (`import browser`: pytest puts tests/integration/ on sys.path). Each call starts a fresh headless
chromium with its own profile and ends it, bounded by a timeout; run as root, chromium needs --no-sandbox.

    dom = page_dom(url)                                   # the DOM after the page's scripts ran
    dom = page_dom(url, until=lambda d: "up" in d)        # again until the page shows it (bounded by timeout)
    screenshot(url, "page.png")

A page whose scripts draw lazily (TensorBoard's cards appear as they scroll into view) may show less in one dump
than in the next: pass `until`, which dumps again until the page shows what the test waits for, never sleeping
between dumps. The parsers below read what Prometheus's classic targets page and TensorBoard 2.21's time-series
page show (see docs/monitoring.md).
"""

import html.parser
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse

# Chromium's virtual time: how long (in the page's own clock) its scripts may run before the DOM is taken; it runs
# faster than the wall clock when the page waits on timers.
BUDGET_MS = 10000
WINDOW = "1400,1800"


class BrowserMissing(RuntimeError):
    """chromium is not installed here (Debian: apt-get install chromium; `make system-deps` does)."""


def chromium():
    """The chromium executable, or BrowserMissing naming the package to install."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise BrowserMissing("chromium is not installed: apt-get install chromium (make system-deps installs it)")
    return found


def _run(url, extra, timeout):
    with tempfile.TemporaryDirectory(prefix="browser-") as profile:
        argv = [chromium(), "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--mute-audio",
                f"--user-data-dir={profile}", *extra, url]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"chromium did not finish {url} within {timeout} s") from None
    if proc.returncode != 0:
        raise AssertionError(f"chromium failed on {url} (rc={proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc.stdout


def page_dom(url, until=None, timeout=60, budget_ms=BUDGET_MS, window=WINDOW):
    """The page's DOM (HTML text) after its scripts ran. With until (a function of the DOM), dump it again until
    until(dom) is true; AssertionError, with the end of the last DOM, when it is not within timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        dom = _run(url, ["--dump-dom", f"--virtual-time-budget={budget_ms}", f"--window-size={window}"],
                   max(5.0, left))
        if until is None or until(dom):
            return dom
        if time.monotonic() >= deadline:
            text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
            raise AssertionError(f"{url} did not show what was waited for within {timeout} s; it shows: {text[-800:]}")


def screenshot(url, path, timeout=60, budget_ms=BUDGET_MS, window="1200,760"):
    """A PNG of the page as a window of that size shows it, after its scripts ran; returns path."""
    path = os.path.abspath(path)
    _run(url, [f"--screenshot={path}", f"--virtual-time-budget={budget_ms}", f"--window-size={window}"], timeout)
    if not os.path.getsize(path):
        raise AssertionError(f"chromium wrote an empty screenshot of {url}")
    return path


class _Tree(html.parser.HTMLParser):
    """A small element tree of a DOM dump: each element's tag, attributes and content (text and elements, in order)."""

    VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                      "wbr"})

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = {"tag": "", "attrs": {}, "content": []}
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = {"tag": tag, "attrs": dict(attrs), "content": []}
        self.stack[-1]["content"].append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth]["tag"] == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1]["content"].append(data)


def parse(dom):
    """The DOM dump as a tree of elements ({tag, attrs, content}) under a root."""
    tree = _Tree()
    tree.feed(dom)
    tree.close()
    return tree.root


def find(node, tag=None, cls=None, **attrs):
    """Every element under node with that tag, that class among its classes and those attribute values."""
    found = []
    for child in node["content"]:
        if isinstance(child, str):
            continue
        classes = child["attrs"].get("class", "") or ""
        if ((tag is None or child["tag"] == tag) and (cls is None or cls in classes.split())
                and all(child["attrs"].get(k) == v for k, v in attrs.items())):
            found.append(child)
        found.extend(find(child, tag, cls, **attrs))
    return found


def text(node):
    """The element's text as shown (scripts and styles left out), whitespace runs as one space."""
    if node is None or node.get("tag") in ("script", "style"):
        return ""
    return " ".join(" ".join(part if isinstance(part, str) else text(part) for part in node["content"]).split())


def prometheus_targets(dom):
    """The rows of Prometheus's classic targets page (Debian's 2.42 serves /classic/targets, drawn on the server):
    [{"job", "endpoint", "state", "error"}], state as the page shows it (UP, DOWN, UNKNOWN: upper-cased by CSS,
    lower case in the DOM)."""
    rows = []
    for table in find(parse(dom), "div", "table-container"):
        header = find(table, "a")
        job = re.sub(r"\s*\(.*\)$", "", text(header[0])) if header else ""
        for row in find(table, "tr"):
            cells = {c["attrs"].get("class", ""): c for c in find(row, "td")}
            if "endpoint" in cells:
                rows.append({"job": job, "endpoint": text(cells["endpoint"]), "state": text(cells.get("state")),
                             "error": text(cells.get("errors"))})
    return rows


def tensorboard_url(base, run=None, tags=None, svg=True):
    """TensorBoard's time-series page, showing one run (a regex on run names: `<id>/tensorboard` is matched as
    ^<id>/) and the tags matching a regex; TensorBoard 2.21 reads runFilter and tagFilter from the query string.
    svg: its feature flag forceSVG, so each chart's lines are SVG paths in the DOM (and in a screenshot) instead of
    a WebGL canvas a headless browser may not have drawn yet."""
    query = {"forceSVG": "true"} if svg else {}
    if run:
        query["runFilter"] = "^" + re.escape(run) + "/"
    if tags:
        query["tagFilter"] = tags
    return base.rstrip("/") + "/" + ("?" + urllib.parse.urlencode(query) if query else "") + "#timeseries"


def tensorboard_lines(dom):
    """{tag: [points of each line drawn]}: the SVG paths of each scalar card's chart (a page opened with forceSVG:
    see tensorboard_url), two per run (the raw values, faint, and the smoothed ones)."""
    lines = {}
    for card in find(parse(dom), "scalar-card-component"):
        title = find(card, "tb-truncated-path", "tag")
        if title:
            paths = [p["attrs"].get("d") or "" for view in find(card, "div", "series-view") for p in find(view, "path")]
            lines[title[0]["attrs"].get("title", "")] = [len(re.findall(r"[ML]", d)) for d in paths if d]
    return lines


def tensorboard_runs(dom):
    """The run names of TensorBoard's runs table (each job shows as `<submission_id>/tensorboard`)."""
    runs = set()
    for row in find(parse(dom), "tb-data-table-content-row"):
        run_id = row["attrs"].get("data-id") or ""
        if run_id:
            runs.add(run_id.split("/", 1)[1] if "/" in run_id else run_id)
    return runs


def tensorboard_cards(dom):
    """{tag: [{"run", "smoothed", "value", "step"}]}: each scalar card TensorBoard drew, with the rows of its data
    table (a row per run it plots; a card not scrolled into view yet has no rows)."""
    cards = {}
    for card in find(parse(dom), "scalar-card-component"):
        title = find(card, "tb-truncated-path", "tag")
        if not title:
            continue
        rows = []
        for table in find(card, "scalar-card-data-table"):
            for row in find(table, "tb-data-table-content-row"):
                cells = [text(c) for c in find(row, "tb-data-table-content-cell")]
                if len(cells) >= 5:
                    rows.append({"run": cells[1], "smoothed": cells[2], "value": cells[3], "step": cells[4]})
        cards[title[0]["attrs"].get("title", "")] = rows
    return cards
