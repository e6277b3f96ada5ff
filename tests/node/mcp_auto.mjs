// Connects to rkllm-server with the MCP TypeScript SDK's client in its
// `auto` negotiation mode (it first probes `server/discover`, which this
// server answers, so it speaks the stateless revision 2026-07-28; on a
// handshake-only server it would fall back to `initialize`), lists the
// tools and calls `generate`; prints one JSON line of what it saw for
// tests/python/test_node_clients.py to check.
//
//   node mcp_auto.mjs http <url>         Streamable HTTP
//   node mcp_auto.mjs stdio <binary> ... stdio, the server started by the SDK
//
// MCP_MODE=2026-07-28 pins the client to that revision instead (no probe:
// anything else fails).
//
// The probe may wait 10 minutes: a server that never answered it would
// outlast the test's own time limit rather than go on quietly.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [kind, target, ...args] = process.argv.slice(2);
const transport =
  kind === "http"
    ? new StreamableHTTPClientTransport(new URL(target))
    : new StdioClientTransport({ command: target, args });

const pinned = process.env.MCP_MODE;
const mode = pinned ? { pin: pinned } : "auto";
const client = new Client(
  { name: "rkllm-server-tests", version: "1.0.0" },
  { versionNegotiation: { mode, probe: { timeoutMs: 600000 } } },
);
const started = Date.now();
await client.connect(transport);
const connectMs = Date.now() - started;
const tools = await client.listTools();
const progress = [];
const result = await client.callTool(
  { name: "generate", arguments: { prompt: "Tell me about Rockchip boards", max_tokens: 12 } },
  { onprogress: (p) => progress.push(p) },
);
console.log(
  JSON.stringify({
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    server: client.getServerVersion(),
    connectMs,
    tools: tools.tools.map((t) => t.name),
    isError: result.isError ?? false,
    text: result.content?.[0]?.text,
    structured: result.structuredContent,
    progress: progress.length,
  }),
);
await client.close();
