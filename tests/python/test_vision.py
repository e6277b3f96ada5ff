"""Images for a vision model through the official openai and ollama
clients, against the real server on the fake RKLLM and RKNN runtimes.

The fake encoder's embeddings are grid means of the pixels it was given;
the fake runtime's reply starts with "[image N: ... rgb=R,G,B ...]" per
image it received, so the colour of each picture can be checked on the
other side of the server.
"""

import base64
import os
import re
import struct
import zlib

import ollama
import openai
import pytest

from conftest import build_fake, build_fake_rknn, start_server, stop_server

TEXT = "A picture, described."
ENCODER = "fake-rknn width=64 height=64 channels=3 fmt=NHWC type=UINT8 tokens=8 dim=12 outputs=1"


def png(width: int, height: int, rgb: tuple) -> bytes:
    """A PNG of one colour, written by hand (no imaging library needed)."""
    row = b"\x00" + bytes(rgb) * width
    raw = row * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


# 200x150, padded with grey (128) to a square and resized to 64x64: the
# picture covers 48 of 64 rows, so a channel's mean is (48 c + 16 * 128) / 64.
RED = png(200, 150, (255, 0, 0))
GREEN = png(200, 150, (0, 255, 0))


def colours(text: str) -> list:
    return re.findall(r"\[image \d+: [^\]]*rgb=(\d+,\d+,\d+)", text)


@pytest.fixture
def vision_server(tmp_path):
    runtime, rknn = build_fake(tmp_path), build_fake_rknn(tmp_path)
    (tmp_path / "vl.rkllm").write_text(TEXT)
    (tmp_path / "vl.rknn").write_text(ENCODER)
    (tmp_path / "text.rkllm").write_text("Only text.")
    config = tmp_path / "config.toml"
    config.write_text(
        f'[[models]]\nname = "vl"\npath = "{tmp_path / "vl.rkllm"}"\nvision_encoder = "{tmp_path / "vl.rknn"}"\n'
        "[models.vision]\nmax_images = 2\n"
        f'[[models]]\nname = "text"\npath = "{tmp_path / "text.rkllm"}"\n'
    )
    os.environ["FAKE_RKLLM_EMBED_DIM"] = "12"
    try:
        proc, base = start_server(
            "--config", str(config), "--backend", "rkllm", "--runtime", str(runtime), "--rknn-runtime", str(rknn)
        )
    finally:
        del os.environ["FAKE_RKLLM_EMBED_DIM"]
    yield base
    stop_server(proc)


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


def test_openai_client_sends_images(vision_server):
    client = openai.OpenAI(base_url=vision_server + "/v1", api_key="unused", max_retries=0)
    models = {m.id: m for m in client.models.list()}
    assert models["vl"].model_extra["capabilities"] == ["completion", "vision"]
    assert models["text"].model_extra["capabilities"] == ["completion"]

    one = client.chat.completions.create(
        model="vl",
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": data_url(RED)}},
        ]}],
    )
    text = one.choices[0].message.content
    assert colours(text) == ["223,32,32"] and text.endswith(TEXT)

    # Two images in one message, streamed: their order is kept.
    chunks = client.chat.completions.create(
        model="vl",
        stream=True,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(GREEN)}},
            {"type": "text", "text": "versus"},
            {"type": "image_url", "image_url": {"url": data_url(RED)}},
        ]}],
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert colours(text) == ["32,223,32", "223,32,32"]

    with pytest.raises(openai.BadRequestError, match="does not take images"):
        client.chat.completions.create(
            model="text",
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(RED)}}]}],
        )
    with pytest.raises(openai.BadRequestError, match="not a JPEG, PNG or WebP"):
        client.chat.completions.create(
            model="vl",
            messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"GIF89a").decode()}}
            ]}],
        )
    # Nothing was disturbed.
    again = client.chat.completions.create(model="text", messages=[{"role": "user", "content": "hi"}])
    assert again.choices[0].message.content == "Only text."


def test_ollama_client_sends_images(vision_server, tmp_path):
    client = ollama.Client(host=vision_server)
    assert "vision" in client.show("vl").capabilities

    # Raw bytes (the client encodes them as base64).
    reply = client.chat(model="vl", messages=[{"role": "user", "content": "What is it?", "images": [GREEN]}])
    assert colours(reply.message.content) == ["32,223,32"]

    # Base64 text, and a file path, with generate.
    path = tmp_path / "red.png"
    path.write_bytes(RED)
    reply = client.generate(model="vl", prompt="Describe", images=[base64.b64encode(GREEN).decode(), str(path)])
    assert colours(reply.response) == ["32,223,32", "223,32,32"]

    streamed = "".join(
        part.response for part in client.generate(model="vl", prompt="Describe", images=[RED], stream=True)
    )
    assert colours(streamed) == ["223,32,32"]

    with pytest.raises(ollama.ResponseError) as too_many:
        client.generate(model="vl", prompt="x", images=[RED, RED, RED])
    assert too_many.value.status_code == 400 and "at most 2 images" in too_many.value.error
    with pytest.raises(ollama.ResponseError) as text_only:
        client.chat(model="text", messages=[{"role": "user", "content": "x", "images": [RED]}])
    assert text_only.value.status_code == 400 and "does not take images" in text_only.value.error


@pytest.mark.anyio
async def test_mcp_generate_tool_takes_images(vision_server):
    from mcp import Client

    async with Client(vision_server + "/mcp") as client:
        tools = await client.list_tools()
        assert "images" in tools.tools[0].input_schema["properties"]
        result = await client.call_tool(
            "generate", {"model": "vl", "prompt": "What is it?", "images": [base64.b64encode(RED).decode()]}
        )
        assert not result.is_error and colours(result.structured_content["text"]) == ["223,32,32"]
        refused = await client.call_tool("generate", {"model": "text", "prompt": "x", "images": [data_url(RED)]})
        assert refused.is_error and "does not take images" in refused.content[0].text
