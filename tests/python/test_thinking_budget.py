"""Thinking budgets through the official clients, on the mock's long
thinking (`@mock(think=1,think_words=3000)`): the block is closed once its
budget is spent and the answer follows. Anthropic's `budget_tokens`,
Ollama's `think` levels and OpenAI's `reasoning_effort` (the documented
table: low 1,024, medium 4,096, max none); the mock is deterministic, so
the budgeted thinking is the start of the unbudgeted one."""

import anthropic
import ollama
import openai
import pytest

from conftest import start_server, stop_server

LONG = "@mock(think=1,think_words=3000,length=12) What is the answer?"


@pytest.fixture(scope="module")
def base():
    proc, url = start_server("--mock-tokens-per-second", "0")
    yield url
    stop_server(proc)


def full_thinking(base) -> str:
    reply = ollama.Client(host=base).chat(model="mock", think=True, messages=[{"role": "user", "content": LONG}])
    return reply.message.thinking


def test_anthropic_budget_tokens_ends_the_thinking_and_the_answer_follows(base):
    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    message = client.messages.create(model="mock", max_tokens=20000,
                                     thinking={"type": "enabled", "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": LONG}])
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text and message.stop_reason == "end_turn"
    whole = full_thinking(base)
    assert whole.startswith(thinking.strip()) and len(thinking) < len(whole) / 2
    # 1,024 thinking tokens, the closing tag's, and the answer's 12.
    assert 1024 + 12 <= message.usage.output_tokens <= 1024 + 12 + 16, message.usage
    # Streamed: the same thinking and answer.
    with client.messages.stream(model="mock", max_tokens=20000,
                                thinking={"type": "enabled", "budget_tokens": 1024},
                                messages=[{"role": "user", "content": LONG}]) as stream:
        final = stream.get_final_message()
    assert "".join(b.thinking for b in final.content if b.type == "thinking") == thinking
    assert "".join(b.text for b in final.content if b.type == "text") == text


@pytest.mark.parametrize("level,budget", [("low", 1024), ("medium", 4096)])
def test_ollama_think_levels_are_budgets(base, level, budget):
    reply = ollama.Client(host=base).chat(model="mock", think=level, messages=[{"role": "user", "content": LONG}])
    assert reply.message.content
    whole = full_thinking(base)
    assert whole.startswith(reply.message.thinking.strip()) and len(reply.message.thinking) < len(whole)
    assert budget + 12 <= reply.eval_count <= budget + 12 + 16


def test_openai_reasoning_effort_counts_its_budget_in_reasoning_tokens(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    low = client.chat.completions.create(model="mock", reasoning_effort="low",
                                         messages=[{"role": "user", "content": LONG}])
    reasoning = low.usage.completion_tokens_details.reasoning_tokens
    assert 1024 <= reasoning <= 1024 + 16, low.usage
    assert low.choices[0].message.content and low.choices[0].finish_reason == "stop"
    unlimited = client.chat.completions.create(model="mock", reasoning_effort="max",
                                               messages=[{"role": "user", "content": LONG}])
    assert unlimited.usage.completion_tokens_details.reasoning_tokens > 2 * reasoning
