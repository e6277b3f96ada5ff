"""Assistant prefill through the official clients (anthropic, openai, ollama)
against the mock backend: a conversation whose last message is the
assistant's is continued, not refused. The model's input ends inside that
message (no end of turn after it, no new reply opened), and the reply is
only the continuation.

The model "templated" has a chat template of its own that writes every
role and the end of each turn (`<|end|>`; its end-of-text token is another,
so the echo is not cut there), and `@mock(echo=1)` makes the mock repeat
what follows the directive in its input: so the reply shows where the input
ended. The model "mock" keeps the runtime's own template (the mock's stands
in for it and puts the start of the reply after its reply header)."""

import anthropic
import ollama
import openai
import pytest

from conftest import start_server, stop_server

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

CONFIG = f"""
[mock]
tokens_per_second = 0
prefill_ms = 0

[[models]]
name = "templated"
chat_template = {{ jinja = "{TEMPLATE}", eos_token = "<|eot|>" }}

[[models]]
name = "mock"
"""

QUESTION = "Give me a JSON object. @mock(echo=1)"
PREFILL = "Sure, here is"
# What the echo repeats: the input after the directive, up to its end.
CONTINUED = "<|end|><|assistant|>Sure, here is"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    config = tmp_path_factory.mktemp("prefill") / "rkllm-server.toml"
    config.write_text(CONFIG)
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


def test_anthropic_continues_the_assistants_message(base):
    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    message = client.messages.create(
        model="templated",
        max_tokens=200,
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": PREFILL},
        ],
    )
    text = "".join(block.text for block in message.content if block.type == "text")
    # The input ended inside the assistant's message: nothing after it.
    assert text.strip() == CONTINUED, text
    assert message.stop_reason == "end_turn"
    # Streamed alike.
    with client.messages.stream(
        model="templated",
        max_tokens=200,
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": PREFILL},
        ],
    ) as stream:
        streamed = "".join(stream.text_stream)
    assert streamed.strip() == CONTINUED, streamed


def test_openai_chat_continues_the_assistants_message(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    completion = client.chat.completions.create(
        model="templated",
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": PREFILL},
        ],
    )
    assert completion.choices[0].message.content.strip() == CONTINUED
    assert completion.choices[0].finish_reason == "stop"


def test_ollama_chat_continues_the_assistants_message(base):
    client = ollama.Client(host=base)
    response = client.chat(
        model="templated",
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": PREFILL},
        ],
    )
    assert response.message.content.strip() == CONTINUED
    assert response.done_reason == "stop"


def test_the_runtimes_own_template_puts_the_start_after_its_reply_header(base):
    # The mock's stand-in for a runtime template opens the reply, then the
    # start of the reply follows: the echo ends with it.
    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    message = client.messages.create(
        model="mock",
        max_tokens=200,
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": PREFILL},
        ],
    )
    text = "".join(block.text for block in message.content if block.type == "text")
    assert text.strip().endswith(PREFILL), text


def test_an_assistant_message_alone_is_refused_naming_messages(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="templated", messages=[{"role": "assistant", "content": PREFILL}]
        )
    assert "must follow a user message" in str(refused.value)
