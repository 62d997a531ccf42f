// ai-sdk-sandbox-hull: a hull named sandbox as a sandbox session of the Vercel AI SDK's harness.
export { createHullNetworkSandboxSession, resumeHullNetworkSandboxSession, DEFAULT_IMAGE, type HullNetworkSandboxSessionOptions } from "./create.js";
export { HullNetworkSandboxSession, type SandboxFacts } from "./session.js";
export { pruneHullTemplates, templateName, TEMPLATE_PREFIX, type HullSandboxTemplate } from "./templates.js";
export { HullCommandError, HullSandboxNotFoundError } from "./errors.js";
