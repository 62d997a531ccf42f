// The harness's network options as hull's: `networkPolicy` (allow-all, deny-all, custom),
// `ports` and `maxTcpConnections` become a named sandbox's gateway network (hull-net: every
// connection and name lookup judged by the policy, published ports on the host's 127.0.0.1).
// Checked here so a bad value is a TypeError/RangeError before anything is made; hull checks
// every entry again (a bad host or CIDR comes back as hull's InvalidArgument naming it).
import type { HarnessV1NetworkPolicy } from "@ai-sdk/harness";
import type { NetworkPolicy } from "hull-sandbox";

function strings(name: string, v: unknown): string[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || !v.every((s) => typeof s === "string")) throw new TypeError(`${name} must be an array of strings`);
  return [...v];
}

/** A harness policy as hull's `{mode, allowHosts, allowCidrs, denyCidrs}`. */
export function hullPolicy(p: HarnessV1NetworkPolicy): NetworkPolicy {
  if (p === null || typeof p !== "object") throw new TypeError("networkPolicy must be { mode: 'allow-all' | 'deny-all' | 'custom', ... }");
  const mode = (p as { mode?: unknown }).mode;
  if (mode === "allow-all" || mode === "deny-all") return { mode };
  if (mode !== "custom") throw new TypeError(`networkPolicy.mode must be "allow-all", "deny-all" or "custom", got ${String(mode)}`);
  const c = p as { allowedHosts?: unknown; allowedCIDRs?: unknown; deniedCIDRs?: unknown };
  const allowHosts = strings("networkPolicy.allowedHosts", c.allowedHosts) ?? [];
  const allowCidrs = strings("networkPolicy.allowedCIDRs", c.allowedCIDRs) ?? [];
  const denyCidrs = strings("networkPolicy.deniedCIDRs", c.deniedCIDRs) ?? [];
  // The harness's type asks for one of the allow lists; nothing allowed is deny-all, said so.
  if (allowHosts.length === 0 && allowCidrs.length === 0) throw new TypeError("networkPolicy `custom` allows nothing (no allowedHosts, no allowedCIDRs): use { mode: 'deny-all' }");
  return { mode: "custom", allowHosts, allowCidrs, denyCidrs };
}

/** Box ports as published: whole numbers 1 to 65535, each once. */
export function checkPorts(name: string, ports: unknown): number[] {
  if (!Array.isArray(ports)) throw new TypeError(`${name} must be an array of port numbers`);
  for (const p of ports) if (!(Number.isInteger(p) && p >= 1 && p <= 65535)) throw new RangeError(`${name}: ${String(p)} is not a port (1 to 65535)`);
  if (new Set(ports).size !== ports.length) throw new RangeError(`${name}: a port is given twice`);
  return [...ports];
}

/** The sandbox's `network` option: a gateway when a network option is given (`deny-all` unless
 * `networkPolicy` says otherwise), none at all (loopback only) when none is. */
export function networkOption(o: { ports?: readonly number[]; networkPolicy?: HarnessV1NetworkPolicy; maxTcpConnections?: number }): NetworkPolicy | undefined {
  const ports = o.ports === undefined ? [] : checkPorts("ports", o.ports);
  const cap = o.maxTcpConnections;
  if (cap !== undefined && !(Number.isSafeInteger(cap) && cap >= 1)) throw new RangeError(`maxTcpConnections must be a whole number above 0, got ${String(cap)}`);
  if (o.networkPolicy === undefined && ports.length === 0 && cap === undefined) return undefined;
  const policy = o.networkPolicy === undefined ? { mode: "deny-all" as const } : hullPolicy(o.networkPolicy);
  return { ...policy, ...(ports.length > 0 ? { ports } : {}), ...(cap !== undefined ? { maxTcpConnections: cap } : {}) };
}

/** One line for `description`: what the sandbox's commands may reach. */
export function describeNetwork(n: NetworkPolicy | undefined): string {
  if (n === undefined) return "The sandbox has no network access (no internet, no DNS): do not try to download packages or reach servers.";
  switch (n.mode) {
    case "allow-all":
      return "The sandbox reaches the public internet through hull's gateway (private and local addresses are refused).";
    case "deny-all":
      return "The sandbox's network allows no outside connection and no name lookup: do not try to download packages or reach servers.";
    default: {
      const hosts = n.allowHosts ?? [];
      const cidrs = n.allowCidrs ?? [];
      const allowed = [...hosts, ...cidrs].join(", ");
      return `The sandbox's network reaches only ${allowed}${(n.denyCidrs ?? []).length > 0 ? ` (never ${n.denyCidrs!.join(", ")})` : ""}; anything else is refused.`;
    }
  }
}
