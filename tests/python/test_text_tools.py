"""What a model answers without generating, and fill-in-the-middle, through
the clients that ask for them: /tokenize and /detokenize (llama.cpp's
shape) round trips of CJK and emoji checked against Hugging Face's own
`tokenizers`; /v1/rerank as Open WebUI's external reranker calls it, its
scores checked against the cosine of the mock's known embeddings, and by a
mock reranker model against the "yes" it gives by shared words; and
`suffix` through the official openai and ollama clients on a mock model
whose tokenizer has FIM tokens, refused for one without."""

import json
import math
import re

import httpx
import ollama
import openai
import pytest
from tokenizers import Tokenizer

from conftest import ROOT, start_server, stop_server

KEY = "text-tools-key"
WIDTH = 32  # the mock's embedding width
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"]
TEXTS = ["日本語のテキスト", "emoji 👋🏽 and 🦀", "naïve café ☕", "plain ascii", "<|endoftext|> special"]


def fim_tokenizer(path):
    """The mock's tokenizer with Qwen2.5-Coder's FIM tokens added."""
    tokenizer = json.loads((ROOT / "server" / "assets" / "mock-tokenizer.json").read_text())
    next_id = max(t["id"] for t in tokenizer["added_tokens"]) + 1
    for i, token in enumerate(FIM_TOKENS):
        tokenizer["added_tokens"].append({"id": next_id + i, "content": token, "single_word": False,
                                          "lstrip": False, "rstrip": False, "normalized": False,
                                          "special": True})
    path.write_text(json.dumps(tokenizer))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text-tools")
    tokenizer = fim_tokenizer(tmp / "coder-tokenizer.json")
    config = tmp / "config.toml"
    config.write_text(
        '[[models]]\nname = "mock"\n'
        f'[[models]]\nname = "coder"\nchat_template = "chatml"\ntokenizer = "{tokenizer}"\n'
        '[[models]]\nname = "emb"\nembedding = true\n'
        '[[models]]\nname = "judge"\nreranker = true\nchat_template = "chatml"\n'
    )
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "0", "--api-key", KEY)
    with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield base, client, Tokenizer.from_file(str(tokenizer))
    stop_server(proc)


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_is_the_models_tokenizer_and_detokenize_gives_the_text_back(server, text):
    _, client, reference = server
    tokens = client.post("/tokenize", json={"model": "coder", "content": text}).json()["tokens"]
    assert tokens == reference.encode(text, add_special_tokens=False).ids
    back = client.post("/detokenize", json={"model": "coder", "tokens": tokens}).json()
    assert back["content"] == text
    # Each piece is its token's bytes: a string when it is whole
    # characters, its byte values when it is part of one; joined, the text.
    pieces = client.post("/tokenize", json={"model": "coder", "content": text, "with_pieces": True}).json()
    assert [p["id"] for p in pieces["tokens"]] == tokens
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                      for p in pieces["tokens"])
    assert joined == text.encode()
    assert any(isinstance(p["piece"], list) for p in pieces["tokens"]) == any(ord(c) > 127 for c in text)


def test_tokenize_and_rerank_refuse_what_they_cannot_do(server):
    base, client, _ = server
    refused = client.post("/detokenize", json={"model": "coder", "tokens": [10**9]})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "tokens"
    unknown = client.post("/tokenize", json={"model": "nope", "content": "x"})
    assert unknown.status_code == 404 or unknown.status_code == 400
    assert "nope" in unknown.json()["error"]["message"]
    # The API key holds here as on every API route.
    assert httpx.post(base + "/tokenize", json={"content": "x"}).status_code == 401
    text_model = client.post("/v1/rerank", json={"model": "mock", "query": "q", "documents": ["d"]})
    assert text_model.status_code == 400
    error = text_model.json()["error"]
    assert error["param"] == "model" and "`mock`" in error["message"], error
    empty = client.post("/v1/rerank", json={"model": "emb", "query": "q", "documents": ["a", ""]})
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "documents"


