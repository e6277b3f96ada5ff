"""rkllm-server driven by the official MCP Python SDK over stdio and
Streamable HTTP: tools, generation with progress, cancellation, in each
era: `auto` (the client's default: its `server/discover` probe is answered,
so it speaks the stateless revision 2026-07-28), pinned to 2026-07-28, and
`legacy` (the `initialize` handshake, 2025-11-25)."""

import pytest
from mcp import Client, StdioServerParameters

from conftest import server_binary


def stdio(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=server_binary(), args=["--stdio", *args])


# (the client's mode, the revision it ends up speaking)
MODES = [("auto", "2026-07-28"), ("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")]
MODE_IDS = [mode for mode, _ in MODES]


async def generate_with_progress(target, mode: str, version: str) -> None:
    async with Client(target, mode=mode) as client:
        assert client.protocol_version == version
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["generate"]
        assert "prompt" in tools.tools[0].input_schema["required"]

        updates = []

        async def on_progress(progress, total, message):
            updates.append((progress, total, message))

        result = await client.call_tool(
            "generate", {"prompt": "Tell me about Rockchip boards", "max_tokens": 40}, progress_callback=on_progress
        )
        assert not result.is_error
        text = result.content[0].text
        assert text
        assert result.structured_content["text"] == text
        assert result.structured_content["finish_reason"] in ("stop", "length")
        assert len(updates) > 1
        assert "".join(message for _, _, message in updates) == text
        progress = [p for p, _, _ in updates]
        assert progress == sorted(set(progress)), "progress strictly increases"
        assert all(total == 40 for _, total, _ in updates)

        bad = await client.call_tool("generate", {"prompt": 42})
        assert bad.is_error
        assert "prompt" in bad.content[0].text


async def cancel_a_long_generation(target, mode: str) -> None:
    async with Client(target, mode=mode) as client:
        # The mock makes 20 tokens per second: 100000 tokens would take
        # more than an hour. The client times out, sends
        # notifications/cancelled, and the server aborts the generation.
        with pytest.raises(Exception):
            await client.call_tool("generate", {"prompt": "forever @mock(length=100000)"}, read_timeout_seconds=1.0)
        # The model is free again: a short call completes (it would queue
        # behind the long one otherwise and time out).
        result = await client.call_tool("generate", {"prompt": "short @mock(length=3)"}, read_timeout_seconds=30.0)
        assert not result.is_error
        assert result.structured_content["finish_reason"] == "stop"


@pytest.mark.anyio
@pytest.mark.parametrize("mode,version", MODES, ids=MODE_IDS)
async def test_stdio_lists_tools_and_streams_progress_that_joins_to_the_result(mode, version):
    await generate_with_progress(stdio("--mock-tokens-per-second", "200"), mode, version)


@pytest.mark.anyio
@pytest.mark.parametrize("mode,version", MODES, ids=MODE_IDS)
async def test_http_lists_tools_and_streams_progress_that_joins_to_the_result(http_server, mode, version):
    await generate_with_progress(http_server, mode, version)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODE_IDS)
async def test_stdio_cancellation_stops_the_generation(mode):
    await cancel_a_long_generation(stdio("--mock-tokens-per-second", "20"), mode)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODE_IDS)
async def test_http_cancellation_stops_the_generation(http_server, mode):
    await cancel_a_long_generation(http_server, mode)
