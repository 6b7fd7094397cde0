/**
 * `Sink`: the runsink HTTP API, one method per call. The agent-facing methods map 1:1 to the MCP
 * tools that `next_tool` names: create_inbox -> createInbox, wait_for_message -> waitForMessage,
 * read_message -> readMessage, claim_message -> claim, get_run_report -> runReport,
 * find_mail -> search.
 */

import { ProtocolError } from "./errors.js";
import { isEnvelope, Transport, type Answer, type FetchLike } from "./http.js";
import { Inbox, toMatchJson, type Clock, type InboxApi, type Match, type WaitOptions } from "./inbox.js";
import { Message } from "./message.js";
import type {
  CreatedJson,
  CreateInboxBody,
  CreateWebhookBody,
  DeliveryListJson,
  EnvelopeJson,
  MessageJson,
  MessageListJson,
  RunReportJson,
  RunTokenJson,
  SearchJson,
  TestDeliveryJson,
  WaitBody,
  WebhookEventType,
  WebhookJson,
  WebhookListJson,
} from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:8025";

export interface SinkOptions {
  /** The server's HTTP URL. Default: `RUNSINK_URL`, then http://127.0.0.1:8025. */
  url?: string;
  /** A bearer token (admin, a `runs:` token or a minted run token). Default: `RUNSINK_API_TOKEN`. */
  token?: string;
  /** Seconds any request may take on top of a long-poll (default 30). */
  requestTimeoutS?: number;
  /** The fetch to use (default: the global fetch of Node 18+). */
  fetch?: FetchLike;
  /** The clock expectMessage uses (default: the real one). */
  clock?: Clock;
}

export interface CreateInboxOptions {
  /** 1-128 chars of `A-Za-z0-9._:-`: the CI job, agent run or test this inbox belongs to. */
  runId: string;
  /** 1-64 chars of `A-Za-z0-9._-`, e.g. `signup-check`. */
  purpose: string;
  ttlS?: number;
  pollBudget?: number;
  policy?: string;
  match?: Match;
  /** Default (the server's): `purpose:run_id`. */
  idempotencyKey?: string;
}

export interface CreateWebhookOptions {
  /** Where to POST the events: http(s), any host (loopback and private ones included). */
  url: string;
  /** Default: all of `message`, `inbox`, `run_event`. */
  events?: WebhookEventType[];
  /** Only this run's events. */
  runId?: string;
  /** Only the events of runs this glob matches (`team-a-*`). */
  runGlob?: string;
  description?: string;
}

export const realClock: Clock = {
  now: () => performance.now() / 1000,
  wallMs: () => Date.now(),
  sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, Math.max(0, seconds) * 1000)),
};

export class Sink implements InboxApi {
  readonly url: string;
  readonly clock: Clock;
  private readonly http: Transport;

  constructor(options: SinkOptions = {}) {
    const env = typeof process === "undefined" ? {} : process.env;
    this.url = (options.url ?? env["RUNSINK_URL"] ?? DEFAULT_URL).replace(/\/+$/, "");
    const token = options.token ?? env["RUNSINK_API_TOKEN"] ?? undefined;
    const fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.http = new Transport(this.url, token || undefined, fetchImpl, options.requestTimeoutS ?? 30);
    this.clock = options.clock ?? realClock;
  }

  /** create_inbox: a leased inbox for one run and purpose (idempotent per key while it is live). */
  async createInbox(options: CreateInboxOptions): Promise<Inbox> {
    const body: CreateInboxBody = { run_id: options.runId, purpose: options.purpose };
    if (options.ttlS !== undefined) body.ttl_s = options.ttlS;
    if (options.pollBudget !== undefined) body.poll_budget = options.pollBudget;
    if (options.policy !== undefined) body.policy = options.policy;
    if (options.match !== undefined) body.match = toMatchJson(options.match);
    const answer = await this.http.request("POST", "/v1/inboxes", {
      json: body,
      headers: { "idempotency-key": options.idempotencyKey },
    });
    const created = envelopeOf<CreatedJson>(answer, "POST /v1/inboxes");
    const replayed =
      answer.headers.get("idempotent-replayed")?.toLowerCase() === "true" || created.replayed === true;
    return new Inbox(this, created, replayed);
  }

