/** Run ids for tests: readable, in the contract's alphabet, unique, at most 128 characters. */

import { createHash } from "node:crypto";

export const RUN_ID_MAX = 128;
const NOT_RUN_ID = /[^A-Za-z0-9._:-]+/g;
const EDGE = /^[-.:]+|[-.:]+$/g;

/**
 * A run id from a test's name: the name in the run_id alphabet (`A-Za-z0-9._:-`), ending in a
 * 10-hex hash of `salt`, the exact name and `use` (a retry or repeat), so ids stay unique where
 * cleaning or cutting collides. The end of a long name (the test's title) is kept, not its start.
 * The same rule as the pytest plugin's `run_id_for`.
 */
export function runIdFor(name: string, salt: string, use: number | string = 1): string {
  const digest = createHash("sha256").update(`${salt}\0${name}\0${use}`).digest("hex").slice(0, 10);
  let readable = name.replace(NOT_RUN_ID, "-").replace(EDGE, "");
  const keep = RUN_ID_MAX - digest.length - 1;
  if (readable.length > keep) readable = readable.slice(-keep).replace(/^[-.:]+/, "");
  return readable ? `${readable}.${digest}` : digest;
}

/** True when `value` is a valid run id. */
export function isRunId(value: string): boolean {
  return value.length >= 1 && value.length <= RUN_ID_MAX && /^[A-Za-z0-9._:-]+$/.test(value);
}
