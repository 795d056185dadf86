"""accept: spec validation, verdicts, JUnit/JSON/HTML; the HTML opened in headless Chromium over CDP."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from accelport.errors import UserError
from accelport.verify import accept
from accelport.verify.perf import bench
from accelport.verify.stability import comm, soak

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _bench(path: Path, median: float) -> str:
    times = [median * f for f in (0.98, 1.0, 1.02, 0.99, 1.01, 1.0, 1.0, 0.97, 1.03, 1.0)]
    result = bench.BenchResult(scenario="step", times_s=times, warmup=2, stop_reason="converged", samples_per_step=8)
    path.write_text(json.dumps(result.to_dict()))
    return path.name


def _inputs(folder: Path, test_median: float = 0.012) -> None:
    """Results as the commands save them: bench (synthetic times), soak (a real run), comm (result rows)."""
    _bench(folder / "base.json", 0.010)
    _bench(folder / "test.json", test_median)
    losses = iter([1.0 / (i + 1) for i in range(30)])
    soaked = soak.run(lambda: next(losses), steps=30)
    (folder / "soak.json").write_text(json.dumps(soaked.to_dict()))
    rows = [comm.CommRow(c, 4096 * k, 1024 * k, "float32", "sum", -1, 50.0 * k, 0.08, 0.08, 0)
            for c in comm.COLLECTIVES for k in (1, 4)]
    (folder / "comm.json").write_text(json.dumps(comm.CommResult(2, "gloo", "cpu", rows).to_dict()))
    (folder / "dumps-ref").mkdir(exist_ok=True)
    (folder / "dumps-test").mkdir(exist_ok=True)
    (folder / "curve-ref.csv").write_text("step,loss\n" + "".join(f"{s},{2.0 / (s + 1):.6f}\n" for s in range(12)))
    (folder / "curve-test.csv").write_text("step,loss\n" + "".join(f"{s},{2.002 / (s + 1):.6f}\n" for s in range(12)))


SPEC = """
title = "TinyLM acceptance"

[[performance]]
name = "train step"
result = "test.json"
baseline = "base.json"
floor = 0.6

[[stability]]
result = "soak.json"

[[collectives]]
result = "comm.json"
"""

NUMERICS = """
[correctness]
reference = "dumps-ref"
test = "dumps-test"
options = { tolerances = { float32 = [1e-3, 1e-3] }, criterion = "max" }

