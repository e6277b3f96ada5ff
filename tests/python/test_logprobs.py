"""Token log probabilities through the official openai and ollama clients,
streamed and not, on the mock (its own plausible values): each token's
bytes, joined, are the answer's; every logprob is at most 0; the
alternatives come sorted, at most as many as asked, with probabilities that
sum to at most 1; a token that is only part of a character is written as
OpenAI writes it (`bytes:\\xNN`). A request that asks for more than 20
alternatives, or for log probabilities under a format, is refused naming
the field."""

import math

import httpx
import ollama
import openai
import pytest

from conftest import start_server, stop_server

PROMPT = "Say something @mock(length=24)"


@pytest.fixture(scope="module")
def base():
    proc, url = start_server("--mock-tokens-per-second", "0")
    yield url
    stop_server(proc)


def token_bytes(entry) -> bytes:
    """A token's bytes: its `bytes` where the client keeps them (openai),
    else read back from its text (the ollama client keeps `token` only)."""
    raw = getattr(entry, "bytes", None)
    if raw is not None:
        return bytes(raw)
    token = entry.token
    if token.startswith("bytes:"):
        return bytes(int(h, 16) for h in token[len("bytes:"):].split("\\x")[1:])
    return token.encode()


def check_entries(entries, text: str, top: int):
    assert entries, "no log probabilities"
    assert b"".join(token_bytes(e) for e in entries) == text.encode()
    for e in entries:
        assert e.logprob <= 0
        raw = token_bytes(e)
        try:
            assert e.token == raw.decode()
        except UnicodeDecodeError:
            assert e.token == "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
        values = [a.logprob for a in (e.top_logprobs or [])]
        assert len(values) <= top and values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1 + 1e-6


