// What hull cannot do for a named sandbox, refused in this one place: credential brokering
// without hull's gateway network, request transformations hull's gateway has no form for, ports
// not published at creation, and a live policy for a sandbox made without the gateway network.
// Each refusal is a HarnessCapabilityUnsupportedError naming what was asked and why.
import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";

function refused(what: string, why: string): HarnessCapabilityUnsupportedError {
  return new HarnessCapabilityUnsupportedError({ message: `ai-sdk-sandbox-hull: ${what} ${why}` });
}

const NEEDS_GATEWAY = "needs hull's gateway network, through which hull brokers credentials: give `networkPolicy` (allow-all, deny-all or custom)";

/** A creation option hull cannot honour: refused up front (nothing is made). */
export function checkBrokering(o: { brokerCredentials?: boolean; networkPolicy?: unknown }): void {
  if (o.brokerCredentials === true && o.networkPolicy === undefined) throw refused("`brokerCredentials: true`", NEEDS_GATEWAY);
}

/** `setRequestTransformations` / `addRequestTransformations` on a sandbox made without
 * brokering (no `networkPolicy`, or made by another tool without it). */
export function requestTransformations(member: string): Promise<never> {
  return Promise.reject(refused(`\`${member}\``, `${NEEDS_GATEWAY} at creation, without \`brokerCredentials: false\``));
}

/** A request transformation with a condition hull's gateway cannot express. */
export function refusedTransformation(what: string): HarnessCapabilityUnsupportedError {
  return refused("a request transformation with", `${what}: hull's gateway cannot honour it, and dropping the condition would widen where the value goes`);
}

/** `getPortEndpoint` / `getPortUrl` for a port the sandbox does not publish. */
export function unexposedPort(port: number, ports: readonly number[]): Promise<never> {
  const have = ports.length > 0 ? `it publishes ${ports.join(", ")}` : "it publishes none";
  return Promise.reject(refused(`reaching sandbox port ${port} from the host:`, `the port is not published (${have}; give \`ports\` at creation)`));
}

/** `setPorts` with a port not published at creation. */
export function portsAfterCreation(ports: readonly number[]): Promise<never> {
  return Promise.reject(refused(`\`setPorts\` (${ports.join(", ")}):`, "hull publishes ports when the sandbox is created; setPorts can only narrow them"));
}

/** `setNetworkPolicy` on a sandbox made without a network option (it has no network at all). */
export function policyWithoutGateway(mode: string): Promise<never> {
  return Promise.reject(refused(`\`setNetworkPolicy\` \`${mode}\`:`, "the sandbox was made without hull's gateway network (give `networkPolicy` at creation to change it later)"));
}
