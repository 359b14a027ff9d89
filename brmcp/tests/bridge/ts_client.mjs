// The TypeScript MCP SDK (`@modelcontextprotocol/sdk`, installed by scripts/test-deps)
// as an agent of the bridge, driven by ts_elicit.rs:
//
//   node ts_client.mjs elicit <url> <token> <answer> <delay_ms> <timeout_ms>
//
// Connects over streamable HTTP with a bearer token, declaring form elicitation, and
// calls the paid tool `fortune` in approval mode. Its `ElicitRequestSchema` handler
// answers the bridge's approval question with <answer> ("accept", "decline" or
// "cancel") after <delay_ms>. The call waits <timeout_ms> at most (0: the SDK's
// default), reset by every progress notification. Each step prints one JSON line
// {"step": ..., ...}; the call's step carries the error if the call failed.

// The SDK is imported from NODE_MODULES (the test's npm prefix), since this file lives
// outside it and ES modules do not search NODE_PATH.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const sdk = (file) =>
  import(pathToFileURL(join(process.env.NODE_MODULES, "@modelcontextprotocol/sdk/dist/esm", file)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { CallToolResultSchema, ElicitRequestSchema } = await sdk("types.js");

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + "\n");
}

const texts = (result) =>
  (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text);

async function elicit(url, token, answer, delayMs, timeoutMs) {
  const client = new Client(
    { name: "brmcp-ts-test", version: "1.0.0" },
    { capabilities: { elicitation: { form: {} } } },
  );
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push({
      message: request.params.message,
      schema: request.params.requestedSchema,
    });
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    return answer === "accept" ? { action: "accept", content: {} } : { action: answer };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  const seen = [];
  const options = {
    onprogress: (p) => seen.push([p.progress, p.total ?? null, p.message ?? null]),
    resetTimeoutOnProgress: true,
  };
  if (timeoutMs > 0) {
    options.timeout = timeoutMs;
  }
  const started = Date.now();
  try {
    const r = await client.callTool({ name: "fortune", arguments: {} }, CallToolResultSchema, options);
    emit("fortune", {
      texts: texts(r),
      is_error: r.isError ?? false,
      asked,
      seen,
      elapsed_ms: Date.now() - started,
    });
  } catch (e) {
    emit("fortune", {
      error: String(e?.message ?? e),
      code: e?.code ?? null,
      asked,
      seen,
      elapsed_ms: Date.now() - started,
    });
  }
  await client.close();
}

const [kind, ...args] = process.argv.slice(2);
if (kind === "elicit") {
  const [url, token, answer, delay, timeout] = args;
  await elicit(url, token, answer, Number(delay), Number(timeout));
  emit("done", {});
} else {
  process.stderr.write(`unknown kind ${kind}\n`);
  process.exit(2);
}