  /** An Inbox handle for an inbox created elsewhere (e.g. by a Cypress task), from its envelope. */
  async openInbox(inboxId: string): Promise<Inbox> {
    return new Inbox(this, await this.getInbox(inboxId));
  }

  /** The envelope as of now (spends no budget, never scans). */
  async getInbox(inboxId: string): Promise<EnvelopeJson> {
    const answer = await this.http.request("GET", `/v1/inboxes/${seg(inboxId)}`);
    return envelopeOf(answer, "GET /v1/inboxes/{id}");
  }

  /** wait_for_message: one wait (spends one poll); long-polls up to `timeoutS`. */
  async waitForMessage(
    inboxId: string,
    options: WaitOptions & { runId?: string } = {},
  ): Promise<EnvelopeJson> {
    const body: WaitBody = {};
    if (options.timeoutS !== undefined) body.timeout_s = options.timeoutS;
    if (options.cursor !== undefined) body.cursor = options.cursor;
    const match = toMatchJson(options);
    if (Object.keys(match).length > 0) body.match = match;
    if (options.runId !== undefined) body.run_id = options.runId;
    if (options.order !== undefined) body.order = options.order;
    const answer = await this.http.request("POST", `/v1/inboxes/${seg(inboxId)}/wait`, {
      json: body,
      longPollS: options.timeoutS ?? 30,
    });
    return envelopeOf(answer, "POST /v1/inboxes/{id}/wait");
  }

  /** read_message: the whole message (consumes nothing). With `runId`, the server checks the run. */
  async readMessage(messageId: string, options: { runId?: string } = {}): Promise<Message> {
    const answer = await this.http.request("GET", `/v1/messages/${seg(messageId)}`, {
      headers: { "x-run-id": options.runId },
    });
    const json = objectOf(answer, "GET /v1/messages/{id}") as unknown as MessageJson;
    return new Message(json, options.runId ?? null, this);
  }

  /** The exact bytes received (`message/rfc822`). */
  async rawMessage(messageId: string, options: { runId?: string } = {}): Promise<Uint8Array> {
    const answer = await this.http.request("GET", `/v1/messages/${seg(messageId)}/raw`, {
      headers: { "x-run-id": options.runId },
      raw: true,
    });
    return answer.body as Uint8Array;
  }

  /**
   * claim_message: the one-time consumption of a message by its run. Resolves to the envelope
   * (`proceed`, or `already_claimed` for a repeat by the same run); rejects with WrongRun,
   * AlreadyClaimedByOther or LeaseExpired (whose `.envelope` is the expired inbox's).
   */
  async claim(messageId: string, runId: string): Promise<EnvelopeJson> {
    const answer = await this.http.request("POST", `/v1/messages/${seg(messageId)}/claim`, {
      json: { run_id: runId },
    });
    return envelopeOf(answer, "POST /v1/messages/{id}/claim");
  }

  /** An inbox's deliveries after a cursor, oldest first. */
  async listMessages(
    inboxId: string,
    options: { after?: string; limit?: number; runId?: string } = {},
  ): Promise<MessageListJson> {
    const answer = await this.http.request("GET", `/v1/inboxes/${seg(inboxId)}/messages`, {
      query: { after: options.after, limit: options.limit },
      headers: { "x-run-id": options.runId },
    });
    return objectOf(answer, "GET /v1/inboxes/{id}/messages") as unknown as MessageListJson;
  }

  /** get_run_report: the run's inboxes and events, in order (no mail content). */
  async runReport(runId: string): Promise<RunReportJson> {
    const answer = await this.http.request("GET", `/v1/runs/${seg(runId)}`);
    return objectOf(answer, "GET /v1/runs/{run_id}") as unknown as RunReportJson;
  }

  /** Release the run's evidence now: live inboxes expire (`lease`), bodies deleted. Idempotent. */
  async releaseRun(runId: string): Promise<void> {
    await this.http.request("DELETE", `/v1/runs/${seg(runId)}`);
  }

