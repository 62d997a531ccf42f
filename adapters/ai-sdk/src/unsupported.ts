// Everything that needs hull's sandbox network (issue 16: published ports, the egress policy,
// credential brokering through the gateway), refused in this one place until that network is in
// hull. Each refusal is a HarnessCapabilityUnsupportedError naming what was asked and why; wiring
// one later means replacing its function here and the call that uses it, nothing else.
import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";
import type { HarnessV1NetworkPolicy } from "@ai-sdk/harness";

const WHY = "needs hull's sandbox network, not in this build";

export function networkUnsupported(what: string): HarnessCapabilityUnsupportedError {
  return new HarnessCapabilityUnsupportedError({ message: `ai-sdk-sandbox-hull: ${what} ${WHY}` });
}

/** A creation option the network would honour: refused up front (nothing is made). */
export function checkNetworkOptions(o: {
  ports?: readonly number[];
  networkPolicy?: HarnessV1NetworkPolicy;
  brokerCredentials?: boolean;
  maxTcpConnections?: number;
}): void {
  if (o.ports !== undefined && o.ports.length > 0) throw networkUnsupported(`\`ports\` (${o.ports.join(", ")}: published on 127.0.0.1)`);
  // Without the network a sandbox has no interface but loopback: `deny-all` is what it gets.
  if (o.networkPolicy !== undefined && o.networkPolicy.mode !== "deny-all") {
    throw networkUnsupported(`\`networkPolicy\` \`${o.networkPolicy.mode}\` (a sandbox of this build has no network at all, which \`deny-all\` asks for)`);
  }
  if (o.brokerCredentials === true) throw networkUnsupported("`brokerCredentials: true` (credential brokering)");
  if (o.maxTcpConnections !== undefined) throw networkUnsupported("`maxTcpConnections`");
}

/** `getPortEndpoint` / `getPortUrl`: no port is published. */
export function portEndpoint(port: number): Promise<never> {
  return Promise.reject(networkUnsupported(`reaching sandbox port ${port} from the host (\`getPortEndpoint\`)`));
}

/** `setPorts`: none can be published; an empty list is what the sandbox has. */
export function setPorts(ports: readonly number[]): Promise<void> {
  if (ports.length === 0) return Promise.resolve();
  return Promise.reject(networkUnsupported(`\`setPorts\` (${ports.join(", ")})`));
}

/** `setNetworkPolicy`: only `deny-all`, which the sandbox already has. */
export function setNetworkPolicy(policy: HarnessV1NetworkPolicy): Promise<void> {
  if (policy.mode === "deny-all") return Promise.resolve();
  return Promise.reject(networkUnsupported(`\`setNetworkPolicy\` \`${policy.mode}\``));
}

/** `setRequestTransformations` / `addRequestTransformations`: credential brokering. */
export function requestTransformations(member: string): Promise<never> {
  return Promise.reject(networkUnsupported(`\`${member}\` (credential brokering)`));
}
