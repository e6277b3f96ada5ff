"""The model store through the official ollama client: pull with progress,
generate with the pulled model, delete. Hugging Face is played by
tests/fake-hf/fake_hf.py (a test double on loopback)."""

import json
import subprocess
import sys

import ollama
import pytest

from conftest import ROOT, start_server, stop_server

TEXT = "Hello from a pulled model. " * 20000


@pytest.fixture
def fake_hf(tmp_path):
    repos = {"repos": {"acme/tiny": {"files": {
        "README.md": {"text": "# tiny"},
        "tiny_w8a8_rk3588.rkllm": {"text": TEXT},
        "tiny_w8a8_rk3576.rkllm": {"text": "the other chip"},
    }}}}
    (tmp_path / "repos.json").write_text(json.dumps(repos))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake-hf" / "fake_hf.py"),
         str(tmp_path / "repos.json"), str(tmp_path / "requests.log")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    hub_port = proc.stdout.readline().split()[0]
    yield f"http://127.0.0.1:{hub_port}"
    proc.kill()
    proc.wait()


def test_ollama_client_pulls_with_progress_generates_and_deletes(fake_hf, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        f'[store]\nendpoint = "{fake_hf}"\nplatform = "rk3588"\nmodels_dir = "{tmp_path / "models"}"\n'
    )
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "0")
    try:
        client = ollama.Client(host=base, timeout=60)
        updates = list(client.pull("acme/tiny", stream=True))
        statuses = [u.status for u in updates]
        assert statuses[0] == "pulling manifest"
        assert statuses[-1] == "success"
        progress = [u for u in updates if u.completed is not None]
        assert progress and progress[-1].completed == progress[-1].total == len(TEXT.encode())
        assert progress[0].digest.startswith("sha256:")

        names = [m.model for m in client.list().models]
        assert "tiny_w8a8_rk3588" in names
        shown = client.show("tiny_w8a8_rk3588")
        assert shown.details.quantization_level == "w8a8"
        answer = client.generate(model="tiny_w8a8_rk3588", prompt="hi")
        assert answer.done and answer.response
        # What it was pulled as works too.
        assert client.generate(model="acme/tiny", prompt="hi").response == answer.response

        client.delete("tiny_w8a8_rk3588")
        assert "tiny_w8a8_rk3588" not in [m.model for m in client.list().models]
        with pytest.raises(ollama.ResponseError) as missing:
            client.delete("tiny_w8a8_rk3588")
        assert missing.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as bad:
            client.pull("acme/nope")
        assert "not found" in str(bad.value)
    finally:
        stop_server(proc)
