// Request transformations through hull's gateway, end to end on loopback only: an HTTPS server on
// 127.0.0.12 (its own test CA, given to the gateway's upstream trust through HULL_NET_UPSTREAM_CA)
// stands for a model API, a DNS responder on 127.0.0.1 (HULL_NET_DNS) maps its name there, and
// the sandbox holds only a placeholder where the key would be. No model, no key, no traffic off
// this host.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";

import { API_IP, API_NAME as NAME, IMAGE, fakeApi, otherProcess, withSandboxes } from "./helpers.mjs";
import { createHullNetworkSandboxSession } from "../dist/index.js";


const REAL = "sk-ant-REAL-0123456789abcdef";
const PLACEHOLDER = "aisdkhc_test0placeholder0value00000000000000000";

test("transformations put their values into matching requests upstream only; add merges, set replaces; hull-less conditions are refused", () =>
  withSandboxes(async () => {
    const api = await fakeApi();
    const { port, seen } = api;
    const s = await createHullNetworkSandboxSession({
      image: IMAGE,
      sandboxId: "brokered",
      networkPolicy: { mode: "custom", allowedHosts: [NAME], allowedCIDRs: [`${API_IP}/32`] },
    });
    try {
      // The request as an agent's client makes it: the placeholder where the key goes.
      const call = async (key) => {
        const code = `fetch("https://${NAME}:${port}/v1/messages", { headers: { "x-api-key": "${key}" } }).then((r) => r.text()).then((t) => console.log(t), (e) => console.log("failed", e.cause?.code ?? e.message))`;
        return (await s.run({ command: `node -e '${code}'` })).stdout.trim();
      };
      const rule = (value) => ({
        match: { host: NAME, path: { startsWith: "/v1/" }, method: ["POST", "GET"], headers: [{ key: { exact: "x-api-key" }, value: { exact: PLACEHOLDER } }] },
        transform: { headers: { "x-api-key": value } },
      });
      await s.addRequestTransformations([rule(REAL)]);
      assert.match(await call(PLACEHOLDER), /^model reply/);
      assert.equal(seen.at(-1), REAL, "the matching request did not get the value");
      assert.match(await call("another-key"), /^model reply/);
      assert.equal(seen.at(-1), "another-key", "a request the rule does not match was changed");
      // Another process resumes the session and adds a rule: hull merges it into the set.
      const second = { match: { host: NAME, headers: [{ key: { exact: "x-api-key" }, value: { exact: "aisdkhc_second" } }] }, transform: { headers: { "x-api-key": "second-real" } } };
      otherProcess(`
        const s = await hull.resumeHullNetworkSandboxSession({ sandboxId: "brokered" });
        await s.addRequestTransformations([${JSON.stringify(second)}]);
        await s.close();`);
      assert.match(await call("aisdkhc_second"), /^model reply/);
      assert.equal(seen.at(-1), "second-real");
      assert.match(await call(PLACEHOLDER), /^model reply/);
      assert.equal(seen.at(-1), REAL, "the other process's add replaced the set");
      // The same match and header: add replaces it.
      await s.addRequestTransformations([rule("second-value")]);
      assert.match(await call(PLACEHOLDER), /^model reply/);
      assert.equal(seen.at(-1), "second-value");
      // The value never reaches the sandbox's processes.
      const env = await s.run({ command: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-ant-REAL || true" });
      assert.equal(env.stdout.trim(), "0");
      // A condition hull cannot express is refused, and nothing changes.
      await assert.rejects(
        s.addRequestTransformations([{ match: { host: NAME, headers: [{ key: { exact: "x-api-key" }, value: { startsWith: "aisdkhc_" } }] }, transform: { headers: { "x-api-key": REAL } } }]),
        (e) => HarnessCapabilityUnsupportedError.isInstance(e) && /header value matched by startsWith/.test(e.message),
      );
      assert.match(await call(PLACEHOLDER), /^model reply/);
      assert.equal(seen.at(-1), "second-value");
      // set([]) removes them: the connection is no longer intercepted, so the sandbox's client
      // (which trusts the gateway's CA, not the test CA) cannot verify the real host.
      const before = seen.length;
      await s.setRequestTransformations([]);
      assert.match(await call(PLACEHOLDER), /^failed/);
      assert.equal(seen.length, before, "the upstream was reached without interception");
    } finally {
      await s.destroy();
      api.close();
    }
  }));

/** A request from the sandbox to the fake API (the placeholder as its key): what it printed. */
async function callFrom(s, port, key) {
  const code = `fetch("https://${NAME}:${port}/v1/messages", { headers: { "x-api-key": "${key}" } }).then((r) => r.text()).then((t) => console.log(t), (e) => console.log("failed", e.cause?.code ?? e.message))`;
  return (await s.run({ command: `node -e '${code}'` })).stdout.trim();
}

test("a session restored from a template brokers from its first request, and says so in its description", () =>
  withSandboxes(async () => {
    const api = await fakeApi();
    const networkPolicy = { mode: "custom", allowedHosts: [NAME], allowedCIDRs: [`${API_IP}/32`] };
    const template = { identity: "brokered-template-v1", async prepare({ session }) { await session.writeTextFile({ path: "prepared.txt", content: "yes" }); } };
    let s;
    try {
      // The first creation builds the template; the second restores from it.
      const first = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "tpl-first", template, networkPolicy });
      await first.destroy();
      s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "tpl-brokered", template, networkPolicy });
      assert.equal(await s.readTextFile({ path: "prepared.txt" }), "yes");
      assert.match(s.description, /The gateway's CA is trusted through SSL_CERT_FILE/);
      await s.setRequestTransformations([{ match: { host: NAME, headers: [{ key: { exact: "x-api-key" }, value: { exact: PLACEHOLDER } }] }, transform: { headers: { "x-api-key": REAL } } }]);
      assert.match(await callFrom(s, api.port, PLACEHOLDER), /^model reply/);
      assert.deepEqual(api.seen, [REAL]);
    } finally {
      await s?.destroy();
      api.close();
    }
  }));

