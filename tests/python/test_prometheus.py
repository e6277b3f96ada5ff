"""A real Prometheus (Debian's `prometheus`) scrapes a server whose board is
a fake tree (tests/fake-sys/rk3588, `[board] sys_root`); every query of every
panel of the shipped Grafana dashboard (deploy/grafana/rkllm-server.json)
must then return data through Prometheus' HTTP API, and every metric name
the dashboard uses must be in the server's /metrics. The scrape settings
are those of deploy/prometheus/prometheus.yml with the target rewritten.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time

import httpx
import pytest

from conftest import ROOT, start_server, stop_server

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
if not os.path.exists(PROMETHEUS):
    pytest.skip(
        "Prometheus tests skipped: prometheus is not installed; scripts/test installs Debian's "
        "prometheus with apt-get where it can",
        allow_module_level=True,
    )

DASHBOARD = ROOT / "deploy" / "grafana" / "rkllm-server.json"
LIVENESS = 60  # seconds; a bound on waiting, never a timing assertion


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def panel_queries():
    """(panel title, PromQL) of every target, `$instance` as any instance."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"].replace("$instance", ".+")))
    return out


def metric_names(expr: str):
    """The rkllm_* names a query uses, with the histogram and counter
    suffixes Prometheus adds kept as written."""
    return set(re.findall(r"\brkllm_[a-z0-9_]+", expr))


def prometheus_config(target: str) -> str:
    text = (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    text = re.sub(r"scrape_interval: \d+s", "scrape_interval: 1s", text)
    text = re.sub(r"(?ms)      - targets:\n(          - .*\n)+", f"      - targets:\n          - {target}\n", text)
    assert target in text
    return text


@pytest.fixture
def server(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[board]\nsys_root = "{ROOT / "tests" / "fake-sys" / "rk3588"}"\n')
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "0", "--log-level", "warn")
    yield base
    stop_server(proc)


def test_every_dashboard_query_returns_data_from_a_real_prometheus(server, tmp_path):
    # Work on every panel: a generation through an HTTP API and JSON-RPC.
    for _ in range(2):
        answer = httpx.post(f"{server}/v1/chat/completions", timeout=LIVENESS,
                            json={"model": "mock", "messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 4})
        assert answer.status_code == 200, answer.text
    target = server.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(prometheus_config(target))
    port = free_port()
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        # Wait (bounded) for enough scrapes that rate() has two samples.
        deadline = time.monotonic() + LIVENESS
        while True:
            assert prom.poll() is None, prom.stderr.read()
            try:
                up = httpx.get(f"{api}/query", params={"query": "count_over_time(up[1m])"}, timeout=5).json()
                if up["status"] == "success" and up["data"]["result"] and \
                        float(up["data"]["result"][0]["value"][1]) >= 3:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Prometheus scraped the server fewer than 3 times"
            time.sleep(0.5)
        health = httpx.get(f"{api}/query", params={"query": "up"}, timeout=5).json()
        assert health["data"]["result"][0]["value"][1] == "1", health
        empty = []
        for title, expr in panel_queries():
            answer = httpx.get(f"{api}/query", params={"query": expr}, timeout=10).json()
            assert answer["status"] == "success", (title, expr, answer)
            if not answer["data"]["result"]:
                empty.append((title, expr))
        assert not empty, f"panels whose query returned no data: {empty}"
    finally:
        prom.terminate()
        prom.wait(timeout=LIVENESS)


def test_every_metric_the_dashboard_names_is_in_metrics(server):
    text = httpx.get(f"{server}/metrics", timeout=LIVENESS).text
    exposed = set(re.findall(r"^(rkllm_[a-z0-9_]+)", text, re.MULTILINE))
    # A family with no series yet (no runner has crashed) is declared all
    # the same: its counter or histogram series names count as exposed.
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    for family, kind in re.findall(r"^# TYPE (rkllm_[a-z0-9_]+) (\w+)$", text, re.MULTILINE):
        exposed |= {family + suffix for suffix in suffixes.get(kind, [""])}
    used = set()
    for _, expr in panel_queries():
        used |= metric_names(expr)
    assert used, "the dashboard names no metric"
    missing = sorted(used - exposed)
    assert not missing, f"in the dashboard, not in /metrics: {missing}"
    # The board's families over the fake RK3588 tree.
    for name in ["rkllm_npu_load_ratio", "rkllm_clock_frequency_hertz",
                 "rkllm_thermal_zone_temperature_celsius", "rkllm_memory_available_bytes"]:
        assert name in used, f"the dashboard has no panel for {name}"


def test_the_dashboard_imports_with_a_datasource_input():
    dashboard = json.loads(DASHBOARD.read_text())
    inputs = dashboard["__inputs"]
    assert [i["pluginId"] for i in inputs] == ["prometheus"]
    name = inputs[0]["name"]
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${%s}" % name, panel["title"]
