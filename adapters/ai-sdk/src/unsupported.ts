// What hull cannot do for a named sandbox yet, refused in this one place: credential brokering
// (this adapter does not hand hull its credentials yet), ports not published at creation, and
// a live policy for a sandbox made without the gateway network. Each refusal is a
// HarnessCapabilityUnsupportedError naming what was asked and why.
import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";

function refused(what: string, why: string): HarnessCapabilityUnsupportedError {
  return new HarnessCapabilityUnsupportedError({ message: `ai-sdk-sandbox-hull: ${what} ${why}` });
}

const NO_BROKERING = "needs credential brokering, which this adapter does not wire to hull yet (hull brokers named sandboxes' secrets: give them with the Node SDK's secrets)";

/** A creation (or resume) option hull cannot honour: refused up front (nothing is made). */
export function checkBrokering(o: { brokerCredentials?: boolean }): void {
  if (o.brokerCredentials === true) throw refused("`brokerCredentials: true`", NO_BROKERING);
}

/** `setRequestTransformations` / `addRequestTransformations`: credential brokering. */
export function requestTransformations(member: string): Promise<never> {
  return Promise.reject(refused(`\`${member}\``, NO_BROKERING));
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