[precision]
reference = "curve-ref.csv"
tests = ["curve-test.csv"]
"""


def test_passing_spec_writes_html_junit_and_json(cli, tmp_path):
    _inputs(tmp_path)
    (tmp_path / "spec.toml").write_text(SPEC)
    done = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert done.code == 0, done.out + done.err
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["verdict"] == "pass" and data["counts"] == {"pass": 3, "fail": 0, "error": 0, "inconclusive": 0}
    suites = ET.parse(tmp_path / "out" / "report.junit.xml").getroot()
    assert sum(int(s.get("tests")) for s in suites) == 3
    assert sum(int(s.get("failures")) for s in suites) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count("<svg") >= 4 and 'id="performance"' in html


def test_slow_test_machine_fails_with_exit_1_and_a_junit_failure(cli, tmp_path):
    _inputs(tmp_path, test_median=0.025)  # 0.4x of the baseline, floor 0.6
    (tmp_path / "spec.toml").write_text(SPEC)
    done = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert done.code == 1
    suites = ET.parse(tmp_path / "out" / "report.junit.xml").getroot()
    failure = suites.find(".//testcase[@name='train step']/failure")
    assert failure is not None and "0.400x" in failure.get("message")


def test_baseline_of_another_scenario_is_refused_unless_the_spec_allows_it(cli, tmp_path):
    _inputs(tmp_path)
    other = bench.load_result(tmp_path / "base.json")
    other.scenario = "inference"
    (tmp_path / "base.json").write_text(json.dumps(other.to_dict()))
    (tmp_path / "spec.toml").write_text(SPEC)
    refused = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert refused.code == 2 and "scenario 'step' vs 'inference'" in refused.err and "base.json" in refused.err
    (tmp_path / "spec.toml").write_text(SPEC.replace("floor = 0.6", "floor = 0.6\nallow_mismatch = true"))
    allowed = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert allowed.code == 0, allowed.err
    check = json.loads((tmp_path / "out" / "report.json").read_text())["checks"][0]
    assert check["figures"]["mismatch"] == ["scenario 'step' vs 'inference'"]
    assert "compared although the scenarios differ" in check["summary"]


def test_a_result_that_stopped_on_its_budget_is_flagged_in_the_verdict(cli, tmp_path):
    _inputs(tmp_path)
    planted = bench.load_result(tmp_path / "test.json")
    planted.stop_reason = "budget"  # measuring ran out of time before the CI converged
    (tmp_path / "test.json").write_text(json.dumps(planted.to_dict()))
    (tmp_path / "spec.toml").write_text(SPEC)
    done = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    check = json.loads((tmp_path / "out" / "report.json").read_text())["checks"][0]
    assert check["figures"]["stop_reason"] == {"test": "budget", "baseline": "converged"}
    assert "the test stopped on budget before its CI reached the target width" in check["summary"]
    assert "baseline stopped" not in check["summary"]
    assert done.code == 0  # flagged, not failed: the ratio still clears the floor
    for reason, flagged in (("max-steps", True), ("process-ended", True), ("4 alternating rounds", False)):
        planted.stop_reason = reason
        (tmp_path / "test.json").write_text(json.dumps(planted.to_dict()))
        check = accept.evaluate(accept.load_spec(tmp_path / "spec.toml")).checks[0]
        assert ("the test stopped on" in check.summary) is flagged, (reason, check.summary)


def test_numerics_sections_never_pass_when_the_library_is_missing(tmp_path, monkeypatch):
    # The numerics library (compare_dumps, compare_curves) ships separately; without it
    # the checks are errors that fail the verdict, never silent passes.
    monkeypatch.setitem(sys.modules, "accelport.verify.numerics.compare", None)
    monkeypatch.setitem(sys.modules, "accelport.verify.numerics.curves", None)
    _inputs(tmp_path)
    (tmp_path / "spec.toml").write_text(NUMERICS)
    report = accept.evaluate(accept.load_spec(tmp_path / "spec.toml"))
    assert [c.status for c in report.checks] == ["error", "error"]
    assert "compare_dumps() cannot run" in report.checks[0].summary
    assert not report.passed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[performance]\nresult = 'test.json'\n", "missing baseline"),
        ("[[stability]]\nresult = 'nope.json'\n", "'nope.json' does not exist"),
        ("[[performance]]\nresult = 'test.json'\nbaseline = 'base.json'\nfloor = 'high'\n", "floor must be a positive number"),
        ("[speed]\nx = 1\n", "unknown key(s) speed"),
        ("title = 'x'\n", "has no section"),
        ("[[correctness]]\nreference = 'dumps-ref'\ntest = 'dumps-test'\n", "is a single table"),
        ("[[stability]]\nresult = 'soak.json'\nmax = 3\n", "unknown key(s) max"),
        ("[stability\n", "not valid TOML"),
        ("[[performance]]\nresult = 'test.json'\nbaseline = 'base.json'\nallow_mismatch = 'yes'\n", "allow_mismatch must be true or false"),
        # options reach compare_dumps / compare_curves only once they are known to fit them
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = { atol = 1e-3 }\n",
         "unknown option(s) atol in options"),
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = { top = 'all' }\n",
         "options.top must be a positive integer"),
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = { criterion = 'loose' }\n",
         "options.criterion must be one of norm, max, elementwise"),
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = { tolerances = { float32 = 1e-3 } }\n",
         "options.tolerances.float32 must be [RTOL, ATOL]"),
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = { tolerances = { fp8 = [0, 0] } }\n",
         "options.tolerances has unknown dtype 'fp8'"),
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = { mapping = 'map.toml' }\n",
         "options.mapping = 'map.toml' does not exist"),
        ("[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\noptions = 3\n", "options must be a table"),
        ("[precision]\nreference = 'curve-ref.csv'\ntests = ['curve-test.csv']\noptions = { smooth = 1.0 }\n",
         "options.smooth must be a number with 0 <= x < 1"),
        ("[precision]\nreference = 'curve-ref.csv'\ntests = ['curve-test.csv']\noptions = { metrics = 'loss' }\n",
         "options.metrics must be a non-empty list of names"),
        ("[precision]\nreference = 'curve-ref.csv'\ntests = ['curve-test.csv']\noptions = { per_step = 1 }\n",
         "options.per_step must be true or false"),
        ("[precision]\nreference = 'curve-ref.csv'\ntests = ['curve-test.csv']\noptions = { tolerances = { loss = -1 } }\n",
         "options.tolerances must be a table of positive numbers"),
    ],
)
def test_invalid_specs_are_usage_errors_naming_the_file(cli, tmp_path, text, message):
    _inputs(tmp_path)
    (tmp_path / "spec.toml").write_text(text)
    done = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert done.code == 2
    assert "spec.toml" in done.err and message in done.err
    assert not (tmp_path / "out" / "report.html").exists()
    assert "Traceback" not in done.err and len(done.err.strip().splitlines()) == 1


def _drop(data: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data[int(part)] if isinstance(data, list) else data[part]
    del data[last]


def _set(data: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data[int(part)] if isinstance(data, list) else data[part]
    data[last] = value


@pytest.mark.parametrize(
    ("saved", "change", "message"),
    [
        ("soak.json", ("drop", "steps"), "soak result has no 'steps'"),
        ("soak.json", ("drop", "failures"), "soak result has no 'failures'"),
        ("soak.json", ("drop", "samples"), "soak result has no 'samples'"),
        ("soak.json", ("drop", "samples.3.step"), "soak result has no 'samples[3].step'"),
        ("soak.json", ("set", "samples.2.dt", "fast"), "'samples[2].dt' must be a number or null"),
        ("soak.json", ("set", "samples", {}), "'samples' must be a list"),
        ("soak.json", ("drop", "slopes.rss.low"), "soak result has no 'slopes.rss.low'"),
        ("soak.json", ("set", "duration_s", None), "'duration_s' must be a number"),
        ("soak.json", ("set", "hang", {"stacks": 3}), "'hang.stacks' must be a string"),
        ("comm.json", ("drop", "ranks"), "comm result has no 'ranks'"),
        ("comm.json", ("drop", "rows.1.busbw"), "comm result has no 'rows[1].busbw'"),
        ("comm.json", ("set", "rows.0.size", 0), "'rows[0].size' must be positive"),
        ("comm.json", ("set", "rows.0.wrong", "none"), "'rows[0].wrong' must be an integer"),
        ("comm.json", ("set", "errors", "none"), "'errors' must be a list of strings"),
        ("comm.json", ("set", "verdict", "ok"), "'verdict' must be \"pass\" or \"fail\""),
    ],
)
def test_incomplete_saved_results_are_usage_errors_naming_file_and_key(cli, tmp_path, saved, change, message):
    _inputs(tmp_path)
    data = json.loads((tmp_path / saved).read_text())
    if saved == "soak.json":
        assert "rss" in data["slopes"]  # the slope one case takes a key from
    if change[0] == "drop":
        _drop(data, change[1])
    else:
        _set(data, change[1], change[2])
    (tmp_path / saved).write_text(json.dumps(data))
    (tmp_path / "spec.toml").write_text(SPEC)
    done = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert done.code == 2, done.out + done.err
    assert saved in done.err and message in done.err, done.err
    assert "Traceback" not in done.err and len(done.err.strip().splitlines()) == 1
    with pytest.raises(UserError, match="re-run `accelport"):
        (soak if saved == "soak.json" else comm).load_result(tmp_path / saved)


def test_complete_saved_results_load(tmp_path):
    _inputs(tmp_path)
    assert soak.load_result(tmp_path / "soak.json")["steps"] == 30
    assert len(comm.load_result(tmp_path / "comm.json")["rows"]) == 2 * len(comm.COLLECTIVES)


def test_valid_options_are_kept_with_their_paths_resolved(tmp_path):
    _inputs(tmp_path)
    (tmp_path / "map.toml").write_text("")
    (tmp_path / "seed.csv").write_text("step,loss\n0,1.0\n")
    (tmp_path / "spec.toml").write_text(
        "[correctness]\nreference = 'dumps-ref'\ntest = 'dumps-test'\n"
        "options = { mapping = 'map.toml', tolerances = { float32 = [1e-3, 2e-3] }, replay = 'none', top = 5 }\n"
        "[precision]\nreference = 'curve-ref.csv'\ntests = ['curve-test.csv']\n"
        "options = { seeds = ['seed.csv'], metrics = ['loss'], tolerance = 0.02, smooth = 0.5, per_step = true }\n")
    spec = accept.load_spec(tmp_path / "spec.toml")
    correctness = spec.sections["correctness"][0]["options"]
    assert correctness == {"mapping": (tmp_path / "map.toml").resolve(), "tolerances": {"float32": (1e-3, 2e-3)},
                           "replay": "none", "top": 5}
    precision = spec.sections["precision"][0]["options"]
    assert precision["seeds"] == [(tmp_path / "seed.csv").resolve()] and precision["smooth"] == 0.5


# --------------------------------------------------------------------------- headless Chromium over CDP


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, installed with apt-get when missing (the tests run as root)."""
    if not Path(CHROMIUM).exists():
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True, env=env, timeout=600)
        done = subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, f"apt-get install chromium failed: {done.stderr[-2000:]}"
    return CHROMIUM


