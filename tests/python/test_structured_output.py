"""Structured output through the official clients and raw HTTP, against the
mock backend: generated JSON schemas through OpenAI (`response_format`,
strict and not), Ollama (`format`) and JSON-RPC `run` (`format`), streamed
and not, each answer parsed and validated with `jsonschema`; JSON mode;
the string formats; the refusals on every API; a constrained stream closed
early.

The mock holds its answer to the constraint token by token over its own
small tokenizer, as the runner does on the NPU: it proposes the answer it
would give without the constraint, keeps each token the constraint allows
and corrects only a refused one. An echoed instance comes back as it is;
where its own text cannot go on, it ends as soon as it may, with plausible
values for string formats. The clients' structured-output helpers, forced
tool calls, thinking and MCP are in test_structured_clients.py."""

import datetime
import ipaddress
import json
import re
import time
import uuid

import httpx
import ollama
import openai
import pytest

import schemas
from conftest import start_server, stop_server

CONFIG = """
[mock]
tokens_per_second = 400
prefill_ms = 0

[[models]]
name = "mock"
"""
# The seeds of the generated schemas (schemas.generate); a failure names
# its seed, which makes the same schema again.
SEEDS = list(range(16))


def start(tmp_path, *args: str):
    config = tmp_path / "rkllm-server.toml"
    config.write_text(CONFIG)
    return start_server("--config", str(config), *args)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    proc, url = start(tmp_path_factory.mktemp("structured"))
    yield url
    stop_server(proc)


def openai_client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def ollama_client(base: str) -> ollama.Client:
    return ollama.Client(host=base, timeout=60)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def json_schema(schema, strict: bool = False, name: str = "answer") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


def rpc_call(base: str, method: str, params: dict) -> dict:
    """One JSON-RPC call over HTTP: its whole reply."""
    reply = httpx.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                       timeout=60)
    return reply.json()


def rpc(base: str, method: str, params: dict) -> dict:
    body = rpc_call(base, method, params)
    assert "error" not in body, body
    return body["result"]


def rpc_stream(base: str, params: dict) -> list[dict]:
    """A streamed `run`, polled to its end chunk; its chunks."""
    stream_id = rpc(base, "run", {**params, "stream": True})["stream_id"]
    chunks: list[dict] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        polled = rpc(base, "run", {"stream_id": stream_id, "from_seq": len(chunks), "wait_ms": 5000})
        chunks += polled["chunks"]
        if not polled["has_more"]:
            assert chunks[-1]["end"]
            return chunks
    pytest.fail(f"stream {stream_id} did not end")


