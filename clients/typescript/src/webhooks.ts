/**
 * Verify a webhook delivery: `const event = verifyWebhook(secret, req.headers, rawBody)`.
 *
 * runsink signs each delivery by the Standard Webhooks rules: `webhook-signature` holds
 * `v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>` entries (space-separated),
 * the key being the base64 after `whsec_` in the secret. This checks `webhook-id`,
 * `webhook-timestamp` (within `toleranceS` of now: 5 minutes, as the reference libraries) and
 * every `v1,` entry in constant time, then returns the body's event. Pass the body exactly as
 * received (a Buffer or string), never JSON parsed and serialised again.
 */

import { createHmac, timingSafeEqual } from "node:crypto";

import { RunsinkError } from "./errors.js";

/** The default tolerance between `webhook-timestamp` and now, in seconds. */
export const WEBHOOK_TOLERANCE_S = 300;

/** A verified delivery's body: the live event's type, id and data (as SSE gives them). */
export interface WebhookEvent {
  type: string;
  id: string;
  timestamp: string;
  data: Record<string, unknown>;
}

/** Node's `req.headers`, a fetch `Headers`, or any object of header names (in any case). */
export type WebhookHeaders =
  | { get(name: string): string | null }
  | Record<string, string | readonly string[] | undefined>;

export interface VerifyOptions {
  /** Seconds `webhook-timestamp` may be from now (default 300). */
  toleranceS?: number;
  /** Now, in Unix seconds (default the system clock). */
  nowS?: number;
}

/** A delivery that does not verify: answer it with a 4xx (the attempt will be retried). */
export class WebhookVerificationError extends RunsinkError {}

/** The delivery's event, once its signature and timestamp check out; else throws. */
export function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): WebhookEvent {
  const payload = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const eventId = header(headers, "webhook-id");
  const stamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  checkTime(stamp, options.nowS ?? Date.now() / 1000, options.toleranceS ?? WEBHOOK_TOLERANCE_S);
  const expected = createHmac("sha256", secretKey(secret))
    .update(`${eventId}.${stamp}.`)
    .update(payload)
    .digest();
  const matches = v1Macs(signatures).some(
    (mac) => mac.length === expected.length && timingSafeEqual(mac, expected),
  );
  if (!matches) {
    throw new WebhookVerificationError(
      `webhook ${eventId}: no v1 signature in webhook-signature matches this secret; check that ` +
        "the secret is this webhook's (shown once, at create) and that the body is the raw bytes " +
        "received, not JSON parsed and serialised again",
    );
  }
  return eventOf(eventId, payload);
}

/** The HMAC key a secret encodes (`whsec_` optional, base64 padding optional). */
export function secretKey(secret: string): Buffer {
  const text = secret.trim().replace(/^whsec_/, "").replace(/=+$/, "");
  if (!/^[A-Za-z0-9+/]*$/.test(text) || text.length % 4 === 1) {
    throw new TypeError(
      "a webhook secret is 'whsec_' followed by base64 (as POST /v1/webhooks returned it); " +
        "this one is not base64",
    );
  }
  const key = Buffer.from(text, "base64");
  if (key.length === 0) {
    throw new TypeError("the webhook secret is empty: pass the secret POST /v1/webhooks returned");
  }
  return key;
}

function header(headers: WebhookHeaders, name: string): string {
  let value: string | readonly string[] | null | undefined;
  if (typeof headers.get === "function") {
    value = (headers as { get(name: string): string | null }).get(name);
  } else {
    const record = headers as Record<string, string | readonly string[] | undefined>;
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  const text = (typeof value === "string" ? value : (value?.join(" ") ?? "")).trim();
  if (text === "") {
    throw new WebhookVerificationError(
      `missing ${name} header: not a Standard Webhooks delivery (runsink sends ` +
        "webhook-id, webhook-timestamp and webhook-signature)",
    );
  }
  return text;
}

function checkTime(stamp: string, nowS: number, toleranceS: number): void {
  if (!/^[0-9]+$/.test(stamp)) {
    const shown = JSON.stringify(stamp.slice(0, 32));
    throw new WebhookVerificationError(`webhook-timestamp ${shown} is not Unix seconds`);
  }
  const skew = Number(stamp) - nowS;
  if (!Number.isFinite(skew) || Math.abs(skew) > toleranceS) {
    const when = skew < 0 ? "in the past" : "in the future";
    throw new WebhookVerificationError(
      `webhook-timestamp ${stamp} is ${Math.abs(skew).toFixed(0)} s ${when}, outside the ` +
        `${toleranceS} s tolerance: a replayed delivery, or this host's clock is off`,
    );
  }
}

/** The MACs of the header's `v1,` entries (space-separated; other versions skipped). */
function v1Macs(value: string): Buffer[] {
  const macs: Buffer[] = [];
  for (const entry of value.split(/\s+/)) {
    const comma = entry.indexOf(",");
    if (comma < 0 || entry.slice(0, comma) !== "v1") continue;
    const encoded = entry.slice(comma + 1);
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) continue;
    macs.push(Buffer.from(encoded, "base64"));
  }
  return macs;
}

function eventOf(eventId: string, payload: Buffer): WebhookEvent {
  let data: unknown;
  try {
    data = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload));
  } catch {
    throw new WebhookVerificationError(`webhook ${eventId}: the signature matches but the body is not JSON`);
  }
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new WebhookVerificationError(`webhook ${eventId}: the body is not a JSON object`);
  }
  const body = data as Record<string, unknown>;
  const inner = body["data"];
  const isObject = typeof inner === "object" && inner !== null && !Array.isArray(inner);
  return {
    type: String(body["type"] ?? ""),
    id: String(body["id"] ?? eventId),
    timestamp: String(body["timestamp"] ?? ""),
    data: isObject ? (inner as Record<string, unknown>) : {},
  };
}