class _WebSocket:
    """The client side of RFC 6455, enough for the DevTools protocol (text frames, masked)."""

    def __init__(self, url: str) -> None:
        host_port, path = url.removeprefix("ws://").split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(4096)
        assert b" 101 " in response.split(b"\r\n", 1)[0], response
        self.buffer = response.split(b"\r\n\r\n", 1)[1]

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("DevTools closed the websocket")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def send(self, message: dict) -> None:
        payload = json.dumps(message).encode()
        header = bytes([0x81])
        length = len(payload)
        if length < 126:
            header += bytes([0x80 | length])
        elif length < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", length)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", length)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def receive(self) -> dict:
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(length)
            opcode = first & 0x0F
            if opcode in (0x9, 0xA):  # ping/pong
                continue
            message += payload
            if first & 0x80:
                return json.loads(message)


def open_in_chromium(binary: str, page: Path) -> dict:
    """Load `page`; return console errors, uncaught exceptions and what each report section shows."""
    with tempfile.TemporaryDirectory(prefix="accelport-chromium-") as profile_dir:
        proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", "--remote-debugging-port=0",
                                 "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = Path(profile_dir) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().strip()):
                assert time.monotonic() < deadline and proc.poll() is None, "chromium did not start its DevTools server"
                time.sleep(0.1)
            port = port_file.read_text().split()[0]
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
            ws = _WebSocket(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
            problems: list[str] = []
            ids = iter(range(1, 10_000))

            def call(method: str, **params) -> dict:
                ident = next(ids)
                ws.send({"id": ident, "method": method, "params": params})
                while True:
                    message = ws.receive()
                    if message.get("id") == ident:
                        return message
                    note(message)

            def note(message: dict) -> None:
                method, params = message.get("method"), message.get("params", {})
                if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    problems.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
                elif method == "Runtime.exceptionThrown":
                    problems.append("exception: " + params["exceptionDetails"].get("exception", {}).get("description", "?"))
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    problems.append("log: " + params["entry"].get("text", ""))
                elif method == "Page.loadEventFired":
                    loaded.append(True)

            loaded: list[bool] = []
            for domain in ("Runtime", "Log", "Page"):
                call(f"{domain}.enable")
            call("Page.navigate", url=page.resolve().as_uri())
            while not loaded:
                note(ws.receive())
            probe = """JSON.stringify([...document.querySelectorAll('section.accept-section')].map(s => ({
                id: s.id, height: s.getBoundingClientRect().height,
                svgs: [...s.querySelectorAll('svg')].filter(g => g.getBoundingClientRect().width > 0).length,
                rows: s.querySelectorAll('tr').length, text: s.innerText.length})))"""
            result = call("Runtime.evaluate", expression=probe, returnByValue=True)
            time.sleep(0.2)  # late console messages
            ws.sock.settimeout(0.5)
            try:
                while True:
                    note(ws.receive())
            except TimeoutError:
                pass
            return {"problems": problems, "sections": json.loads(result["result"]["result"]["value"])}
        finally:
            _stop_session(proc)


def _stop_session(proc: subprocess.Popen) -> None:
    """End the browser and every helper it forked (zygote, renderers, crashpad), then wait for them.

    Ending the browser process alone left helpers that still wrote into the profile
    folder while it was being removed ("Directory not empty"). They all share the session
    the browser was started in, whose id is the browser's pid.
    """
    for sig, patience in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            proc.poll()  # reap the browser itself, or it stays in the group as a zombie
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.wait()
                return
            time.sleep(0.05)
    proc.wait()


def test_precision_section_plots_the_curves_inline(tmp_path):
    _inputs(tmp_path)
    (tmp_path / "spec.toml").write_text("[precision]\nreference = 'curve-ref.csv'\ntests = ['curve-test.csv']\n")
    report = accept.evaluate(accept.load_spec(tmp_path / "spec.toml"))
    assert [c.status for c in report.checks] == ["pass"], report.checks[0].summary
    html = accept.render_html(report)
    section = html[html.index('<section id="precision"'):]
    section = section[: section.index("</section>")]
    assert section.count("<svg") == 1 and section.count("<polyline") == 2  # one line per run
    assert "REF curve-ref.csv" in section and "TEST curve-test.csv" in section
    assert "src=" not in section and "href=" not in section  # inline, nothing fetched


def test_acceptance_report_renders_every_section_without_console_errors(chromium, tmp_path, monkeypatch):
    # Correctness renders as "could not run" here (its dump folders are placeholders), whether
    # or not the numerics library is installed; precision runs on real curve files and plots them.
    monkeypatch.setitem(sys.modules, "accelport.verify.numerics.compare", None)
    _inputs(tmp_path)
    (tmp_path / "spec.toml").write_text(SPEC + NUMERICS)
    report = accept.evaluate(accept.load_spec(tmp_path / "spec.toml"))
    paths = accept.write_reports(report, tmp_path / "out")
    seen = open_in_chromium(chromium, paths["html"])
    assert seen["problems"] == []
    sections = {s["id"]: s for s in seen["sections"]}
    assert set(sections) == {"summary", "correctness", "precision", "performance", "stability", "collectives"}
    for section in sections.values():
        assert section["height"] > 50 and section["text"] > 40, section
    for plotted in ("precision", "performance", "stability", "collectives"):
        assert sections[plotted]["svgs"] >= 1, sections[plotted]
    assert sections["summary"]["rows"] == 1 + len(report.checks)


def test_the_browser_check_catches_a_planted_console_error(chromium, tmp_path):
    page = tmp_path / "planted.html"
    page.write_text(
        "<!DOCTYPE html><html><body><section class='accept-section' id='x'>text</section>"
        "<script>console.error('planted error');</script>"
        "<script>undefinedFunction();</script></body></html>"
    )
    seen = open_in_chromium(chromium, page)
    assert any("planted error" in p for p in seen["problems"])
    assert any("undefinedFunction" in p for p in seen["problems"])



def test_a_floor_inside_the_ci_makes_the_verdict_inconclusive_not_pass(cli, tmp_path):
    import random

    _inputs(tmp_path)
    for name, median, seed in (("base.json", 0.010, 1), ("test.json", 0.010 / 0.70, 2)):
        rng = random.Random(seed)  # +-40% per step: 0.70x of the baseline with the 0.6 floor inside the CI
        times = [median * (1 + rng.uniform(-0.4, 0.4)) for _ in range(12)]
        result = bench.BenchResult(scenario="step", times_s=times, warmup=2, stop_reason="converged", samples_per_step=8)
        (tmp_path / name).write_text(json.dumps(result.to_dict()))
    (tmp_path / "spec.toml").write_text(SPEC)
    done = cli("accept", tmp_path / "spec.toml", "--output-dir", tmp_path / "out")
    assert done.code == 1  # a gate does not pass what it could not show
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["verdict"] == "inconclusive" and data["counts"]["inconclusive"] == 1 and data["counts"]["fail"] == 0
    check = data["checks"][0]
    assert check["status"] == "inconclusive" and "more steps per side would decide" in check["summary"]
    assert ": INCONCLUSIVE" in done.out
    html = (tmp_path / "out" / "report.html").read_text()
    assert '<span class="badge warn">INCONCLUSIVE</span>' in html
    failure = ET.parse(tmp_path / "out" / "report.junit.xml").getroot().find(".//testcase[@name='train step']/failure")
    assert failure is not None and failure.get("message").startswith("inconclusive:")
