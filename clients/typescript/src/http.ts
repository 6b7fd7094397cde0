/**
 * The HTTP edge: one `request` over the global `fetch` (Node 18+), and the one place an error
 * answer becomes a typed `RunsinkError`.
 */

import {
  describe,
  errorClassFor,
  fallbackHint,
  ProtocolError,
  RunsinkError,
  TransportError,
} from "./errors.js";
import type { EnvelopeJson, ErrorJson } from "./types.js";

/** A long-poll is held by the server for up to timeout_s; the request must outlast it. */
const LONG_POLL_MARGIN_S = 10;

export interface Answer {
  status: number;
  headers: Headers;
  /** The parsed JSON body; null for an empty body (204). */
  body: unknown;
}

export interface RequestOptions {
  json?: unknown;
  query?: Record<string, string | number | undefined>;
  headers?: Record<string, string | undefined>;
  /** The server may hold this request this long (a wait's timeout_s). */
  longPollS?: number;
  /** Answer as bytes instead of JSON (raw messages). */
  raw?: boolean;
}

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export class Transport {
  constructor(
    readonly url: string,
    private readonly token: string | undefined,
    private readonly fetchImpl: FetchLike,
    private readonly timeoutS: number,
  ) {}

  /** Send one request; any non-2xx answer is thrown as the `RunsinkError` it maps to. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Answer> {
    const answer = await this.send(method, path, options);
    if (answer.status >= 200 && answer.status < 300) return answer;
    throw errorFromAnswer(answer, `${method} ${path}`);
  }

  /** Send one request and return whatever the server answered (error answers too). */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Answer> {
    const url = new URL(path, this.url.endsWith("/") ? this.url : `${this.url}/`);
    for (const [key, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.token) headers["authorization"] = `Bearer ${this.token}`;
    for (const [key, value] of Object.entries(options.headers ?? {})) {
      if (value !== undefined) headers[key] = value;
    }
    const init: RequestInit = { method, headers };
    if (options.json !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(options.json);
    }
    const seconds = this.timeoutS + (options.longPollS ?? 0) + (options.longPollS ? LONG_POLL_MARGIN_S : 0);
    init.signal = AbortSignal.timeout(Math.ceil(seconds * 1000));
    let response: Response;
    let text: string;
    let bytes: Uint8Array | null = null;
    try {
      response = await this.fetchImpl(url.toString(), init);
      if (options.raw && response.ok) {
        bytes = new Uint8Array(await response.arrayBuffer());
        text = "";
      } else {
        text = await response.text();
      }
    } catch (cause) {
      const why = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
      throw new TransportError(
        `${method} ${url.pathname}: no answer from the runsink server at ${this.url} (${why}); ` +
          "check that it runs and that RUNSINK_URL points at it",
        { cause },
      );
    }
    if (bytes !== null) return { status: response.status, headers: response.headers, body: bytes };
    return {
      status: response.status,
      headers: response.headers,
      body: parseBody(text, response, method, url),
    };
  }
}

function parseBody(text: string, response: Response, method: string, url: URL): unknown {
  if (text === "") return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    if (response.ok) {
      throw new ProtocolError(`${method} ${url.pathname}: ${response.status} with a body that is not JSON`, {
        httpStatus: response.status,
      });
    }
    return null;
  }
}

/** Seconds from a `Retry-After` header (delta-seconds form), or null. */
export function retryAfterHeader(headers: Headers): number | null {
  const value = headers.get("retry-after");
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** True when a body has an envelope's shape (a claim after the lease answers one with 409). */
export function isEnvelope(body: unknown): body is EnvelopeJson {
  return isObject(body) && typeof body["state"] === "string" && typeof body["inbox_id"] === "string";
}

/** The typed error for an error answer: its class from the reason or code, its text from the contract. */
export function errorFromAnswer(answer: Answer, what: string): RunsinkError {
  const body = isObject(answer.body) ? answer.body : {};
  const error = isObject(body["error"]) ? body["error"] : {};
  const str = (value: unknown): string | null => (typeof value === "string" ? value : null);
  const code = str(error["code"]);
  const reason = str(body["reason"]) ?? code ?? `http_${answer.status}`;
  const nextAction = str(body["next_action"]) ?? defaultAction(answer.status, reason);
  const retryAfter =
    typeof body["retry_after"] === "number" ? body["retry_after"] : retryAfterHeader(answer.headers);
  const hint = str(body["hint"]);
  const traceId = str(body["trace_id"]) ?? answer.headers.get("x-trace-id");
  const serverSaid = str(error["message"]);
  const envelope = isEnvelope(answer.body) ? answer.body : null;
  const extra: string[] = [];
  if (serverSaid) extra.push(`the server said: ${serverSaid}`);
  if (envelope)
    extra.push(
      `inbox ${envelope.inbox_id} <${envelope.address}> (run ${envelope.run_id}) state=${envelope.state}`,
    );
  if (retryAfter != null) extra.push(`retry_after=${retryAfter}s`);
  if (traceId) extra.push(`trace_id=${traceId}`);
  const Class = errorClassFor(reason);
  return new Class(describe(`${what}: ${answer.status}`, { reason, nextAction, hint }, extra), {
    reason,
    code,
    nextAction,
    nextTool: str(body["next_tool"]),
    nextArguments: isObject(body["next_arguments"]) ? body["next_arguments"] : null,
    hint: hint ?? fallbackHint(reason),
    retryAfter,
    envelope,
    body: Object.keys(body).length ? (body as unknown as ErrorJson | EnvelopeJson) : null,
    httpStatus: answer.status,
    traceId,
  });
}

/** The contract's next action for an error code, for servers that do not send one (before v3). */
function defaultAction(status: number, code: string): string {
  if (["invalid_request", "invalid_cursor", "unknown_policy", "idempotency_key_conflict"].includes(code)) {
    return "fix_arguments";
  }
  if (
    status >= 500 ||
    status === 429 ||
    ["provider_timeout", "provider_error", "circuit_open", "over_capacity"].includes(code)
  ) {
    return "wait_then_retry";
  }
  return "stop";
}
