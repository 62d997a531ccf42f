// The Claude Code adapter of the AI SDK harness in a hull sandbox, the way a user with an
// Anthropic key would run it:
//
//   npm install @ai-sdk/harness-claude-code
//   ANTHROPIC_API_KEY=... node examples/claude-code.mjs
//
// Claude Code's adapter reaches its bridge in the sandbox over a published port (`ports`,
// `getPortEndpoint`), installs its CLI with pnpm from registry.npmjs.org and calls
// api.anthropic.com: the `custom` policy allows those two names only. Credentials are brokered
// (the default with a `networkPolicy`): the adapter gives the sandbox a placeholder and hands
// hull a request transformation for api.anthropic.com, so the real key is put into requests in
// hull's gateway and never enters the sandbox (a Claude Code adapter without brokering support
// falls back to the real key in the environment). Not run by this project's tests (it needs a
// key and traffic off this machine); test/brokering.test.mjs checks the same path on loopback.
import { HarnessAgent } from "@ai-sdk/harness/agent";
import { createClaudeCode } from "@ai-sdk/harness-claude-code";

import { createHullNetworkSandboxSession } from "../dist/index.js";

const agent = new HarnessAgent({ harness: createClaudeCode() });

const sandboxSession = await createHullNetworkSandboxSession({
  image: "node:24",
  ports: [4000], // the bridge's port
  networkPolicy: { mode: "custom", allowedHosts: ["registry.npmjs.org", "api.anthropic.com"] },
  setup: ["npm install -g pnpm"],
  template: agent.getSandboxTemplate?.(),
});
try {
  const session = await agent.createSession({ sandboxSession });
  const result = await agent.generate({ session, prompt: "Write hello.js that prints the date, run it, and tell me what it printed." });
  console.log(result.text);
  console.log(await sandboxSession.readTextFile({ path: "hello.js" }));
} finally {
  await sandboxSession.destroy();
}
