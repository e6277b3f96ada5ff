"""Structured output through the clients' own helpers, against the mock
backend: the openai client's `parse` with a pydantic model, forced tool
calls (`tool_choice` "required" and a named function, whole and
streamed), thinking before a structured answer, MCP `generate` with a
`format`, langchain-ollama's and langchain-openai's
`with_structured_output`, pydantic-ai's output types, and the refusals as
each client shows them.

Under a constraint the mock proposes the answer it would give without
one, token by token, and only a token the constraint refuses is corrected
(as the runner does with the runtime's picks on the NPU). A prompt that
makes it echo an instance (`@mock(echo=1) {...}`) therefore gets exactly
that instance back through every pipeline, which the `*_own_values` tests
check; other prompts get its words where a string is forced and small
plausible values elsewhere. What the tests check besides is that each
client gets an answer it accepts, that it validates against the schema the
client sent, and that what is refused is a 400 naming the field. The
generated schemas are in test_structured_output.py."""

import json
import re
import shutil
import subprocess
from typing import Literal

import httpx
import ollama
import openai
import pytest
from mcp import Client
from pydantic import BaseModel, Field

import schemas
from conftest import ROOT, start_server, stop_server

CONFIG = """
[mock]
tokens_per_second = 400
prefill_ms = 0

[[models]]
name = "mock"
"""


class Coordinates(BaseModel):
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)


class City(BaseModel):
    """A city, as the answer is asked to describe one."""
    name: str = Field(min_length=1, max_length=40)
    country: Literal["FR", "JP", "BR"]
    population: int = Field(ge=1000, le=50_000_000)
    landmarks: list[str] = Field(min_length=2, max_length=4)
    where: Coordinates
    capital: bool


class Weather(BaseModel):
    city: str
    unit: Literal["celsius", "fahrenheit"]
    days: int = Field(ge=1, le=7)


class Tags(BaseModel):
    """`set` is `uniqueItems`, which the engine cannot hold an answer to."""
    tags: set[str]


# An instance of City the prompts below make the mock echo: every pipeline
# must hand back these values, not ones of its own.
PARIS = {"name": "Paris", "country": "FR", "population": 2_100_000, "landmarks": ["Louvre", "Eiffel Tower"],
         "where": {"latitude": 48.8566, "longitude": 2.3522}, "capital": True}
ECHO_PARIS = "Describe Paris. @mock(echo=1) " + json.dumps(PARIS)


def tool(name: str, model: type[BaseModel]) -> dict:
    return {"type": "function", "function": {"name": name, "description": model.__doc__ or name,
                                             "parameters": model.model_json_schema()}}


TOOLS = [tool("describe_city", City), tool("get_weather", Weather)]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    config = tmp_path_factory.mktemp("structured-clients") / "rkllm-server.toml"
    config.write_text(CONFIG)
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


def openai_client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def ollama_client(base: str) -> ollama.Client:
    return ollama.Client(host=base, timeout=60)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def city_schema() -> dict:
    return City.model_json_schema()


# ------------------------------------------------------- the openai client


@pytest.mark.parametrize("prompt", ["Describe Paris.", "Describe Kyoto.", "Describe Recife."])
def test_openai_parse_with_a_pydantic_model(base, prompt):
    completion = openai_client(base).chat.completions.parse(model="mock", messages=user(prompt),
                                                            response_format=City)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, City)
    # parse sent the strict form of the model's schema; the answer also
    # satisfies the model's own schema.
    schemas.validate(message.content, city_schema())
    assert message.parsed == City.model_validate_json(message.content)
    # The beta path of older code says the same.
    beta = openai_client(base).beta.chat.completions.parse(model="mock", messages=user(prompt),
                                                           response_format=City)
    assert beta.choices[0].message.parsed == message.parsed


def test_openai_parse_gets_the_mocks_own_values(base):
    completion = openai_client(base).chat.completions.parse(model="mock", messages=user(ECHO_PARIS),
                                                            response_format=City)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.parsed == City(**PARIS)
    assert json.loads(completion.choices[0].message.content) == PARIS
    with openai_client(base).chat.completions.stream(model="mock", messages=user(ECHO_PARIS),
                                                     response_format=City) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == City(**PARIS)


