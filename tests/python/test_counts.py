"""Token counts are the model's tokenizer's, not a guess: for a mixed
CJK/emoji/English text, Anthropic's `count_tokens` and `usage.input_tokens`,
the Responses API's `input_tokens`, OpenAI's `usage.prompt_tokens` and
Ollama's `prompt_eval_count` each equal the count of the prompt as the
model sees it (rendered in its own template where it has one), by the
model's `tokenizer.json` read with Hugging Face's own `tokenizers`. The
context check counts the same way: a prompt whose bytes would pass for
few tokens but whose tokens do not fit is refused."""

import anthropic
import httpx
import ollama
import openai
import pytest

from conftest import mock_tokens, start_server, stop_server

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

CONFIG = f"""
[mock]
tokens_per_second = 0
prefill_ms = 0

[[models]]
name = "mock"

[[models]]
name = "templated"
chat_template = {{ jinja = "{TEMPLATE}", eos_token = "<|eot|>" }}

[[models]]
name = "small"
max_context_len = 100
"""

TEXT = "東京の天気は？ 🌦️👋🏽 Is it raining in Zürich, or is it sunny? データ"


def rendered(text: str) -> str:
    """What the model "templated" is given for one user message."""
    return f"<|user|>{text}<|end|><|assistant|>"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    config = tmp_path_factory.mktemp("counts") / "rkllm-server.toml"
    config.write_text(CONFIG)
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


@pytest.mark.parametrize("model,seen", [("mock", TEXT), ("templated", rendered(TEXT))])
def test_every_api_counts_the_prompt_with_the_models_tokenizer(base, model, seen):
    expected = mock_tokens(seen)
    # Not the old guess of four bytes a token.
    assert expected != -(-len(seen.encode()) // 4)
    messages = [{"role": "user", "content": TEXT}]

    claude = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    assert claude.messages.count_tokens(model=model, messages=messages).input_tokens == expected
    sent = claude.messages.create(model=model, max_tokens=8, messages=messages)
    assert sent.usage.input_tokens == expected

    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    assert chat.usage.prompt_tokens == expected
    response = client.responses.create(model=model, input=TEXT, max_output_tokens=8)
    assert response.usage.input_tokens == expected
    counted = httpx.post(base + "/v1/responses/input_tokens",
                         json={"model": model, "input": TEXT}, timeout=60).json()
    assert counted["input_tokens"] == expected

    answer = ollama.Client(host=base).chat(model=model, messages=messages, options={"num_predict": 8})
    assert answer.prompt_eval_count == expected


def test_the_context_check_counts_tokens_not_bytes(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    # 40 CJK characters: 120 bytes, "30 tokens" by the old guess, 120 by the
    # tokenizer: over the small model's 100.
    text = "東" * 40
    assert -(-len(text.encode()) // 4) <= 100 < mock_tokens(text)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="small", messages=[{"role": "user", "content": text}])
    assert "by its tokenizer" in refused.value.message
    assert refused.value.code == "context_length_exceeded"
    # What fits by its count is served.
    fits = "東" * 30
    chat = client.chat.completions.create(model="small", messages=[{"role": "user", "content": fits}], max_tokens=4)
    assert chat.usage.prompt_tokens == mock_tokens(fits)