  /** A token limited to one run, valid until its last lease ends (or `ttlS`). */
  async mintRunToken(runId: string, options: { ttlS?: number } = {}): Promise<RunTokenJson> {
    const json = options.ttlS === undefined ? {} : { ttl_s: options.ttlS };
    const answer = await this.http.request("POST", `/v1/runs/${seg(runId)}/token`, { json });
    return objectOf(answer, "POST /v1/runs/{run_id}/token") as unknown as RunTokenJson;
  }

  /**
   * find_mail: search evidence and caught mail, newest first (`to:`, `from:`, `subject:`, `run:`,
   * `is:unclaimed`, ...). With `runId`, only that run's mail.
   */
  async search(
    query: string,
    options: { limit?: number; cursor?: string; runId?: string } = {},
  ): Promise<SearchJson> {
    const answer = await this.http.request("GET", "/v1/messages", {
      query: { query, limit: options.limit, cursor: options.cursor },
      headers: { "x-run-id": options.runId },
    });
    return objectOf(answer, "GET /v1/messages") as unknown as SearchJson;
  }

  /**
   * Create a webhook: the live events (of `runId`, of the runs `runGlob` matches, or of every
   * run) are POSTed to `url`, signed. The answer's `secret` is shown only here: pass it to
   * `verifyWebhook` in the receiver.
   */
  async createWebhook(options: CreateWebhookOptions): Promise<WebhookJson> {
    const body: CreateWebhookBody = { url: options.url };
    if (options.events !== undefined) body.events = options.events;
    if (options.runId !== undefined) body.run_id = options.runId;
    if (options.runGlob !== undefined) body.run_glob = options.runGlob;
    if (options.description !== undefined) body.description = options.description;
    const answer = await this.http.request("POST", "/v1/webhooks", { json: body });
    return objectOf(answer, "POST /v1/webhooks") as unknown as WebhookJson;
  }

  /** The webhooks this token may see (secrets never shown). */
  async listWebhooks(): Promise<WebhookJson[]> {
    const answer = await this.http.request("GET", "/v1/webhooks");
    return (objectOf(answer, "GET /v1/webhooks") as unknown as WebhookListJson).webhooks;
  }

  async getWebhook(webhookId: string): Promise<WebhookJson> {
    const answer = await this.http.request("GET", `/v1/webhooks/${seg(webhookId)}`);
    return objectOf(answer, "GET /v1/webhooks/{id}") as unknown as WebhookJson;
  }

  /** Delete a webhook: nothing more is sent to it. */
  async deleteWebhook(webhookId: string): Promise<void> {
    await this.http.request("DELETE", `/v1/webhooks/${seg(webhookId)}`);
  }

  /** The webhook's delivery attempts, newest first (`next_cursor` for older ones). */
  async listDeliveries(
    webhookId: string,
    options: { cursor?: string; limit?: number } = {},
  ): Promise<DeliveryListJson> {
    const answer = await this.http.request("GET", `/v1/webhooks/${seg(webhookId)}/deliveries`, {
      query: { cursor: options.cursor, limit: options.limit },
    });
    return objectOf(answer, "GET /v1/webhooks/{id}/deliveries") as unknown as DeliveryListJson;
  }

  /** Send the webhook a `ping` event now; resolves to the delivery's id. */
  async testWebhook(webhookId: string): Promise<string> {
    const answer = await this.http.request("POST", `/v1/webhooks/${seg(webhookId)}/test`, { json: {} });
    return (objectOf(answer, "POST /v1/webhooks/{id}/test") as unknown as TestDeliveryJson).delivery_id;
  }

  /** True when the server answers /readyz with 200. */
  async ready(): Promise<boolean> {
    try {
      return (await this.http.send("GET", "/readyz")).status === 200;
    } catch {
      return false;
    }
  }
}

function seg(value: string): string {
  return encodeURIComponent(value);
}

function objectOf(answer: Answer, what: string): Record<string, unknown> {
  const body = answer.body;
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ProtocolError(`${what}: ${answer.status} without a JSON object`, { httpStatus: answer.status });
  }
  return body as Record<string, unknown>;
}

function envelopeOf<T extends EnvelopeJson = EnvelopeJson>(answer: Answer, what: string): T {
  if (!isEnvelope(answer.body)) {
    throw new ProtocolError(`${what}: ${answer.status} without an envelope`, { httpStatus: answer.status });
  }
  return answer.body as T;
}
