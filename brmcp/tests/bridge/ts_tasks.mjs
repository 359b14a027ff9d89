// The TypeScript MCP SDK (`@modelcontextprotocol/sdk`, installed by scripts/test-deps)
// as an agent using the experimental tasks of protocol 2025-11-25
// (`client.experimental.tasks`), driven by ts_tasks.rs:
//
//   node ts_tasks.mjs create  <url> <token> <tool>    a task-augmented call; its id
//   node ts_tasks.mjs result  <url> <token> <taskId>  tasks/get, tasks/result, tasks/list
//   node ts_tasks.mjs foreign <url> <token> <taskId>  the same of another agent's task
//   node ts_tasks.mjs cancel  <url> <token> <tool>    a task cancelled once a line
//                                                     arrives on stdin
//   node ts_tasks.mjs approve <url> <token> <tool>    a task followed to its end by
//                                                     callToolStream, declaring
//                                                     elicitation (accepting after 2.5 s)
//
// Each connects over streamable HTTP with a bearer token, declaring the tasks
// capability, and prints one JSON line {"step": ..., ...} per step; a step that failed
// carries its error's message and code.

// The SDK is imported from NODE_MODULES (the test's npm prefix), since this file lives
// outside it and ES modules do not search NODE_PATH.
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { createInterface } from "node:readline";

const sdk = (file) =>
  import(pathToFileURL(join(process.env.NODE_MODULES, "@modelcontextprotocol/sdk/dist/esm", file)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { CallToolResultSchema, ElicitRequestSchema, RELATED_TASK_META_KEY } = await sdk("types.js");

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + "\n");
}

const texts = (result) =>
  (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text);

const failure = (e) => ({ error: String(e?.message ?? e), code: e?.code ?? null });

async function connect(url, token, extra = {}) {
  const client = new Client(
    { name: "brmcp-ts-tasks", version: "1.0.0" },
    { capabilities: { tasks: { list: {}, cancel: {} }, ...extra } },
  );
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  emit("connected", {
    protocol: transport.protocolVersion ?? null,
    tasks: client.getServerCapabilities()?.tasks ?? null,
  });
  return client;
}

// Runs a step, printing what it returned (through `show`) or its error.
async function step(name, run, show) {
  try {
    emit(name, show(await run()));
  } catch (e) {
    emit(name, failure(e));
  }
}

const ids = (listed) => listed.tasks.map((t) => t.taskId);

// Starts a task-augmented call of `tool`; its first message, the created task.
async function created(client, tool) {
  const stream = client.experimental.tasks.callToolStream(
    { name: tool, arguments: {} },
    CallToolResultSchema,
    { task: { ttl: 60000 } },
  );
  for await (const message of stream) {
    // Leaving the loop ends the stream's polling: the task is followed below.
    if (message.type === "taskCreated") {
      return message.task;
    }
    throw new Error(`before the task: ${JSON.stringify(message)}`);
  }
  throw new Error("no task");
}

async function create(url, token, tool) {
  const client = await connect(url, token);
  const tasks = client.experimental.tasks;
  let task = null;
  await step("create", async () => (task = await created(client, tool)), (t) => ({ task: t }));
  if (task) {
    await step("get", () => tasks.getTask(task.taskId), (t) => ({ task: t }));
    await step("list", () => tasks.listTasks(), (l) => ({ ids: ids(l) }));
  }
  await client.close();
}

async function result(url, token, taskId) {
  const client = await connect(url, token);
  const tasks = client.experimental.tasks;
  await step(
    "result",
    () => tasks.getTaskResult(taskId, CallToolResultSchema),
    (r) => ({
      texts: texts(r),
      is_error: r.isError ?? false,
      related: r._meta?.[RELATED_TASK_META_KEY]?.taskId ?? null,
    }),
  );
  await step("get", () => tasks.getTask(taskId), (t) => ({ task: t }));
  await step("list", () => tasks.listTasks(), (l) => ({ ids: ids(l) }));
  await client.close();
}

async function foreign(url, token, taskId) {
  const client = await connect(url, token);
  const tasks = client.experimental.tasks;
  await step("get", () => tasks.getTask(taskId), (t) => ({ task: t }));
  await step("result", () => tasks.getTaskResult(taskId, CallToolResultSchema), (r) => ({ r }));
  await step("cancel", () => tasks.cancelTask(taskId), (t) => ({ task: t }));
  await step("list", () => tasks.listTasks(), (l) => ({ ids: ids(l) }));
  await client.close();
}

async function cancel(url, token, tool) {
  const client = await connect(url, token);
  const tasks = client.experimental.tasks;
  let task = null;
  await step("create", async () => (task = await created(client, tool)), (t) => ({ task: t }));
  if (task) {
    // The test says when the bot runs it.
    const lines = createInterface({ input: process.stdin });
    for await (const _ of lines) {
      break;
    }
    await step("cancel", () => tasks.cancelTask(task.taskId), (t) => ({ task: t }));
    await step("get", () => tasks.getTask(task.taskId), (t) => ({ task: t }));
    await step("result", () => tasks.getTaskResult(task.taskId, CallToolResultSchema), (r) => ({ r }));
  }
  await client.close();
}

// The approval's delay: past the task's poll interval (1 s), so a poll sees the task
// wait for it.
const APPROVE_AFTER_MS = 2500;

async function approve(url, token, tool) {
  const asked = [];
  const client = await connect(url, token, { elicitation: { form: {} } });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    await new Promise((resolve) => setTimeout(resolve, APPROVE_AFTER_MS));
    return { action: "accept", content: {} };
  });
  const statuses = [];
  const stream = client.experimental.tasks.callToolStream(
    { name: tool, arguments: {} },
    CallToolResultSchema,
    { task: { ttl: 60000 } },
  );
  for await (const message of stream) {
    if (message.type === "taskCreated" || message.type === "taskStatus") {
      statuses.push(message.task.status);
    } else if (message.type === "result") {
      emit("approve", { statuses, asked, texts: texts(message.result) });
    } else if (message.type === "error") {
      emit("approve", { statuses, asked, ...failure(message.error) });
    }
  }
  await client.close();
}

const [kind, ...args] = process.argv.slice(2);
const kinds = { create, result, foreign, cancel, approve };
if (!kinds[kind]) {
  process.stderr.write(`unknown kind ${kind}\n`);
  process.exit(2);
}
await kinds[kind](...args);
emit("done", {});
