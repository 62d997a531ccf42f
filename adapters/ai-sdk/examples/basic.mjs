// A hull sandbox session without a model: commands, files, a spawned process, a template, and a
// resume from another process. Runs as is:
//
//   HULL_AI_SDK_IMAGE=ai-sdk-node:1 node examples/basic.mjs      (default image: node:24)
import { execFileSync } from "node:child_process";

import { createHullNetworkSandboxSession, pruneHullTemplates, resumeHullNetworkSandboxSession } from "../dist/index.js";

const image = process.env.HULL_AI_SDK_IMAGE ?? "node:24";

// A template: `prepare` runs once, as the sandbox's user, in a throwaway sandbox; later sessions
// start from its disk.
const template = {
  identity: "example-v1",
  async prepare({ session }) {
    await session.writeTextFile({ path: "tools/hello.mjs", content: 'console.log("hello from", process.env.USER)\n' });
  },
};

const session = await createHullNetworkSandboxSession({ image, template });
try {
  console.log(session.description);
  console.log((await session.run({ command: "node tools/hello.mjs; id -u" })).stdout);

  await session.writeTextFile({ path: "notes.txt", content: "one\ntwo\nthree\n" });
  console.log(await session.readTextFile({ path: "notes.txt", startLine: 2, endLine: 3 }));

  const server = await session.spawn({ command: "node -e 'setInterval(() => console.log(Date.now()), 200)'" });
  const reader = server.stdout.getReader();
  console.log("spawned, first line:", new TextDecoder().decode((await reader.read()).value).trim());
  await server.kill();
  console.log("killed:", await server.wait());

  // Another process reattaches by id.
  const other = `
    import { resumeHullNetworkSandboxSession } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
    const s = await resumeHullNetworkSandboxSession({ sandboxId: ${JSON.stringify(session.id)} });
    console.log("from another process:", await s.readTextFile({ path: "notes.txt", endLine: 1 }));
    await s.close();`;
  process.stdout.write(execFileSync(process.execPath, ["--input-type=module", "-e", other], { encoding: "utf8" }));

  await session.stop();
  const again = await resumeHullNetworkSandboxSession({ sandboxId: session.id });
  console.log("after stop, the disk is kept:", await again.readTextFile({ path: "notes.txt", endLine: 1 }));
  await again.close();
} finally {
  await session.destroy();
  console.log("templates removed:", await pruneHullTemplates());
}