def test_openai_stream_helper_with_a_pydantic_model(base):
    with openai_client(base).chat.completions.stream(model="mock", messages=user("Describe Paris."),
                                                     response_format=City) as stream:
        deltas = [event.delta for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(deltas) > 1
    message = final.choices[0].message
    assert "".join(deltas) == message.content and isinstance(message.parsed, City)


def tool_call_of(choice) -> tuple[str, dict]:
    """The one call of a forced reply: its name and its arguments,
    validated against that tool's parameters."""
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.id and call.type == "function"
    arguments = schemas.validate(call.function.arguments, PARAMETERS[call.function.name])
    return call.function.name, arguments


def streamed_call(base: str, **ask) -> tuple[str, str, int]:
    """A streamed forced call: its name, its arguments joined, and how many
    fragments they came in."""
    chunks = list(openai_client(base).chat.completions.create(**ask, stream=True))
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert {call.index for call in calls} == {0}
    assert calls[0].id and calls[0].function.name
    assert all(call.function.name is None for call in calls[1:])
    fragments = [call.function.arguments for call in calls if call.function.arguments]
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    return calls[0].function.name, "".join(fragments), len(fragments)


@pytest.mark.parametrize("prompt", ["Weather in Lyon?", "Tell me about Osaka.", "Anything", "Hi"])
def test_openai_tool_choice_required_calls_one_of_the_tools(base, prompt):
    ask = dict(model="mock", messages=user(prompt), tools=TOOLS, tool_choice="required")
    choice = openai_client(base).chat.completions.create(**ask).choices[0]
    name, arguments = tool_call_of(choice)
    assert name in PARAMETERS
    # Streamed: the same call, its arguments in fragments.
    streamed_name, joined, fragments = streamed_call(base, **ask)
    assert (streamed_name, json.loads(joined)) == (name, arguments) and fragments > 1


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_openai_a_named_function_is_the_one_called(base, name):
    ask = dict(model="mock", messages=user("Go"), tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": name}})
    choice = openai_client(base).chat.completions.create(**ask).choices[0]
    assert tool_call_of(choice)[0] == name
    streamed_name, joined, fragments = streamed_call(base, **ask)
    assert streamed_name == name and fragments > 1
    schemas.validate(joined, PARAMETERS[name])


def test_openai_forced_calls_get_the_mocks_own_arguments(base):
    """A forced call's arguments are the instance the mock echoes, named
    and required, whole and streamed."""
    for tool_choice in ["required", {"type": "function", "function": {"name": "describe_city"}}]:
        ask = dict(model="mock", messages=user(ECHO_PARIS), tools=[tool("describe_city", City)],
                   tool_choice=tool_choice)
        choice = openai_client(base).chat.completions.create(**ask).choices[0]
        assert tool_call_of(choice) == ("describe_city", PARIS)
        name, joined, _ = streamed_call(base, **ask)
        assert (name, json.loads(joined)) == ("describe_city", PARIS)
    parsed = openai_client(base).chat.completions.parse(
        model="mock", messages=user(ECHO_PARIS), tools=[openai.pydantic_function_tool(City)],
        tool_choice={"type": "function", "function": {"name": "City"}})
    [call] = parsed.choices[0].message.tool_calls
    assert call.function.parsed_arguments == City(**PARIS)


def test_openai_pydantic_function_tools_are_called_strictly(base):
    """openai.pydantic_function_tool: strict tools, the parse helper reads
    the arguments back into the model."""
    tools = [openai.pydantic_function_tool(City), openai.pydantic_function_tool(Weather)]
    completion = openai_client(base).chat.completions.parse(
        model="mock", messages=user("Weather?"), tools=tools,
        tool_choice={"type": "function", "function": {"name": "Weather"}})
    [call] = completion.choices[0].message.tool_calls
    assert isinstance(call.function.parsed_arguments, Weather)


# ------------------------------------------------------ thinking first


def test_openai_thinks_then_answers_in_shape(base):
    client = openai_client(base)
    ask = dict(model="mock", messages=user("Describe Paris. @mock(think=1)"), reasoning_effort="high",
               response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": city_schema()}})
    message = client.chat.completions.create(**ask).choices[0].message
    assert message.reasoning_content and "<think" not in message.reasoning_content
    schemas.validate(message.content, city_schema())
    chunks = list(client.chat.completions.create(**ask, stream=True))
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == message.reasoning_content
    assert "".join(d.content or "" for d in deltas) == message.content

    # A forced call after thinking.
    choice = client.chat.completions.create(model="mock", messages=user("Weather? @mock(think=1)"),
                                            reasoning_effort="high", tools=TOOLS, tool_choice="required").choices[0]
    assert choice.message.reasoning_content
    tool_call_of(choice)


def test_openai_thinks_then_answers_with_its_own_values(base):
    message = openai_client(base).chat.completions.create(
        model="mock", messages=user("@mock(think=1) " + ECHO_PARIS), reasoning_effort="high",
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": city_schema()}},
    ).choices[0].message
    assert message.reasoning_content and json.loads(message.content) == PARIS


def test_ollama_format_gets_the_mocks_own_values(base):
    client = ollama_client(base)
    chat = client.chat(model="mock", messages=user(ECHO_PARIS), format=city_schema())
    assert json.loads(chat.message.content) == PARIS and chat.done_reason == "stop"
    generated = client.generate(model="mock", prompt=ECHO_PARIS, format="json")
    assert json.loads(generated.response) == PARIS


def test_ollama_thinks_then_answers_in_shape(base):
    client = ollama_client(base)
    prompt = "Describe Paris. @mock(think=1)"
    chat = client.chat(model="mock", messages=user(prompt), format=city_schema(), think=True)
    assert chat.message.thinking and "<think" not in chat.message.thinking
    schemas.validate(chat.message.content, city_schema())
    parts = list(client.chat(model="mock", messages=user(prompt), format=city_schema(), think=True, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == chat.message.thinking
    assert "".join(p.message.content for p in parts) == chat.message.content
    generated = client.generate(model="mock", prompt=prompt, format="json", think=True)
    assert generated.thinking
    assert isinstance(schemas.validate(generated.response, {"type": "object"}), dict)


def test_json_rpc_thinks_then_answers_in_shape(base):
    reply = httpx.post(base + "/mcp", timeout=60, json={"jsonrpc": "2.0", "id": 1, "method": "run", "params": {
        "prompt": "Describe Paris. @mock(think=1)", "format": city_schema(), "enable_thinking": True}}).json()
    result = reply["result"]
    assert result["thinking"] and result["usage"]["reasoning_tokens"] > 0
    schemas.validate(result["text"], city_schema())


# -------------------------------------------------------------------- MCP


@pytest.mark.anyio
async def test_mcp_generate_with_a_format(base):
    async with Client(base + "/mcp") as client:
        listed = await client.list_tools()
        [generate] = [t for t in listed.tools if t.name == "generate"]
        assert "format" in generate.input_schema["properties"]

        fragments = []

        async def on_progress(progress, total, message):
            fragments.append(message)

        result = await client.call_tool("generate", {"prompt": "Describe Paris.", "format": city_schema()},
                                        progress_callback=on_progress)
        assert not result.is_error
        text = result.structured_content["text"]
        schemas.validate(text, city_schema())
        assert result.content[0].text == text and "".join(fragments) == text

        plain = await client.call_tool("generate", {"prompt": "Any object.", "format": "json"})
        assert isinstance(schemas.validate(plain.structured_content["text"], {"type": "object"}), dict)

        thought = await client.call_tool("generate", {"prompt": "Describe Paris. @mock(think=1)",
                                                      "format": city_schema(), "enable_thinking": True})
        assert thought.structured_content["thinking"]
        schemas.validate(thought.structured_content["text"], city_schema())


@pytest.mark.anyio
async def test_mcp_refuses_a_schema_it_cannot_follow(base):
    """A tool's failure is its result (`isError`), in MCP."""
    async with Client(base + "/mcp") as client:
        refused = await client.call_tool("generate", {"prompt": "x", "format": Tags.model_json_schema()})
        assert refused.is_error
        message = refused.content[0].text
        assert "`format` cannot be followed" in message and "uniqueItems" in message


# ------------------------------------------------------------- LangChain


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
def test_langchain_ollama_with_structured_output(base, method):
    """json_schema (the default) sends format=<schema>; json_mode sends
    format="json", which any object satisfies, so its answer is checked as
    an object only. (function_calling offers a tool, which Ollama's API
    cannot force: not a structured answer the server holds.)"""
    from langchain_ollama import ChatOllama

    llm = ChatOllama(model="mock", base_url=base)
    raw = llm.with_structured_output(City, method=method, include_raw=True).invoke("Describe Paris.")
    if method == "json_mode":
        assert isinstance(schemas.validate(raw["raw"].content, {"type": "object"}), dict)
        return
    assert raw["parsing_error"] is None, raw
    assert isinstance(raw["parsed"], City)
    schemas.validate(raw["raw"].content, city_schema())
    streamed = list(llm.with_structured_output(City, method=method).stream("Describe Paris."))
    assert streamed[-1] == raw["parsed"]


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
def test_langchain_ollama_gets_the_mocks_own_values(base, method):
    from langchain_ollama import ChatOllama

    llm = ChatOllama(model="mock", base_url=base)
    assert llm.with_structured_output(City, method=method).invoke(ECHO_PARIS) == City(**PARIS)
    assert list(llm.with_structured_output(City, method=method).stream(ECHO_PARIS))[-1] == City(**PARIS)


def test_langchain_ollama_refusal_is_the_servers_400(base):
    from langchain_ollama import ChatOllama

    with pytest.raises(ollama.ResponseError) as refused:
        ChatOllama(model="mock", base_url=base).with_structured_output(Tags).invoke("Tags")
    assert refused.value.status_code == 400 and "`format`" in refused.value.error


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_openai_with_structured_output(base, method):
    from langchain_openai import ChatOpenAI

    # json_schema (the default) sends response_format with the strict
    # schema; function_calling forces the tool by name (tool_choice).
    llm = ChatOpenAI(model="mock", base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
    raw = llm.with_structured_output(City, method=method, include_raw=True).invoke("Describe Paris.")
    assert raw["parsing_error"] is None, raw
    assert isinstance(raw["parsed"], City)
    streamed = list(llm.with_structured_output(City, method=method).stream("Describe Paris."))
    assert streamed[-1] == raw["parsed"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_langchain_openai_gets_the_mocks_own_values(base, method):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="mock", base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
    assert llm.with_structured_output(City, method=method).invoke(ECHO_PARIS) == City(**PARIS)


def test_langchain_openai_refusal_is_the_servers_400(base):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="mock", base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError) as refused:
        llm.with_structured_output(Tags, method="function_calling").invoke("Tags")
    assert refused.value.param == "tool_choice" and "uniqueItems" in refused.value.message


# ----------------------------------------------------------- pydantic-ai


def pydantic_ai_model(base: str):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel("mock", provider=OpenAIProvider(openai_client=openai.AsyncOpenAI(
        base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)))


def test_pydantic_ai_default_output_is_a_forced_tool_call(base):
    """pydantic-ai's default output mode offers an output tool and, as no
    text output is allowed, forces a call of it (tool_choice required)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    agent = Agent(pydantic_ai_model(base), output_type=City)
    result = agent.run_sync("Describe Paris.")
    assert isinstance(result.output, City)
    responses = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    # One model request: the first answer was the output tool's call.
    assert len(responses) == 1
    [call] = [p for p in responses[0].parts if isinstance(p, ToolCallPart)]
    schemas.validate(call.args_as_json_str(), city_schema())


def test_pydantic_ai_native_output(base):
    """NativeOutput: response_format json_schema."""
    from pydantic_ai import Agent, NativeOutput

    result = Agent(pydantic_ai_model(base), output_type=NativeOutput(City)).run_sync("Describe Paris.")
    assert isinstance(result.output, City)


def test_pydantic_ai_gets_the_mocks_own_values(base):
    """Both output modes: the forced call of the output tool, and
    NativeOutput's response_format."""
    from pydantic_ai import Agent, NativeOutput

    model = pydantic_ai_model(base)
    assert Agent(model, output_type=City).run_sync(ECHO_PARIS).output == City(**PARIS)
    assert Agent(model, output_type=NativeOutput(City)).run_sync(ECHO_PARIS).output == City(**PARIS)


def test_pydantic_ai_refusal_is_the_servers_400(base):
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ModelHTTPError

    with pytest.raises(ModelHTTPError) as refused:
        Agent(pydantic_ai_model(base), output_type=Tags).run_sync("Tags")
    assert refused.value.status_code == 400 and "uniqueItems" in json.dumps(refused.value.body)


# ------------------------------------------------------- the Agents SDK


def test_the_agents_sdk_output_type_gets_the_mocks_own_values(base):
    """An agent with an output_type asks the Responses API for a strict
    json_schema (text.format) and parses the answer into the model."""
    import asyncio

    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0))
    agent = Agent(name="cities", instructions="Describe the city.", model="mock", output_type=City)

    async def both():
        whole = await Runner.run(agent, ECHO_PARIS)
        streamed = Runner.run_streamed(agent, ECHO_PARIS)
        async for _ in streamed.stream_events():
            pass
        return whole, streamed

    whole, streamed = asyncio.run(both())
    assert whole.final_output == City(**PARIS)
    assert streamed.final_output == City(**PARIS)


# ------------------------------------------------------------- instructor


INSTRUCTOR_PYTHON = ROOT / ".venv-instructor" / "bin" / "python"


def test_instructor_tools_and_json_schema_modes(base):
    # instructor pins jiter below what the openai of .venv needs: scripts/test
    # installs it with its own openai into .venv-instructor, and the modes run there.
    if not INSTRUCTOR_PYTHON.exists():
        pytest.skip(f"{INSTRUCTOR_PYTHON} is missing: scripts/test makes it from "
                    "tests/python/requirements-instructor.txt")
    run = subprocess.run([str(INSTRUCTOR_PYTHON), str(ROOT / "tests" / "python" / "instructor_modes.py"), base],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    answers = {(line["mode"], line["echo"]): line for line in map(json.loads, run.stdout.splitlines())}
    assert set(answers) == {(mode, echo) for mode in ("tool_call", "json_schema_mode") for echo in (False, True)}, \
        run.stdout
    for (mode, echo), answer in answers.items():
        weather = answer["weather"]
        Weather.model_validate(weather)
        assert weather["unit"] in ("celsius", "fahrenheit") and 1 <= weather["days"] <= 7, answer
        # The mock echoing an instance: its own values come back.
        if echo:
            assert weather == {"city": "Lyon", "unit": "celsius", "days": 3}, answer
    answers = {mode: line for (mode, echo), line in answers.items() if not echo}
    # TOOLS forces the call of the model's tool; JSON_SCHEMA asks for the schema as the answer.
    assert answers["tool_call"]["finish_reason"] == "tool_calls" and answers["tool_call"]["tool_calls"] == 1
    assert answers["json_schema_mode"]["finish_reason"] == "stop" and answers["json_schema_mode"]["tool_calls"] == 0


# ------------------------------------------------ the page's own examples

DOC = ROOT / "docs" / "structured-output.md"


def doc_blocks(language: str) -> list[str]:
    """The examples of the page's client sections (the page's section on
    the NPU, if any, is for operators: its commands are not run here)."""
    text = DOC.read_text(encoding="utf-8").split("\n## On the NPU", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_pages_curl_examples_answer_json(base):
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.skip("curl and jq are needed (scripts/test installs them with apt-get)")
    blocks = doc_blocks("sh")
    assert len(blocks) == 3
    for block in blocks:
        run = subprocess.run(["bash", "-c", "set -eo pipefail\n" + block.replace("localhost:8080", base.removeprefix(
            "http://"))], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert isinstance(json.loads(run.stdout), dict), run.stdout


def test_the_pages_python_examples_run(base):
    """The Python blocks, in order, in one namespace (later ones use what
    earlier ones defined)."""
    namespace: dict = {}
    blocks = doc_blocks("python")
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block.replace("http://localhost:8080", base), str(DOC), "exec"), namespace)
    assert isinstance(namespace["city"], namespace["City"])
    assert namespace["call"].function.name == "get_weather"
    schemas.validate(namespace["call"].function.arguments, namespace["tools"][0]["function"]["parameters"])
