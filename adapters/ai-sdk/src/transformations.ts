// The harness's request transformations as hull's gateway takes them (`named.set_transformations`),
// and how `addRequestTransformations` merges. hull matches a host, a path (exact, prefix or
// regex), one method, exact query parameters and exact header values; a harness matcher hull has
// no form for (a key or value by prefix or regex) is refused with
// HarnessCapabilityUnsupportedError, never dropped, since a dropped condition would widen where
// a credential goes.
import type { HarnessV1RequestTransformation } from "@ai-sdk/harness";
import type { Transformation } from "hull-sandbox";

import { refusedTransformation } from "./unsupported.js";

type Matcher = { exact: string } | { startsWith: string } | { regex: string };

function exactOf(m: Matcher | undefined, what: string): string {
  if (m === undefined || typeof m !== "object") throw refusedTransformation(`${what} with no exact value`);
  if ("exact" in m && typeof m.exact === "string") return m.exact;
  throw refusedTransformation(`${what} matched by ${Object.keys(m).join(", ")} (hull matches query parameters and headers exactly)`);
}

function checkOne(t: unknown, i: number): HarnessV1RequestTransformation {
  const bad = (why: string) => new TypeError(`transformation ${i}: ${why}`);
  if (t === null || typeof t !== "object") throw bad("must be an object");
  const o = t as HarnessV1RequestTransformation;
  if (o.match === null || typeof o.match !== "object" || typeof o.match.host !== "string" || o.match.host === "") throw bad("match.host must be a non-empty string");
  if (o.transform === null || typeof o.transform !== "object" || o.transform.headers === null || typeof o.transform.headers !== "object") throw bad("transform.headers must be an object of strings");
  for (const [k, v] of Object.entries(o.transform.headers)) if (typeof v !== "string") throw bad(`transform.headers.${k} must be a string`);
  if (o.match.method !== undefined && (!Array.isArray(o.match.method) || o.match.method.some((m) => typeof m !== "string"))) throw bad("match.method must be a list of strings");
  // An empty list would match no method, or (read as absent) every one: neither is meant.
  if (o.match.method !== undefined && o.match.method.length === 0) throw bad("match.method is empty (leave it out to match every method)");
  return o;
}

/** Checks a list the harness gave. */
export function checkList(ts: unknown): HarnessV1RequestTransformation[] {
  if (!Array.isArray(ts)) throw new TypeError("transformations must be a list");
  return ts.map((t, i) => checkOne(t, i));
}

/** hull's form of each transformation: one per method when it names several. */
export function toHull(ts: ReadonlyArray<HarnessV1RequestTransformation>): Transformation[] {
  const out: Transformation[] = [];
  for (const t of ts) {
    const m = t.match;
    const match: Transformation["match"] = { hosts: [m.host] };
    if (m.path !== undefined) {
      const p = m.path as Matcher;
      if ("exact" in p) match.path = { exact: p.exact };
      else if ("startsWith" in p) match.path = { prefix: p.startsWith };
      else if ("regex" in p) match.path = { regex: p.regex };
      else throw refusedTransformation("a path matcher other than exact, startsWith or regex");
    }
    for (const [list, into, what] of [
      [m.queryString, "query", "a query parameter"],
      [m.headers, "headers", "a header"],
    ] as const) {
      if (list === undefined) continue;
      const map: Record<string, string> = {};
      for (const kv of list) {
        const key = exactOf(kv.key as Matcher | undefined, `${what} key`);
        // Two conditions on one key cannot both be kept in hull's form; keeping one would widen it.
        if (Object.hasOwn(map, key)) throw refusedTransformation(`two conditions on ${what} \`${key}\``);
        map[key] = exactOf(kv.value as Matcher | undefined, `${what} value`);
      }
      match[into] = map;
    }
    const headers = { ...t.transform.headers };
    const methods = m.method === undefined ? [undefined] : m.method;
    for (const method of methods) out.push({ match: method === undefined ? match : { ...match, method }, action: "set", headers });
  }
  return out;
}
