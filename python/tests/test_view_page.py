"""`tidepool view` in a real browser (Debian's chromium, headless): the page loads without script
errors, draws its charts (elements present, a screenshot with the allocators' colours), and the
numbers on it are those of `--json` (and of `tidepool replay --json`, but for wall time).

Skips when chromium or the command line is absent, except under CI (scripts/test.sh sets
TIDEPOOL_REQUIRE_BROWSER=1), where it must run."""

import decimal
import html.parser
import json
import os
import random
import shutil
import struct
import subprocess
import zlib

import pytest

from sim_support import tool_path

REQUIRED = os.environ.get("TIDEPOOL_REQUIRE_BROWSER") == "1"
TIDEPOOL_RED = (0xD6, 0x27, 0x28)


def _missing(what):
    if REQUIRED:
        pytest.fail(f"{what} is required here (TIDEPOOL_REQUIRE_BROWSER=1)")
    pytest.skip(f"{what} is not available")


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser(args, url, tmp_path):
    """Runs headless chromium on `url`; returns stdout. The sanitizer preload of the suite's
    second run must not reach the browser."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    env["HOME"] = str(tmp_path)  # a profile of its own
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
               "--virtual-time-budget=10000", *args, url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, f"chromium failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def _write_trace(path, seed, rows):
    """A small trace: a loop whose sizes vary from step to step, on two streams."""
    rng = random.Random(seed)
    live, lines, address = [], ["Thread,Time,Action,Pointer,Size,Stream"], 0x10000
    for i in range(rows):
        t = f"00:00:{i // 1_000_000 % 60:02d}.{i % 1_000_000:06d}"
        if live and (len(live) > 40 or rng.random() < 0.45):
            pointer, size, stream = live.pop(rng.randrange(len(live)))
            lines.append(f"1,{t},free,{pointer:#x},{size},{stream:#x}")
        else:
            size = rng.choice([512, 4096, 300_000, 2 << 20, 24 << 20, 90 << 20]) + rng.randrange(0, 4096, 512)
            stream = rng.choice([0, 0, 0x77])
            live.append((address, size, stream))
            lines.append(f"1,{t},allocate,{address:#x},{size},{stream:#x}")
            address += 1 << 28
    path.write_text("\n".join(lines) + "\n")


class _Page(html.parser.HTMLParser):
    """The elements the checks need from the DOM chromium dumped."""

    def __init__(self):
        super().__init__()
        self.body = {}
        self.sections = []
        self.charts = []   # (trace, kind, [polyline points])
        self.cells = []    # (trace, attrs, text)
        self._trace = None
        self._cell = None
        self._text = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "section" and a.get("class") == "trace":
            self._trace = a["data-trace"]
            self.sections.append(self._trace)
        elif tag == "svg" and "data-chart" in a:
            self.charts.append((self._trace, a["data-chart"], []))
        elif tag == "polyline":
            self.charts[-1][2].append(a)
        elif tag == "td" and "data-key" in a:
            self._cell = a
            self._text = []

    def handle_data(self, data):
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append((self._trace, self._cell, "".join(self._text)))
            self._cell = None


def _fixed(value, digits):
    """JavaScript's Number.prototype.toFixed: the exact value of the double, ties away from zero
    (Python's format rounds ties to even)."""
    quantum = decimal.Decimal(1).scaleb(-digits)
    return str(decimal.Decimal(value).quantize(quantum, rounding=decimal.ROUND_HALF_UP))


def _fmt_bytes(b):
    if b >= 1 << 30:
        return _fixed(b / (1 << 30), 2) + " GiB"
    if b >= 1 << 20:
        return _fixed(b / (1 << 20), 2) + " MiB"
    if b >= 1 << 10:
        return _fixed(b / (1 << 10), 1) + " KiB"
    return f"{b} B"


FORMATS = {"bytes": _fmt_bytes, "held_ratio": lambda v: _fixed(v, 3), "driver_calls": str, "failures": str,
           "driver_us": lambda v: _fixed(v / 1000, 2) + " ms", "ns_per_op": lambda v: _fixed(v, 1)}


def _formatted(key, value):
    last = key.split(".")[-1]
    return (FORMATS["bytes"] if last.endswith("_bytes") else FORMATS[last])(value)


def _lookup(result, key):
    value = result
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def _png_pixels(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    tool = tool_path()
    if tool is None:
        _missing("the tidepool command line")
    if _chromium() is None:
        _missing("chromium")
    tmp = tmp_path_factory.mktemp("view")
    traces = [tmp / "loop_a.csv", tmp / "loop_b.csv", tmp / "too_big.csv"]
    _write_trace(traces[0], 1, 3000)
    _write_trace(traces[1], 2, 1500)
    # Two 80 GiB arrays at once: more than the simulated H200 holds, so every allocator fails one.
    lines = ["Thread,Time,Action,Pointer,Size,Stream"]
    for i in range(12):
        lines.append(f"1,00:00:00.{i:06d},allocate,{0x1000 * (i + 1):#x},{(80 << 30) if i < 2 else 4096},0x0")
    lines += [f"1,00:00:01.{i:06d},free,{0x1000 * (i + 1):#x},0,0x0" for i in range(12)]
    traces[2].write_text("\n".join(lines) + "\n")
    page = tmp / "report.html"
    common = ["--passes", "3", "--allocators", "tidepool,caching,expandable", *map(str, traces)]
    made = subprocess.run([tool, "view", "-o", str(page), "--json", *common], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    replayed = subprocess.run([tool, "replay", "--json", *common], capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0, replayed.stderr
    dom = _browser(["--dump-dom"], page.as_uri(), tmp)
    parsed = _Page()
    parsed.feed(dom)
    return {"tmp": tmp, "page": page, "json": json.loads(made.stdout), "replay": json.loads(replayed.stdout),
            "dom": parsed, "traces": [t.name for t in traces]}


def test_the_page_is_self_contained(view):
    text = view["page"].read_text()
    for forbidden in ("<script src", "<link", "src=\"http", "href=\"http", "url(", "fetch(", "XMLHttpRequest",
                      "import "):
        assert forbidden not in text, forbidden


def test_the_page_loads_without_script_errors(view):
    body = view["dom"].body
    assert body.get("data-rendered") == "yes", body
    assert body.get("data-errors") == "0", body


def test_every_trace_has_its_charts_drawn(view):
    dom = view["dom"]
    assert dom.sections == view["traces"]
    for trace in view["traces"]:
        kinds = {kind: lines for t, kind, lines in dom.charts if t == trace}
        assert set(kinds) == {"memory", "driver"}
        failed = [r["allocator"] for r in view["json"] if r["trace"] == trace and r["failures"] > 0]
        names = [line["data-series"] for line in kinds["memory"]]
        # held for each allocator; live once (the program's), and for each allocator that failed some
        assert names == ["tidepool held", "caching held", "expandable held"] + (
            ["live"] if len(failed) < 3 else []) + [f"{a} live" for a in failed]
        assert len(kinds["driver"]) == 3
        for line in kinds["memory"] + kinds["driver"]:
            assert len(line["points"].split()) >= (10 if trace != "too_big.csv" else 3), line


def test_the_numbers_on_the_page_are_the_json(view):
    results = {(r["trace"], r["allocator"]): r for r in view["json"]}
    replayed = {(r["trace"], r["allocator"]): r for r in view["replay"]}
    cells = view["dom"].cells
    assert len(cells) >= 3 * 3 * 13
    for trace, attrs, text in cells:
        key, allocator = attrs["data-key"], attrs["data-allocator"]
        expected = _lookup(results[(trace, allocator)], key)
        shown = json.loads(attrs["data-value"])
        if expected is None:  # a figure this allocator has not (after compact: tidepool's only)
            assert shown is None and text == "-", (trace, allocator, key, text)
            assert _lookup(replayed[(trace, allocator)], key) is None
            continue
        assert shown == pytest.approx(expected, rel=1e-12, abs=0), (trace, allocator, key)
        if key.startswith("passes."):
            continue
        assert text == _formatted(key, expected), (trace, allocator, key, text)
        if key != "ns_per_op":  # wall time: the one figure two runs do not share
            assert shown == pytest.approx(_lookup(replayed[(trace, allocator)], key), rel=1e-12, abs=0)


def test_a_screenshot_shows_the_lines(view):
    shot = view["tmp"] / "shot.png"
    _browser([f"--screenshot={shot}", "--window-size=1100,1400"], view["page"].as_uri(), view["tmp"])
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 1400)
    pixels = [p for row in rows[::2] for p in row[::2]]
    mean = [sum(p[c] for p in pixels) / len(pixels) for c in range(3)]
    variance = sum((p[0] - mean[0]) ** 2 for p in pixels) / len(pixels)
    assert variance > 100, "a blank page"
    red = sum(1 for p in pixels if all(abs(p[c] - TIDEPOOL_RED[c]) < 40 for c in range(3)))
    assert red > 50, f"tidepool's lines not drawn ({red} pixels of its colour)"
