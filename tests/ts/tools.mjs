// The read-only tools through the TypeScript SDK client (1.x, a 2025-11-25 session) against
// `catalog serve` (tests/test_mcp_tools_ts.py).
//
//   node tools.mjs URL
//
// The SDK validates every tool result's structuredContent against the tool's outputSchema. Prints
// one JSON line per step, then {"done": true}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const url = new URL(process.argv[2]);
const GATED = "file:///project/docs/internal-notes.md";
const options = { timeout: 30_000 };

function emit(record) {
  process.stdout.write(JSON.stringify(record) + "\n");
}

const client = new Client(
  { name: "catalog-ts-tools", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: "accept",
  content: { accept: true, purpose: "typescript tools test" },
}));

try {
  await client.connect(new StreamableHTTPClientTransport(url));
  emit({ step: "capabilities", tools: client.getServerCapabilities().tools ?? null });

  const listed = await client.listTools({}, options);
  emit({
    step: "tools/list",
    tools: listed.tools.map((t) => ({ name: t.name, annotations: t.annotations, output: Boolean(t.outputSchema) })),
  });

  const found = await client.callTool({ name: "search_resources", arguments: { query: "greeting" } }, undefined, options);
  emit({
    step: "search_resources",
    uris: found.structuredContent.resources.map((r) => r.uri),
    links: found.content.filter((c) => c.type === "resource_link").map((c) => c.uri),
  });

  const level = await client.callTool({ name: "list_resources", arguments: { uriPrefix: "file:///project/" } }, undefined, options);
  emit({ step: "list_resources", folders: level.structuredContent.folders });

  const read = await client.callTool({ name: "read_resource", arguments: { uri: "test://static-text" } }, undefined, options);
  emit({ step: "read_resource", text: read.content[0].resource.text });

  const gated = await client.callTool({ name: "read_resource", arguments: { uri: GATED } }, undefined, options);
  emit({ step: "consent", text: gated.structuredContent.contents[0].text });

  const missing = await client.callTool({ name: "read_resource", arguments: { uri: "file:///nowhere" } }, undefined, options);
  emit({ step: "missing", isError: missing.isError, text: missing.content[0].text });

  await client.close();
  emit({ done: true });
  process.exit(0);
} catch (error) {
  emit({ failed: String(error && error.stack ? error.stack : error) });
  process.exit(1);
}