def compact(value) -> str:
    """JSON as the server writes a constrained answer: `, ` and `: `,
    no other white space."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def check(answer: str, schema, finish_reason: str):
    """A complete answer: valid against its schema, written compactly."""
    assert finish_reason == "stop", f"{finish_reason}: {answer!r}"
    value = schemas.validate(answer, schema)
    assert answer == compact(value)
    return value


# --------------------------------------------------- the generated schemas


def test_the_seeds_cover_every_feature():
    covered = set().union(*(schemas.features(schemas.generate(seed)) for seed in SEEDS))
    assert covered == schemas.FEATURES
    # And the same seed makes the same schema.
    assert schemas.generate(SEEDS[3]) == schemas.generate(SEEDS[3])


@pytest.mark.parametrize("strict", [False, True], ids=["schema", "strict"])
@pytest.mark.parametrize("seed", SEEDS)
def test_openai_response_format_json_schema(base, seed, strict):
    schema = schemas.generate(seed)
    if strict:
        schema = schemas.strict(schema)
    client = openai_client(base)
    ask = dict(model="mock", messages=user(f"Fill this in, case {seed}."),
               response_format=json_schema(schema, strict))
    whole = client.chat.completions.create(**ask)
    choice = whole.choices[0]
    value = check(choice.message.content, schema, choice.finish_reason)
    assert not choice.message.tool_calls

    chunks = list(client.chat.completions.create(**ask, stream=True))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    # The same answer, streamed in pieces as it is produced.
    assert "".join(deltas) == choice.message.content
    assert len([d for d in deltas if d]) > 1
    assert json.loads("".join(deltas)) == value


@pytest.mark.parametrize("seed", SEEDS)
def test_ollama_format_schema(base, seed):
    schema = schemas.generate(seed)
    client = ollama_client(base)
    prompt = f"Fill this in, case {seed}."

    chat = client.chat(model="mock", messages=user(prompt), format=schema)
    check(chat.message.content, schema, chat.done_reason)
    parts = list(client.chat(model="mock", messages=user(prompt), format=schema, stream=True))
    assert "".join(p.message.content for p in parts) == chat.message.content
    assert len(parts) > 2 and parts[-1].done_reason == "stop"

    generated = client.generate(model="mock", prompt=prompt, format=schema)
    check(generated.response, schema, generated.done_reason)
    parts = list(client.generate(model="mock", prompt=prompt, format=schema, stream=True))
    assert "".join(p.response for p in parts) == generated.response
    assert parts[-1].done_reason == "stop"


@pytest.mark.parametrize("seed", SEEDS)
def test_json_rpc_run_format_schema(base, seed):
    schema = schemas.generate(seed)
    params = {"prompt": f"Fill this in, case {seed}.", "format": schema}
    result = rpc(base, "run", params)
    check(result["text"], schema, result["finish_reason"])

    chunks = rpc_stream(base, params)
    assert "".join(c["delta"] for c in chunks) == result["text"]
    assert chunks[-1]["finish_reason"] == "stop"
    assert len([c for c in chunks if c["delta"]]) > 1


@pytest.mark.parametrize("seed", SEEDS)
def test_forced_tool_call_with_generated_parameters(base, seed):
    """A generated schema as a tool's parameters ($refs to its own $defs
    included), the call forced by name: the arguments validate."""
    schema = schemas.generate(seed)
    tools = [{"type": "function", "function": {"name": "fill", "parameters": schema}},
             {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]
    client = openai_client(base)
    ask = dict(model="mock", messages=user(f"Fill this in, case {seed}."), tools=tools,
               tool_choice={"type": "function", "function": {"name": "fill"}})
    choice = client.chat.completions.create(**ask).choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "fill"
    schemas.validate(call.function.arguments, schema)
    chunks = list(client.chat.completions.create(**ask, stream=True))
    fragments = [c.function.arguments for chunk in chunks if chunk.choices
                 for c in chunk.choices[0].delta.tool_calls or [] if c.function.arguments]
    assert len(fragments) > 1 and "".join(fragments) == call.function.arguments


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_sampling_settings_keep_the_answer_valid(base, temperature):
    """The request's sampling picks among the allowed tokens only."""
    schema = schemas.generate(SEEDS[5])
    for case in range(4):
        result = rpc(base, "run", {"prompt": f"case {case}", "format": schema, "temperature": temperature,
                                   "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.3})
        check(result["text"], schema, result["finish_reason"])


# ------------------------------------------------- the mock's own values

CITY = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["name", "population"]}
PARIS = '{"name": "Paris", "population": 2100000}'
ECHO_PARIS = f"@mock(echo=1) {PARIS}"


@pytest.mark.parametrize("strict", [False, True], ids=["schema", "strict"])
def test_an_echoed_instance_comes_back_as_it_is(base, strict):
    """The mock proposes its own answer and the constraint allows every
    token of it: the answer is the echoed instance, on every API."""
    schema = schemas.strict(CITY) if strict else CITY
    client = openai_client(base)
    for response_format in [json_schema(schema, strict), {"type": "json_object"}]:
        choice = client.chat.completions.create(model="mock", messages=user(ECHO_PARIS),
                                                response_format=response_format).choices[0]
        assert (choice.message.content, choice.finish_reason) == (PARIS, "stop")
    chat = ollama_client(base).chat(model="mock", messages=user(ECHO_PARIS), format=schema)
    assert (chat.message.content, chat.done_reason) == (PARIS, "stop")
    generated = ollama_client(base).generate(model="mock", prompt=ECHO_PARIS, format="json")
    assert generated.response == PARIS
    result = rpc(base, "run", {"prompt": ECHO_PARIS, "format": schema})
    assert (result["text"], result["finish_reason"]) == (PARIS, "stop")
    assert "".join(c["delta"] for c in rpc_stream(base, {"prompt": ECHO_PARIS, "format": schema})) == PARIS


def test_an_echo_that_breaks_the_schema_is_corrected_keeping_what_fits(base):
    result = rpc(base, "run", {"prompt": '@mock(echo=1) {"name": 5}', "format": CITY})
    # A number where a string is due is written as one; the missing member
    # is the least that fits.
    assert check(result["text"], CITY, result["finish_reason"]) == {"name": "5", "population": 1}
    pretty = '@mock(echo=1) {\n  "name":"Paris",\n  "population":   2100000\n}'
    result = rpc(base, "run", {"prompt": pretty, "format": CITY})
    assert result["text"] == PARIS


# ----------------------------------------------------------- JSON mode


def test_openai_json_object(base):
    client = openai_client(base)
    ask = dict(model="mock", messages=user("A JSON object, please."), response_format={"type": "json_object"})
    choice = client.chat.completions.create(**ask).choices[0]
    assert isinstance(check(choice.message.content, {"type": "object"}, choice.finish_reason), dict)
    chunks = list(client.chat.completions.create(**ask, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content


def test_ollama_format_json(base):
    client = ollama_client(base)
    chat = client.chat(model="mock", messages=user("A JSON object, please."), format="json")
    assert isinstance(check(chat.message.content, {"type": "object"}, chat.done_reason), dict)
    parts = list(client.generate(model="mock", prompt="A JSON object, please.", format="json", stream=True))
    text = "".join(p.response for p in parts)
    assert isinstance(check(text, {"type": "object"}, parts[-1].done_reason), dict)


def test_json_rpc_format_json(base):
    result = rpc(base, "run", {"prompt": "A JSON object, please.", "format": "json"})
    assert isinstance(check(result["text"], {"type": "object"}, result["finish_reason"]), dict)
    # "text" is free text, as without a format.
    free = rpc(base, "run", {"prompt": "Hello", "format": "text"})
    assert free["text"] == rpc(base, "run", {"prompt": "Hello"})["text"]


def test_a_json_schema_of_true_or_none_is_any_json_value(base):
    client = openai_client(base)
    for spec in [{"name": "any"}, {"name": "any", "schema": True}]:
        choice = client.chat.completions.create(
            model="mock", messages=user("Anything"),
            response_format={"type": "json_schema", "json_schema": spec}).choices[0]
        assert choice.finish_reason == "stop"
        json.loads(choice.message.content)


def test_a_cap_cuts_a_constrained_answer_as_any_other(base):
    """`max_tokens` ends the answer where it is (finish_reason `length`):
    the cut answer is the start of the whole one."""
    schema = {"type": "object", "properties": {"words": {"type": "array", "items": {"enum": ["alpha", "beta"]},
                                                         "minItems": 6}}, "required": ["words"]}
    client = openai_client(base)
    ask = dict(model="mock", messages=user("Words"), response_format=json_schema(schema))
    whole = client.chat.completions.create(**ask).choices[0]
    check(whole.message.content, schema, whole.finish_reason)
    capped = client.chat.completions.create(**ask, max_tokens=5)
    assert capped.choices[0].finish_reason == "length" and capped.usage.completion_tokens == 5
    assert whole.message.content.startswith(capped.choices[0].message.content)


def test_min_properties_beyond_the_required_names_is_refused_not_broken(base):
    # The engine does not keep open members' names apart: a count of
    # members above the required names could be met by repeating a name
    # ({"": "", "": ""}), so it is refused rather than answered wrongly.
    schema = {"type": "object", "minProperties": 2}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(base).chat.completions.create(
            model="mock", messages=user("Two members"), response_format=json_schema(schema))
    assert refused.value.param == "response_format" and "minProperties" in refused.value.message
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client(base).generate(model="mock", prompt="x", format=schema)
    assert refused.value.status_code == 400 and "minProperties" in refused.value.error
    # Met by the names it requires: followed, and the answer has them.
    named = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
             "required": ["a", "b"], "minProperties": 2, "additionalProperties": False}
    choice = openai_client(base).chat.completions.create(
        model="mock", messages=user("Two members"), response_format=json_schema(named)).choices[0]
    assert choice.finish_reason == "stop"
    schemas.validate(choice.message.content, named)


# -------------------------------------------------------------- formats

# Formats the engine cannot follow: refused, never ignored.
UNSUPPORTED_FORMATS = ["idn-email", "iri", "iri-reference", "uri-reference", "uri-template", "idn-hostname",
                       "json-pointer", "relative-json-pointer", "regex", "a-format-nobody-knows"]
FOLLOWED_FORMATS = ["date", "date-time", "time", "uuid", "ipv4", "ipv6", "hostname", "email", "uri", "duration"]
FORMAT_PROMPTS = [f"A value, case {case}" for case in range(6)]


def format_schema(name: str) -> dict:
    return {"type": "object", "properties": {"value": {"type": "string", "format": name}}, "required": ["value"],
            "additionalProperties": False}


def format_answers(base: str, name: str) -> list:
    client = openai_client(base)
    return [client.chat.completions.create(model="mock", messages=user(prompt), max_tokens=60,
                                           response_format=json_schema(format_schema(name))).choices[0]
            for prompt in FORMAT_PROMPTS]


@pytest.mark.parametrize("name", FOLLOWED_FORMATS)
def test_a_finished_answer_is_valid_in_every_format(base, name):
    """Whatever the mock makes of a format, what it finishes is valid
    (checked by schemas.FORMAT_CHECKER), and a cut answer is a prefix of
    a valid one: it says `length`."""
    for choice in format_answers(base, name):
        if choice.finish_reason == "stop":
            check(choice.message.content, format_schema(name), "stop")
        else:
            assert choice.finish_reason == "length"
            assert choice.message.content.startswith('{"value": "')


@pytest.mark.parametrize("name", FOLLOWED_FORMATS)
def test_the_mock_finishes_every_format(base, name):
    assert [choice.finish_reason for choice in format_answers(base, name)] == ["stop"] * len(FORMAT_PROMPTS)


# How Python reads a value of each format: what the mock invents must read.
PARSERS = {
    "date": datetime.date.fromisoformat,
    "date-time": datetime.datetime.fromisoformat,
    "time": datetime.time.fromisoformat,
    "uuid": uuid.UUID,
    "ipv4": ipaddress.IPv4Address,
    "ipv6": ipaddress.IPv6Address,
    "email": lambda v: re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+", v) or pytest.fail(v),
    "uri": lambda v: re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s]+", v) or pytest.fail(v),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_an_invented_value_is_plausible_for_its_format(base, name):
    """The mock's words cannot be a date or an address: it writes a
    plausible one (a date 2024-01-01, user@example.com, ...), which
    Python's own parsers read."""
    for prompt in [*FORMAT_PROMPTS[:2], '@mock(echo=1) {"value": 5}']:
        choice = openai_client(base).chat.completions.create(
            model="mock", messages=user(prompt), response_format=json_schema(format_schema(name))).choices[0]
        PARSERS[name](check(choice.message.content, format_schema(name), choice.finish_reason)["value"])
    # Its own value, in the format, is kept.
    choice = openai_client(base).chat.completions.create(
        model="mock", messages=user('@mock(echo=1) {"value": "1999-12-31"}'),
        response_format=json_schema(format_schema("date"))).choices[0]
    assert choice.message.content == '{"value": "1999-12-31"}'


@pytest.mark.parametrize("name", UNSUPPORTED_FORMATS)
def test_a_format_the_engine_cannot_follow_is_refused(base, name):
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(base).chat.completions.create(model="mock", messages=user("x"),
                                                    response_format=json_schema(format_schema(name)))
    assert refused.value.param == "response_format"
    assert "cannot be followed" in refused.value.message and name in refused.value.message
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client(base).generate(model="mock", prompt="x", format=format_schema(name))
    assert refused.value.status_code == 400 and name in refused.value.error
    error = rpc_call(base, "run", {"prompt": "x", "format": format_schema(name)})["error"]
    assert error["data"]["field"] == "format" and name in error["message"]


# ------------------------------------------------------------- refusals

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
# Schemas the engine cannot compile, and the words of the error.
UNCOMPILABLE = [
    pytest.param({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]},
                 "missing", id="dangling-ref"),
    pytest.param({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
                 "uniqueItems", id="uniqueItems"),
    pytest.param({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not", id="not"),
    pytest.param({"oneOf": [{"type": "object"}, {"type": "object", "required": ["a"]}]}, "oneOf", id="oneOf"),
    pytest.param({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 3}},
                  "required": ["n"]}, "unsatisfiable", id="unsatisfiable"),
]


def names_field(message: str, field: str) -> bool:
    return re.search("`" + re.escape(field) + r"\b", message) is not None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("schema,words", UNCOMPILABLE)
def test_openai_refuses_a_schema_it_cannot_follow(base, schema, words, stream):
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(base).chat.completions.create(model="mock", messages=user("x"),
                                                    response_format=json_schema(schema), stream=stream)
    assert refused.value.status_code == 400 and refused.value.param == "response_format"
    assert names_field(refused.value.message, "response_format") and words in refused.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("schema,words", UNCOMPILABLE)
def test_ollama_refuses_a_schema_it_cannot_follow(base, schema, words, stream):
    client = ollama_client(base)
    for call in (lambda: client.chat(model="mock", messages=user("x"), format=schema, stream=stream),
                 lambda: client.generate(model="mock", prompt="x", format=schema, stream=stream)):
        with pytest.raises(ollama.ResponseError) as refused:
            reply = call()
            if stream:
                list(reply)
        assert refused.value.status_code == 400
        assert names_field(refused.value.error, "format") and words in refused.value.error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("schema,words", UNCOMPILABLE)
def test_json_rpc_refuses_a_schema_it_cannot_follow(base, schema, words, stream):
    body = rpc_call(base, "run", {"prompt": "x", "format": schema, "stream": stream})
    error = body["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "format"
    assert names_field(error["message"], "format") and words in error["message"]


# (fields of a chat completion, the field the 400 names, words of its message)
OPENAI_REFUSALS = [
    pytest.param({"response_format": json_schema(False)}, "response_format", "false", id="schema-false"),
    pytest.param({"response_format": json_schema(7)}, "response_format", "JSON schema", id="schema-not-an-object"),
    pytest.param({"response_format": {"type": "json_schema", "json_schema": "answer"}}, "response_format",
                 "must be an object", id="json_schema-not-an-object"),
    pytest.param({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
                 "tool_choice", "get_time", id="unknown-tool"),
    pytest.param({"tool_choice": "required"}, "tool_choice", "no tools", id="required-without-tools"),
    pytest.param({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice",
                 "get_weather", id="named-without-tools"),
    pytest.param({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
                 "tool_choice", "response_format", id="format-and-forced-call"),
    pytest.param({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                  "response_format": json_schema({"type": "object"})},
                 "tool_choice", "response_format", id="schema-and-named-call"),
    pytest.param({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"not": {}}}}}}], "tool_choice": "required"},
        "tool_choice", "not", id="tool-schema-it-cannot-follow"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("extra,field,words", OPENAI_REFUSALS)
def test_openai_refusals_name_their_field(base, extra, field, words, stream):
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(base).chat.completions.create(model="mock", messages=user("x"), **extra, stream=stream)
    assert refused.value.status_code == 400 and refused.value.param == field
    assert names_field(refused.value.message, field) and words in refused.value.message


def test_a_forced_call_and_no_format_are_accepted_with_tool_choice_none(base):
    """`tool_choice: "none"` with a format: the format shapes the answer."""
    choice = openai_client(base).chat.completions.create(
        model="mock", messages=user("x"), tools=TOOLS, tool_choice="none",
        response_format={"type": "json_object"}).choices[0]
    check(choice.message.content, {"type": "object"}, choice.finish_reason)


def test_ollama_refuses_a_format_that_is_not_json_or_a_schema(base):
    for value in [False, 5, "yaml", ["json"]]:
        reply = httpx.post(base + "/api/chat", json={"model": "mock", "messages": user("x"), "format": value},
                           timeout=60)
        assert reply.status_code == 400 and names_field(reply.json()["error"], "format"), reply.text
    assert rpc_call(base, "run", {"prompt": "x", "format": 5})["error"]["data"]["field"] == "format"


# ------------------------------------------------ a stream closed early

# An answer of at least 3000 tokens: 7.5 s at the mock's pace.
LONG = {"type": "object", "properties": {"words": {"type": "array", "items": {"enum": ["alpha", "beta"]},
                                                   "minItems": 1500}}, "required": ["words"]}


def metric(base: str, name: str) -> float:
    """A counter or gauge from /metrics (summed over its labels)."""
    text = httpx.get(base + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name)] in " {")


