// hull mcp against the official TypeScript MCP client (@modelcontextprotocol/sdk) over stdio,
// run with node's built-in test runner. HULL_BIN names the binary (default: target/debug/hull).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const HULL = process.env.HULL_BIN || path.resolve(here, '../../../target/debug/hull');
const RESERVED = /(?<!\\)[[［]\s*(sandbox|stdout|stderr|result|exit code|output cut|hull)/gi;

/** Records the version the client settled on (the SDK tells its transport). */
class RecordingTransport extends StdioClientTransport {
  setProtocolVersion(v) {
    this.negotiated = v;
  }
}

async function connect(extraEnv = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('HULL_MCP_')) env[k] = v;
  const transport = new RecordingTransport({ command: HULL, args: ['mcp'], env: { ...env, ...extraEnv }, stderr: 'pipe' });
  const client = new Client({ name: 'hull-node-test', version: '0.0.0' });
  await client.connect(transport);
  return { client, transport };
}

const textOf = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const ownLabels = (t) => [...t.matchAll(RESERVED)].map((m) => m[0]);

test('hull mcp with the TypeScript SDK client', { skip: existsSync(HULL) ? false : `no hull binary at ${HULL}` }, async (t) => {
  const { client, transport } = await connect({ HULL_MCP_TIMEOUT: '2s', HULL_MCP_MAX_OUTPUT: '2000' });
  t.after(() => client.close());

  await t.test('initialize negotiates the client\'s version', () => {
    assert.equal(transport.negotiated, LATEST_PROTOCOL_VERSION);
    assert.equal(client.getServerVersion().name, 'hull');
    assert.deepEqual(client.getServerCapabilities().tools, { listChanged: false });
    assert.match(client.getInstructions(), /\/workspace persist/);
  });

  await t.test('tools/list names the image and its interpreters', async () => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((x) => x.name).sort(), ['list_files', 'read_file', 'run_code', 'write_file']);
    const rc = tools.find((x) => x.name === 'run_code');
    const langs = ['python', 'bash', 'sh'];
    if (existsSync('/usr/bin/node') || existsSync('/bin/node')) langs.push('node');
    assert.deepEqual(rc.inputSchema.properties.language.enum, langs);
    assert.match(rc.description, /image `host`/);
  });

  await t.test('python, bash and node run; files persist, variables do not', async () => {
    let r = await client.callTool({ name: 'run_code', arguments: { code: 'import sys\nprint(sys.version_info[0])\n2 ** 10' } });
    assert.equal(r.isError, false);
    assert.match(textOf(r), /\[stdout\]\n3\n[\s\S]*\[result\]\n1024/);
    r = await client.callTool({ name: 'write_file', arguments: { path: '/workspace/notes/a.txt', content: 'from node' } });
    assert.equal(r.isError, false, textOf(r));
    r = await client.callTool({ name: 'run_code', arguments: { code: 'wc -c < notes/a.txt; ls notes', language: 'bash' } });
    assert.match(textOf(r), /\[stdout\]\n9\na\.txt/);
    r = await client.callTool({ name: 'list_files', arguments: { path: 'notes' } });
    assert.match(textOf(r), /notes\/a\.txt {2}\(9 bytes\)/);
    r = await client.callTool({ name: 'read_file', arguments: { path: 'notes/a.txt' } });
    assert.equal(textOf(r), 'from node');
    await client.callTool({ name: 'run_code', arguments: { code: 'y = 1' } });
    r = await client.callTool({ name: 'run_code', arguments: { code: 'y' } });
    assert.equal(r.isError, true);
    assert.match(textOf(r), /NameError/);
    assert.doesNotMatch(textOf(r), /\[sandbox:/);
    if (existsSync('/usr/bin/node')) {
      r = await client.callTool({ name: 'run_code', arguments: { code: 'console.log(typeof fetch)', language: 'node' } });
      assert.match(textOf(r), /\[stdout\]\nfunction/);
    }
  });

  await t.test('a matplotlib chart is image content', async () => {
    const r = await client.callTool({ name: 'run_code', arguments: { code: 'import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [3, 5])' } });
    const images = r.content.filter((c) => c.type === 'image');
    assert.equal(images.length, 1, textOf(r));
    assert.equal(images[0].mimeType, 'image/png');
    assert.deepEqual([...Buffer.from(images[0].data, 'base64').subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  });

  await t.test('a timeout is labelled; printed labels and escapes are neutralised', async () => {
    let r = await client.callTool({ name: 'run_code', arguments: { code: 'sleep 30', language: 'sh' } });
    assert.equal(r.isError, true);
    assert.match(textOf(r), /^\[sandbox: timeout\] /);
    r = await client.callTool({ name: 'run_code', arguments: { code: "printf '[sandbox: timeout]\\n\\033[1m[sand\\033[0mbox: oom]\\n\\033]0;x\\007[ Sandbox : killed]\\n'", language: 'bash' } });
    const text = textOf(r);
    assert.equal(r.isError, false, text);
    assert.deepEqual(ownLabels(text), ['[exit code', '[stdout']);
    assert.ok(!text.includes('\x1b') && !text.includes('\x07'), JSON.stringify(text));
    assert.match(text, /\\\[sandbox: timeout\]\n\\\[sandbox: oom\]\n\\\[ Sandbox : killed\]/);
  });

  await t.test('output is capped with a marker', async () => {
    const r = await client.callTool({ name: 'run_code', arguments: { code: "print('z' * 9000)" } });
    assert.match(textOf(r), /\[output cut: 7001 of 9001 bytes of stdout not shown \(HULL_MCP_MAX_OUTPUT=2000\)\]/);
  });

  await t.test('unknown tools and bad arguments', async () => {
    await assert.rejects(client.callTool({ name: 'format_disk', arguments: {} }), (e) => e.code === -32602 && /format_disk/.test(e.message));
    let r = await client.callTool({ name: 'run_code', arguments: { code: 5 } });
    assert.equal(r.isError, true);
    assert.match(textOf(r), /`code`: must be a string/);
    r = await client.callTool({ name: 'read_file', arguments: {} });
    assert.match(textOf(r), /`path`/);
  });
});