def unit_last_row(text: str) -> list:
    """The mock's embedding of `text` (its last row, unit length)."""
    data = text.encode()
    rows = (len(data) + 3) // 4
    row = [data[(4 * (rows - 1) + d) % len(data)] / 255 for d in range(WIDTH)]
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row]


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def open_webui_rerank(base: str, model: str, query: str, docs: list) -> tuple:
    """Open WebUI's ExternalReranker.predict: this payload, a bearer key,
    the results sorted by index, their relevance scores read in order.
    Returns the answer and the scores in the documents' order."""
    response = httpx.post(base + "/v1/rerank", json={"model": model, "query": query, "documents": docs,
                                                     "top_n": len(docs)},
                          headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    response.raise_for_status()
    data = response.json()
    return data, [r["relevance_score"] for r in sorted(data["results"], key=lambda r: r["index"])]


def test_open_webuis_external_reranker_gets_the_cosine_of_each_document(server):
    base, _, _ = server
    query = "which board has an NPU?"
    docs = ["The Rock 5B has an RK3588.", "Bananas are yellow.", "Orange Pi 5 runs the NPU.", "日本語の文書"]
    data, scores = open_webui_rerank(base, "emb", query, docs)
    expected = [cosine(unit_last_row(query), unit_last_row(d)) for d in docs]
    assert len(scores) == len(docs)
    assert all(abs(s - e) < 1e-5 for s, e in zip(scores, expected)), (scores, expected)
    # As sent: most relevant first.
    assert [r["relevance_score"] for r in data["results"]] == sorted(scores, reverse=True)
    assert data["model"] == "emb" and data["usage"]["prompt_tokens"] > 0
    # top_n, Jina's document objects and return_documents.
    top = httpx.post(base + "/rerank", json={"model": "emb", "query": query, "top_n": 2,
                                             "documents": [{"text": d} for d in docs],
                                             "return_documents": True},
                     headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [r["index"] for r in top["results"]] == [r["index"] for r in data["results"]][:2]
    assert all(r["document"]["text"] == docs[r["index"]] for r in top["results"])


def mock_relevance(query: str, document: str) -> float:
    """The mock reranker's "yes" against "no": its "yes" is 0.05 + 0.9 times
    the share of the query's words (letters and digits, any case) the
    document has, its "no" 0.98 of the rest."""
    words = lambda text: {w.lower() for w in re.split(r"[^\w]|_", text) if w}
    asked = words(query)
    share = len(asked & words(document)) / len(asked)
    yes = 0.05 + 0.9 * share
    no = (1 - yes) * 0.98
    return yes / (yes + no)


def test_open_webuis_external_reranker_with_a_reranker_model(server):
    base, client, _ = server
    query = "which board has an NPU?"
    docs = ["The Rock 5B board has an NPU.", "Bananas are yellow.", "An NPU on a board.", "日本語の文書"]
    data, scores = open_webui_rerank(base, "judge", query, docs)
    expected = [mock_relevance(query, d) for d in docs]
    assert all(abs(s - e) < 1e-5 for s, e in zip(scores, expected)), (scores, expected)
    assert [r["index"] for r in data["results"]] == [0, 2, 1, 3]
    assert data["model"] == "judge" and data["usage"]["prompt_tokens"] > 0
    # The reranker still generates as any model does.
    said = client.post("/v1/chat/completions", json={"model": "judge", "max_tokens": 3,
                                                     "messages": [{"role": "user", "content": "hi"}]})
    assert said.status_code == 200


PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"


def test_fim_through_the_openai_and_ollama_clients(server):
    base, client, _ = server
    completions = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    whole = completions.completions.create(model="coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=8)
    assert whole.choices[0].text and whole.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in completions.completions.create(
        model="coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=8, stream=True) if c.choices)
    assert streamed
    ollama_client = ollama.Client(host=base, headers={"Authorization": f"Bearer {KEY}"})
    shown = ollama_client.show("coder")
    assert ".Suffix" in shown.template and "insert" in shown.capabilities
    assert "insert" not in ollama_client.show("mock").capabilities
    reply = ollama_client.generate(model="coder", prompt=PREFIX, suffix=SUFFIX, options={"num_predict": 6})
    assert reply.response and reply.done_reason == "length"
    # The prompt the model saw is counted: FIM tokens, prefix and suffix.
    reference = server[2]
    arranged = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    assert reply.prompt_eval_count == len(reference.encode(arranged, add_special_tokens=False).ids)
    # A model without FIM tokens: a 400 naming `suffix` and the model.
    with pytest.raises(openai.BadRequestError) as refused:
        completions.completions.create(model="mock", prompt=PREFIX, suffix=SUFFIX)
    assert refused.value.param == "suffix" and "`mock`" in refused.value.message
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client.generate(model="mock", prompt=PREFIX, suffix=SUFFIX)
    assert refused.value.status_code == 400 and "`mock`" in refused.value.error
    # A chat has no gap to fill.
    chat = client.post("/v1/chat/completions", json={"model": "coder", "suffix": "x",
                                                     "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "suffix"