def test_openai_chat_logprobs_whole_and_streamed(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(model="mock", messages=messages, logprobs=True, top_logprobs=3)
    text = whole.choices[0].message.content
    check_entries(whole.choices[0].logprobs.content, text, 3)
    assert all(len(e.top_logprobs) == 3 for e in whole.choices[0].logprobs.content)
    entries, streamed = [], ""
    for chunk in client.chat.completions.create(model="mock", messages=messages, logprobs=True,
                                                top_logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            streamed += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            entries += chunk.choices[0].logprobs.content
    assert streamed == text
    check_entries(entries, streamed, 2)
    # The same request gives the same values (the mock is deterministic).
    again = client.chat.completions.create(model="mock", messages=messages, logprobs=True, top_logprobs=3)
    assert [e.logprob for e in again.choices[0].logprobs.content] == \
        [e.logprob for e in whole.choices[0].logprobs.content]
    # Without `logprobs`, none.
    plain = client.chat.completions.create(model="mock", messages=messages)
    assert plain.choices[0].logprobs is None


def test_openai_completions_logprobs(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    done = client.completions.create(model="mock", prompt=PROMPT, logprobs=2, max_tokens=16)
    lp = done.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 16
    assert all(v <= 0 for v in lp.token_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert all(len(alternatives) <= 2 for alternatives in lp.top_logprobs)
    offsets = []
    for chunk in client.completions.create(model="mock", prompt=PROMPT, logprobs=2, max_tokens=16, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            offsets += chunk.choices[0].logprobs.text_offset
    assert offsets == lp.text_offset


def test_responses_logprobs_in_the_text_part_and_its_deltas(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    include = ["message.output_text.logprobs"]
    whole = client.responses.create(model="mock", input=PROMPT, include=include, top_logprobs=3)
    part = whole.output[0].content[0]
    assert part.text == whole.output_text
    check_entries(part.logprobs, part.text, 3)
    assert all(len(e.top_logprobs) == 3 for e in part.logprobs)
    deltas, done, streamed = [], None, ""
    with client.responses.stream(model="mock", input=PROMPT, include=include, top_logprobs=2) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                streamed += event.delta
                deltas += event.logprobs
            elif event.type == "response.output_text.done":
                done = event
    check_entries(deltas, streamed, 2)
    assert [e.logprob for e in done.logprobs] == [e.logprob for e in deltas]
    final = events.get_final_response()
    assert [e.token for e in final.output[0].content[0].logprobs] == [e.token for e in deltas]
    # Without the `include` value, none: the part has no `logprobs`, the deltas an empty list.
    plain = client.responses.create(model="mock", input=PROMPT)
    assert plain.output[0].content[0].logprobs is None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_ollama_logprobs_on_chat_and_generate(base, stream):
    client = ollama.Client(host=base)
    replies = client.chat(model="mock", messages=[{"role": "user", "content": PROMPT}], logprobs=True,
                          top_logprobs=2, stream=stream)
    replies = list(replies) if stream else [replies]
    text = "".join(r.message.content for r in replies)
    entries = [e for r in replies for e in (r.logprobs or [])]
    check_entries(entries, text, 2)
    replies = client.generate(model="mock", prompt=PROMPT, logprobs=True, stream=stream)
    replies = list(replies) if stream else [replies]
    text = "".join(r.response for r in replies)
    entries = [e for r in replies for e in (r.logprobs or [])]
    check_entries(entries, text, 0)


def test_what_cannot_be_given_is_refused_naming_the_field(base):
    with httpx.Client(base_url=base, timeout=30) as http:
        too_many = http.post("/v1/chat/completions", json={
            "model": "mock", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21})
        assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "top_logprobs"
        formatted = http.post("/v1/chat/completions", json={
            "model": "mock", "messages": [{"role": "user", "content": "hi"}], "logprobs": True,
            "response_format": {"type": "json_object"}})
        assert formatted.status_code == 400 and formatted.json()["error"]["param"] == "logprobs"
        responses_top = http.post("/v1/responses", json={"model": "mock", "input": "hi", "top_logprobs": 2})
        assert responses_top.status_code == 400 and responses_top.json()["error"]["param"] == "top_logprobs"
        responses_format = http.post("/v1/responses", json={
            "model": "mock", "input": "hi", "include": ["message.output_text.logprobs"],
            "text": {"format": {"type": "json_object"}}})
        assert responses_format.status_code == 400 and responses_format.json()["error"]["param"] == "include"
        ollama_top = http.post("/api/chat", json={
            "model": "mock", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2, "stream": False})
        assert ollama_top.status_code == 400 and "top_logprobs" in ollama_top.json()["error"]


def check_picks(entries, greedy: bool):
    """The token picked is the first alternative under greedy sampling,
    and among the alternatives with its own logprob otherwise."""
    assert entries, "no log probabilities"
    for e in entries:
        top = [(token_bytes(a), a.logprob) for a in e.top_logprobs]
        if greedy:
            assert top[0] == (token_bytes(e), e.logprob), (e, top)
        else:
            assert (token_bytes(e), e.logprob) in top, (e, top)


@pytest.mark.parametrize("temperature", [0.0, 0.8], ids=["greedy", "sampled"])
def test_the_mocks_picks_agree_with_its_alternatives_on_every_api(base, temperature):
    greedy = temperature == 0.0
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(model="mock", messages=messages, logprobs=True, top_logprobs=3,
                                           temperature=temperature)
    check_picks(whole.choices[0].logprobs.content, greedy)
    streamed = client.chat.completions.create(model="mock", messages=messages, logprobs=True, top_logprobs=3,
                                              temperature=temperature, stream=True)
    check_picks([e for c in streamed if c.choices and c.choices[0].logprobs
                 for e in c.choices[0].logprobs.content], greedy)
    include = ["message.output_text.logprobs"]
    response = client.responses.create(model="mock", input=PROMPT, include=include, top_logprobs=3,
                                       temperature=temperature)
    check_picks(response.output[0].content[0].logprobs, greedy)
    deltas = []
    with client.responses.stream(model="mock", input=PROMPT, include=include, top_logprobs=3,
                                 temperature=temperature) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                deltas += event.logprobs
    check_picks(deltas, greedy)
    local = ollama.Client(host=base)
    options = {"temperature": temperature}
    chat = local.chat(model="mock", messages=messages, logprobs=True, top_logprobs=3, options=options)
    check_picks(chat.logprobs, greedy)
    generated = local.generate(model="mock", prompt=PROMPT, logprobs=True, top_logprobs=3, options=options)
    check_picks(generated.logprobs, greedy)


def test_a_seed_picks_the_mocks_words_and_the_same_seed_the_same_ones(base):
    client = ollama.Client(host=base)
    said = {
        seed: client.generate(model="mock", prompt="Tell a story @mock(length=16)",
                              options={"seed": seed, "temperature": 0.8}).response
        for seed in (11, 12, 13, 14)
    }
    assert len(set(said.values())) == 4, said
    again = client.generate(model="mock", prompt="Tell a story @mock(length=16)",
                            options={"seed": 12, "temperature": 0.8}).response
    assert again == said[12]
    # Greedy sampling takes the likeliest words whatever the seed.
    greedy = {
        client.generate(model="mock", prompt="Tell a story @mock(length=16)",
                        options={"seed": seed, "temperature": 0}).response
        for seed in (11, 12)
    }
    assert len(greedy) == 1, greedy
    # The same through OpenAI's `seed`.
    openai_client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    texts = [
        openai_client.chat.completions.create(
            model="mock", messages=[{"role": "user", "content": "Tell a story @mock(length=16)"}],
            seed=seed, temperature=0.8).choices[0].message.content
        for seed in (11, 12, 11)
    ]
    assert texts[0] == texts[2] != texts[1], texts
