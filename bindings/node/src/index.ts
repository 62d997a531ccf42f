// hull-sandbox: run untrusted code in a fresh, kernel-enforced box (the Node SDK of hull).
export { FileOperationError, HullError, InvalidArgument, KernelDied, MountRefused, NetworkUnavailable, SandboxError } from "./errors.js";
export { NETWORK_MODES, type Network, type NetworkMode, type NetworkPolicy, type SecretSpec } from "./network.js";
export { ExecutionResult, Result, type Fault, type FileChange, type FileEntry } from "./result.js";
export { Kernel, LANGUAGES, PROTOCOL, Sandbox, runCode, type CallOptions, type CodeCallOptions, type RunOptions, type Language, type RunCodeOptions, type SandboxOptions } from "./sandbox.js";
export { findHull } from "./server.js";
export {
  NamedSandbox,
  Process,
  listSandboxes,
  listTemplates,
  pruneTemplates,
  removeTemplate,
  resume,
  type ExecOptions,
  type NamedSandboxOptions,
  type PublishedPort,
  type SandboxListing,
  type TemplateListing,
  type Transformation,
} from "./named.js";
