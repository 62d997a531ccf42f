// The network options (`network`, `secrets`) as `hull serve` takes them. hull checks every entry
// and names a bad one; a gateway mode this hull cannot give yet comes back as NetworkUnavailable
// (it is never run with no network or the host's instead).

/** `none` (loopback only, the default), `host` (the host's network), or a gateway mode:
 * `deny-all` (nothing), `allow-all` (the public internet only), `custom` (allowHosts and
 * allowCidrs only). The gateway modes need hull-net's gateway (docs/network.md). */
export type NetworkMode = "none" | "host" | "deny-all" | "allow-all" | "custom";

export const NETWORK_MODES: readonly NetworkMode[] = ["none", "host", "deny-all", "allow-all", "custom"];

/** A gateway policy. Denied CIDRs win over every allowance. */
export interface NetworkPolicy {
  /** Default: `custom` when allowHosts or allowCidrs are given, else `none`. */
  mode?: NetworkMode;
  /** Exact names (`api.example.com`) or `*.example.com` (every name below it, not the apex). */
  allowHosts?: string[];
  /** Address blocks the box may reach (`203.0.113.0/24`, an address alone). */
  allowCidrs?: string[];
  /** Address blocks the box may never reach. */
  denyCidrs?: string[];
  /** Box ports to publish on the host's 127.0.0.1. */
  ports?: number[];
  /** The most TCP connections open at once (default 1024). */
  maxTcpConnections?: number;
}

/** `true` is `host`, `false` is `none`. */
export type Network = boolean | NetworkMode | NetworkPolicy;

/** A secret the gateway puts into requests to `hosts`; the box sees only a placeholder in the
 * environment variable `name`. Give `value` (kept in memory, never echoed back) or `env` (a
 * variable of hull's environment; the only form a named sandbox accepts). */
export interface SecretSpec {
  name: string;
  value?: string;
  env?: string;
  hosts: string[];
  /** Header names the value goes into; default `authorization`. */
  headers?: string[];
}

const POLICY_KEYS: Record<string, string> = {
  mode: "mode",
  allowHosts: "allow_hosts",
  allowCidrs: "allow_cidrs",
  denyCidrs: "deny_cidrs",
  ports: "ports",
  maxTcpConnections: "max_tcp_connections",
};

/** `network` as the wire's `network` parameter (undefined: not sent). */
export function networkParam(name: string, v: unknown): unknown {
  if (v === undefined) return undefined;
  if (typeof v === "boolean") return v ? "host" : "none";
  if (typeof v === "string") {
    if (!(NETWORK_MODES as readonly string[]).includes(v)) {
      throw new TypeError(`${name} must be true/false or one of ${NETWORK_MODES.join(", ")}, got ${JSON.stringify(v)}`);
    }
    return v;
  }
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      const wire = POLICY_KEYS[k];
      if (wire === undefined) {
        throw new TypeError(`${name}.${k} is not a network option (those are: ${Object.keys(POLICY_KEYS).join(", ")})`);
      }
      if (x !== undefined) out[wire] = x;
    }
    return out;
  }
  throw new TypeError(`${name} must be true/false, a mode (${NETWORK_MODES.join(", ")}) or a NetworkPolicy object`);
}

/** `secrets` as the wire's list (undefined: not sent). Values are never put in a message. */
export function secretsParam(name: string, v: unknown): unknown {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || !v.every((s) => s !== null && typeof s === "object" && !Array.isArray(s))) {
    throw new TypeError(`${name} must be an array of {name, value or env, hosts, headers}`);
  }
  return v.map((s) => ({ ...s }));
}
