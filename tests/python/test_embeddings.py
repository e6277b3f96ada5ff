"""Embeddings through the official openai and ollama clients (the mock
backend's embedding model: rows computed from the text's bytes, as the
RKLLM test double makes them, so the expected vector is known)."""

import math

import ollama
import openai
import pytest

from conftest import start_server, stop_server

WIDTH = 32  # the mock's embedding width


def rows(text: str) -> list:
    data = text.encode()
    return [[data[(4 * t + d) % len(data)] / 255 for d in range(WIDTH)] for t in range((len(data) + 3) // 4)]


def last_unit(text: str) -> list:
    row = rows(text)[-1]
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row]


def close(got, want) -> bool:
    return len(got) == len(want) and all(abs(g - w) < 1e-5 for g, w in zip(got, want))


@pytest.fixture
def embed_server(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[[models]]\nname = "chat"\n[[models]]\nname = "emb"\nembedding = true\n')
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "0")
    yield base
    stop_server(proc)


def test_openai_client_embeddings(embed_server):
    client = openai.OpenAI(base_url=embed_server + "/v1", api_key="unused", max_retries=0)
    texts = ["Rock 5B", "Orange Pi 5 Plus with 16 GB"]
    # The client asks for base64 unless told otherwise, and decodes it.
    result = client.embeddings.create(model="emb", input=texts)
    assert [d.index for d in result.data] == [0, 1]
    assert all(close(d.embedding, last_unit(t)) for d, t in zip(result.data, texts))
    assert result.usage.prompt_tokens == sum((len(t) + 3) // 4 for t in texts)
    floats = client.embeddings.create(model="emb", input="Rock 5B", encoding_format="float")
    assert close(floats.data[0].embedding, last_unit("Rock 5B"))

    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model="emb", input="x", dimensions=8)
    with pytest.raises(openai.BadRequestError, match="not an embedding model"):
        client.embeddings.create(model="chat", input="x")


def test_ollama_client_embed_and_embeddings(embed_server):
    client = ollama.Client(host=embed_server)
    result = client.embed(model="emb", input=["Rock 5B", "Turing RK1"])
    assert close(result.embeddings[0], last_unit("Rock 5B"))
    assert close(result.embeddings[1], last_unit("Turing RK1"))
    legacy = client.embeddings(model="emb", prompt="Turing RK1")
    assert close(legacy.embedding, last_unit("Turing RK1"))
    assert client.show("emb").capabilities == ["embedding"]
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model="chat", input="x")
    assert refused.value.status_code == 400


def test_lora_selection_through_both_clients(tmp_path):
    """LoRA adapters on the runtime test double: selected with the OpenAI
    client's extra_body and Ollama's options, refused when unknown."""
    from conftest import build_fake

    runtime = build_fake(tmp_path)
    (tmp_path / "chat.rkllm").write_text("Plain answer.")
    (tmp_path / "pirate.lora").write_text("adapter")
    config = tmp_path / "config.toml"
    config.write_text(
        f'[[models]]\nname = "chat"\npath = "{tmp_path / "chat.rkllm"}"\n'
        f'[[models.lora]]\nname = "pirate"\npath = "{tmp_path / "pirate.lora"}"\n'
    )
    proc, base = start_server("--config", str(config), "--backend", "rkllm", "--runtime", str(runtime))
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], extra_body={"lora": "pirate"}
        )
        assert reply.choices[0].message.content == "[lora pirate] Plain answer."
        with pytest.raises(openai.BadRequestError, match="its adapters are: pirate"):
            client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "hi"}], extra_body={"lora": "poet"}
            )
        plain = ollama.Client(host=base).generate(model="chat", prompt="hi")
        assert plain.response == "Plain answer."
        with_lora = ollama.Client(host=base).generate(model="chat", prompt="hi", options={"lora": "pirate"})
        assert with_lora.response == "[lora pirate] Plain answer."
    finally:
        stop_server(proc)
