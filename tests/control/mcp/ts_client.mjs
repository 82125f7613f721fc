// One client of tests/control/mcp/test_three_clients.py: the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk, installed into .node-conformance by `scripts/setup --test`),
// run as a real user. It starts `MEMFS mcp --agent AGENT` over stdio as a client
// configured in the usual way would: StdioClientTransport with no `env`, so the server
// gets the SDK's default environment (HOME, LOGNAME, PATH, SHELL, TERM, USER) and must
// find the daemon by itself. It carries out the plan's steps (JSON on stdin) in order
// and prints what each gave, as JSON; the test judges them. The steps are those of
// py_client.py (its docstring describes them).
//
// Usage: node ts_client.mjs SDK_DIR MEMFS AGENT < plan.json
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [sdkDir, memfs, agent] = process.argv.slice(2);
const sdk = (path) => import(pathToFileURL(`${sdkDir}/dist/esm/${path}`).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { ResourceUpdatedNotificationSchema } = await sdk("types.js");

const plan = JSON.parse(readFileSync(0, "utf8"));
const updated = [];
const saved = {};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function substitute(value) {
  if (typeof value === "string" && value.startsWith("$") && value.slice(1) in saved) {
    return saved[value.slice(1)];
  }
  if (Array.isArray(value)) return value.map(substitute);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v)]));
  }
  return value;
}

const client = new Client({ name: agent, version: "1.0.0" });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
  updated.push(notification.params.uri);
});
const transport = new StdioClientTransport({ command: memfs, args: ["mcp", "--agent", agent] });
await client.connect(transport);

const results = [];
for (const step of plan) {
  if ("call" in step) {
    const called = await client.callTool({ name: step.call, arguments: substitute(step.args) });
    const text = called.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");
    results.push({ is_error: Boolean(called.isError), text,
                   structured: called.structuredContent ?? null });
    if ("save" in step) {
      const found = text.match(/"(?:[^"\\]|\\.)*"/);
      saved[step.save] = found ? JSON.parse(found[0]) : "";
    }
  } else if ("cli" in step) {
    try {
      const stdout = execFileSync(memfs, step.cli, { input: step.input ?? "", env: {},
                                                     encoding: "utf8", timeout: 60000,
                                                     stdio: ["pipe", "pipe", "pipe"] });
      results.push({ rc: 0, stdout, stderr: "" });
    } catch (error) {
      if (typeof error.status !== "number") throw error;
      results.push({ rc: error.status, stdout: error.stdout, stderr: error.stderr });
    }
  } else if ("read" in step || "subscribe" in step) {
    try {
      if ("read" in step) {
        const content = (await client.readResource({ uri: step.read })).contents[0];
        results.push({ text: content.text, mime: content.mimeType });
      } else {
        await client.subscribeResource({ uri: step.subscribe });
        results.push({ ok: true });
      }
    } catch (error) {
      if (typeof error.code !== "number") throw error;
      results.push({ error: error.message, code: error.code });
    }
  } else if ("sleep" in step) {
    await sleep(step.sleep * 1000);
    results.push({});
  } else if ("updated" in step) {
    results.push({ updated: [...updated] });
  } else if ("await_updated" in step) {
    const deadline = Date.now() + step.await_updated * 1000;
    while (updated.length === 0 && Date.now() < deadline) await sleep(50);
    results.push({ updated: [...updated] });
  } else {
    throw new Error(`unknown step ${JSON.stringify(step)}`);
  }
}
const instructions = client.getInstructions() ?? null;
await client.close();
process.stdout.write(JSON.stringify({ instructions, results }) + "\n");