test("the policy decides each connection: allowed host reached, other names and denied CIDRs get none, a live change applies to the next", () =>
  withSandboxes(async () => {
    const api = await fakeApi();
    const allowed = { mode: "custom", allowedHosts: [NAME], allowedCIDRs: [`${API_IP}/32`] };
    const s = await createHullNetworkSandboxSession({ image: IMAGE, sandboxId: "decides", networkPolicy: allowed, brokerCredentials: false });
    try {
      // Reached (the sandbox does not trust the test CA, so TLS fails after the connection).
      assert.match(await callFrom(s, api.port, "k"), /^failed/);
      assert.equal(api.connections, 1, "the allowed host was not reached");
      // Another name only: the API's name is not answered, nothing connects.
      await s.setNetworkPolicy({ mode: "custom", allowedHosts: ["other.example.test"], allowedCIDRs: ["10.255.255.0/24"] });
      assert.match(await callFrom(s, api.port, "k"), /^failed/);
      assert.equal(api.connections, 1, "a name the policy does not allow was connected to");
      // The name allowed but its address denied: the denied CIDR wins.
      await s.setNetworkPolicy({ mode: "custom", allowedHosts: [NAME], allowedCIDRs: [`${API_IP}/32`], deniedCIDRs: [`${API_IP}/32`] });
      assert.match(await callFrom(s, api.port, "k"), /^failed/);
      assert.equal(api.connections, 1, "a denied CIDR was connected to");
      // Back to allowed: the next connection goes through.
      await s.setNetworkPolicy(allowed);
      assert.match(await callFrom(s, api.port, "k"), /^failed/);
      assert.equal(api.connections, 2);
    } finally {
      await s.destroy();
      api.close();
    }
  }));

test("transformations hull cannot keep exactly are refused before anything changes", async () => {
  const { checkList, toHull } = await import("../dist/transformations.js");
  const t = (match) => [{ match: { host: NAME, ...match }, transform: { headers: { "x-api-key": "v" } } }];
  assert.throws(() => checkList(t({ method: [] })), /match.method is empty/);
  assert.throws(
    () => toHull(t({ headers: [{ key: { exact: "x-a" }, value: { exact: "1" } }, { key: { exact: "x-a" }, value: { exact: "2" } }] })),
    (e) => HarnessCapabilityUnsupportedError.isInstance(e) && /two conditions on a header `x-a`/.test(e.message),
  );
  assert.throws(() => toHull(t({ queryString: [{ key: { regex: "k.*" }, value: { exact: "1" } }] })), (e) => HarnessCapabilityUnsupportedError.isInstance(e));
  assert.deepEqual(toHull(t({ method: ["GET", "POST"], path: { startsWith: "/v1/" } })).map((r) => [r.match.method, r.match.path]), [
    ["GET", { prefix: "/v1/" }],
    ["POST", { prefix: "/v1/" }],
  ]);
});