def wait_until_idle(base: str) -> None:
    """The aborted generation has ended (a liveness bound, not a timing)."""
    deadline = time.monotonic() + 60
    while metric(base, "rkllm_active_streams") > 0:
        assert time.monotonic() < deadline, "the closed stream's generation did not end"
        time.sleep(0.05)


def openai_closed_early(base: str) -> None:
    stream = openai_client(base).chat.completions.create(
        model="mock", messages=user("Many words"), response_format=json_schema(LONG), stream=True)
    received = ""
    for chunk in stream:
        received += chunk.choices[0].delta.content or "" if chunk.choices else ""
        if len(received) > 20:
            break
    stream.close()
    assert received.startswith('{"words": [')


def ollama_closed_early(base: str) -> None:
    with httpx.stream("POST", base + "/api/chat", json={"model": "mock", "messages": user("Many words"),
                                                        "format": LONG}, timeout=60) as reply:
        lines = reply.iter_lines()
        first = json.loads(next(lines))
        assert not first["done"]


def tool_call_closed_early(base: str) -> None:
    tools = [{"type": "function", "function": {"name": "say", "parameters": LONG}}]
    stream = openai_client(base).chat.completions.create(
        model="mock", messages=user("Many words"), tools=tools, tool_choice="required", stream=True)
    fragments = 0
    for chunk in stream:
        fragments += len(chunk.choices[0].delta.tool_calls or []) if chunk.choices else 0
        if fragments > 5:
            break
    stream.close()
    assert fragments > 5


@pytest.mark.parametrize("close", [openai_closed_early, ollama_closed_early, tool_call_closed_early],
                         ids=["openai", "ollama", "tool-call"])
def test_a_constrained_stream_closed_early_stops_and_the_next_is_served(tmp_path, close):
    proc, base = start(tmp_path)
    try:
        aborts = metric(base, "rkllm_aborts_total")
        close(base)
        wait_until_idle(base)
        assert metric(base, "rkllm_aborts_total") == aborts + 1
        # It stopped where the client left, far before the 3000 tokens.
        assert metric(base, "rkllm_generated_tokens_total") < 1000

        schema = schemas.generate(SEEDS[0])
        choice = openai_client(base).chat.completions.create(
            model="mock", messages=user("Next"), response_format=json_schema(schema)).choices[0]
        check(choice.message.content, schema, choice.finish_reason)
        chat = ollama_client(base).chat(model="mock", messages=user("Next"), format=schema)
        check(chat.message.content, schema, chat.done_reason)
    finally:
        stop_server(proc)
