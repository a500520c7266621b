// One 2025-11-25 session of the TypeScript SDK client (1.x) against `catalog serve`, step by step.
//
//   node legacy_session.mjs URL [URL ...]
//
// Every HTTP request goes on a new TCP connection (undici with keep-alive off), so the kernel may
// hand each one to any worker; with several URLs the requests go to them in turn (hosts sharing
// one database). Prints one JSON line per step; after subscribing it prints {"waiting":"update"}
// and waits until the test changes the watched resource and the update arrives on the GET stream.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitRequestSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { Agent, fetch as undiciFetch } from "undici";

const urls = process.argv.slice(2).map((u) => new URL(u));
const WATCHED = "test://watched-resource";
const GATED = "file:///project/docs/internal-notes.md";
const STEP_TIMEOUT_MS = 30_000;

const noKeepAlive = new Agent({ pipelining: 0 });
let turn = 0;
const requests = [];

// Each request to the next URL in turn, on a connection of its own.
async function fetchInTurn(input, init) {
  const target = new URL(input instanceof URL ? input.href : String(input));
  const host = urls[turn % urls.length];
  turn += 1;
  target.host = host.host;
  const method = (init && init.method) || "GET";
  let step = method;
  if (method === "POST" && init && typeof init.body === "string") {
    const body = JSON.parse(init.body);
    step = body.method ?? ("result" in body || "error" in body ? "answer" : "message");
  }
  requests.push({ step, port: Number(host.port) });
  return undiciFetch(target, { ...init, dispatcher: noKeepAlive });
}

function emit(record) {
  process.stdout.write(JSON.stringify(record) + "\n");
}

let answer = "accept";
const updates = [];
let updateArrived = null;

const client = new Client(
  { name: "catalog-ts-test", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler(ElicitRequestSchema, async () => {
  if (answer === "accept") {
    return { action: "accept", content: { accept: true, purpose: "typescript test" } };
  }
  return { action: "decline" };
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (notification) => {
  updates.push(notification.params.uri);
  if (updateArrived && notification.params.uri === WATCHED) updateArrived();
});

const transport = new StreamableHTTPClientTransport(urls[0], { fetch: fetchInTurn });
const options = { timeout: STEP_TIMEOUT_MS };

try {
  await client.connect(transport);
  emit({ step: "initialize", sessionId: Boolean(transport.sessionId), version: transport.protocolVersion });

  const listed = await client.listResources({}, options);
  emit({ step: "resources/list", uris: listed.resources.map((r) => r.uri) });

  const read = await client.readResource({ uri: "test://static-text" }, options);
  emit({ step: "resources/read", text: read.contents[0].text });

  const templates = await client.listResourceTemplates({}, options);
  emit({ step: "resources/templates/list", templates: templates.resourceTemplates.map((t) => t.uriTemplate) });

  const completed = await client.complete(
    { ref: { type: "ref/resource", uri: "file:///project/src/{name}" }, argument: { name: "name", value: "ma" } },
    options,
  );
  emit({ step: "completion/complete", values: completed.completion.values });

  await client.subscribeResource({ uri: WATCHED }, options);
  const arrived = new Promise((resolve) => {
    updateArrived = resolve;
  });
  emit({ step: "resources/subscribe", waiting: "update" });
  await Promise.race([
    arrived,
    new Promise((_, reject) => setTimeout(() => reject(new Error("no update on the GET stream")), STEP_TIMEOUT_MS)),
  ]);
  emit({ step: "notifications/resources/updated", uris: updates });

  answer = "accept";
  const accepted = await client.readResource({ uri: GATED }, options);
  emit({ step: "consent-accepted", text: accepted.contents[0].text });

  answer = "decline";
  try {
    await client.readResource({ uri: GATED }, options);
    emit({ step: "consent-declined", error: null });
  } catch (error) {
    emit({ step: "consent-declined", code: error.code, message: error.message });
  }

  await transport.terminateSession();
  emit({ step: "DELETE", sessionId: transport.sessionId ?? null });
  await client.close();
  emit({ done: true, requests });
  process.exit(0);
} catch (error) {
  emit({ failed: String(error && error.stack ? error.stack : error), requests });
  process.exit(1);
}
