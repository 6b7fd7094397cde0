/** One leased inbox bound to its run, with expectMessage and expectNoMessage. */

import { RunsinkError, UnexpectedMessage, describe, summary } from "./errors.js";
import { Expectation } from "./expect.js";
import type { Message } from "./message.js";
import type { CreatedJson, EnvelopeJson, MatchJson, MessageListJson, Order, RunReportJson } from "./types.js";

/** Criteria of a wait: literal, case-insensitive substrings (never regex). */
export interface Match {
  subjectContains?: string;
  fromContains?: string;
  bodyContains?: string;
  /** Ignore mail received longer ago than this, at the time of each wait. */
  maxAgeS?: number;
}

export interface WaitOptions extends Match {
  /** How long the server may hold this wait (0 looks once). Default: the server's. */
  timeoutS?: number;
  cursor?: string;
  order?: Order;
}

export interface ExpectOptions extends Match {
  /** `oldest` (default) or `newest` unclaimed matching delivery (the resend usually holds the valid code). */
  order?: Order;
  /** The overall deadline in seconds. Default: until the lease ends (the budget ends it earlier), or `inbox.deadline`. */
  timeoutS?: number;
  /** Claim the message before reading it (default true). */
  claim?: boolean;
  /** The longest single long-poll (default 30 s; the server caps it). */
  longPollS?: number;
}

export interface ExpectNoOptions extends Match {
  /** How long to watch, in seconds. */
  forS: number;
  longPollS?: number;
}

/** What an Inbox asks of its Sink: the HTTP calls, and a clock (a test may hand in its own). */
export interface InboxApi {
  waitForMessage(inboxId: string, options: WaitOptions & { runId?: string }): Promise<EnvelopeJson>;
  getInbox(inboxId: string): Promise<EnvelopeJson>;
  claim(messageId: string, runId: string): Promise<EnvelopeJson>;
  readMessage(messageId: string, options?: { runId?: string }): Promise<Message>;
  listMessages(
    inboxId: string,
    options?: { after?: string; limit?: number; runId?: string },
  ): Promise<MessageListJson>;
  runReport(runId: string): Promise<RunReportJson>;
  releaseRun(runId: string): Promise<void>;
  readonly clock: Clock;
}

export interface Clock {
  /** Monotonic seconds. */
  now(): number;
  /** Wall-clock milliseconds since the epoch (to turn expires_at into a deadline). */
  wallMs(): number;
  sleep(seconds: number): Promise<void>;
}

export const DEFAULT_LONG_POLL_S = 30;
/** Past the lease end by the local clock, the server has said so: this much slack covers clock skew. */
const LEASE_SLACK_S = 5;

export class Inbox {
  /** The creation answer. */
  readonly created: CreatedJson;
  /** The last answer seen for this inbox. */
  envelope: EnvelopeJson;
  /**
   * When set, expectMessage's default deadline is the earlier of this and the lease end. The
   * Playwright fixture sets it to 1 s before the test's timeout, so that a missing mail fails
   * with runsink's reason and hint rather than with the runner's timeout.
   */
  deadline: Date | null = null;

  constructor(
    private readonly api: InboxApi,
    created: CreatedJson,
    /** True when the create replayed a live inbox (same key, same body). */
    readonly replayed = false,
  ) {
    this.created = created;
    this.envelope = created;
  }

  get address(): string {
    return this.created.address;
  }
  get inboxId(): string {
    return this.created.inbox_id;
  }
  get runId(): string {
    return this.created.run_id;
  }
  get purpose(): string {
    return this.created.purpose;
  }
  get expiresAt(): Date {
    return new Date(this.created.expires_at);
  }
  /** The creation values the policy lowered, e.g. `["ttl_s"]`. */
  get capped(): string[] {
    return this.created.capped ?? [];
  }

  toString(): string {
    return `Inbox ${this.inboxId} <${this.address}> run=${this.runId} state=${this.envelope.state}`;
  }

  /** The envelope as of now (GET: spends nothing, never scans). */
  async refresh(): Promise<EnvelopeJson> {
    this.envelope = await this.api.getInbox(this.inboxId);
    return this.envelope;
  }

  /** One wait_for_message (spends one poll); criteria given here replace the inbox's own. */
  async waitForMessage(options: WaitOptions = {}): Promise<EnvelopeJson> {
    this.envelope = await this.api.waitForMessage(this.inboxId, { ...options, runId: this.runId });
    return this.envelope;
  }

  /** claim_message for this run (default: the message of the last answer). */
  async claim(messageId?: string): Promise<EnvelopeJson> {
    this.envelope = await this.api.claim(this.messageIdOr(messageId), this.runId);
    return this.envelope;
  }

  /** read_message for this run (consumes nothing; default: the message of the last answer). */
  async read(messageId?: string): Promise<Message> {
    return this.api.readMessage(this.messageIdOr(messageId), { runId: this.runId });
  }

  async messages(options: { after?: string; limit?: number } = {}): Promise<MessageListJson> {
    return this.api.listMessages(this.inboxId, { ...options, runId: this.runId });
  }

  /** The run's report: its inboxes and events (no mail content). */
  async report(): Promise<RunReportJson> {
    return this.api.runReport(this.runId);
  }

  /** Release the run's evidence now (its live inboxes expire; bodies deleted). */
  async release(): Promise<void> {
    await this.api.releaseRun(this.runId);
  }

  /**
   * Wait for a matching message, claim it (unless `claim: false`) and resolve to it, read.
   *
   * Follows the server's next_action / next_tool and retry_after (and an error's Retry-After);
   * rejects with the RunsinkError subclass of the reason (InboxExpired, BudgetSpent, CircuitOpen,
   * WrongRun, ...) on a terminal answer, or when `timeoutS` runs out (`deadlineExceeded`).
   * Never creates another inbox: `create_new_inbox` and `stop` reject.
   */
  async expectMessage(options: ExpectOptions = {}): Promise<Message> {
    const clock = this.api.clock;
    const match = toMatchJson(options);
    const plan = new Expectation({
      inboxId: this.inboxId,
      runId: this.runId,
      address: this.address,
      match,
      timeoutS: options.timeoutS ?? this.untilLeaseEnd(clock),
      longPollS: options.longPollS ?? DEFAULT_LONG_POLL_S,
      started: clock.now(),
    });
    let messageId: string;
    for (;;) {
      let envelope: EnvelopeJson;
      try {
        envelope = await this.waitForMessage({
          ...pickMatch(options),
          order: options.order,
          timeoutS: plan.waitTimeout(clock.now()),
        });
      } catch (error) {
        await clock.sleep(plan.afterError(asRunsinkError(error), clock.now()).delayS);
        continue;
      }
      const step = plan.afterWait(envelope, clock.now());
      if (step.kind === "found") {
        messageId = step.messageId;
        break;
      }
      await clock.sleep(step.delayS);
    }
    while (options.claim ?? true) {
      let envelope: EnvelopeJson;
      try {
        envelope = await this.claim(messageId);
      } catch (error) {
        await clock.sleep(plan.afterError(asRunsinkError(error), clock.now(), messageId).delayS);
        continue;
      }
      const step = plan.afterClaim(envelope, clock.now());
      if (step.kind !== "pause") break;
      await clock.sleep(step.delayS);
    }
    for (;;) {
      try {
        return await this.read(messageId);
      } catch (error) {
        await clock.sleep(plan.afterError(asRunsinkError(error), clock.now(), messageId).delayS);
      }
    }
  }

  /**
   * Resolve when no matching mail arrived within `forS` seconds; reject with UnexpectedMessage
   * (`.unexpected` is the Message, read, not claimed) when one did. An unclaimed matching message
   * that arrived earlier counts too. Rejects with InboxExpired or BudgetSpent when the inbox
   * expires within the window (mail after that would be dropped, so "none arrived" is unknown).
   */
  async expectNoMessage(options: ExpectNoOptions): Promise<void> {
    const clock = this.api.clock;
    const match = toMatchJson(options);
    const plan = new Expectation({
      inboxId: this.inboxId,
      runId: this.runId,
      address: this.address,
      match,
      timeoutS: options.forS,
      longPollS: options.longPollS ?? DEFAULT_LONG_POLL_S,
      started: clock.now(),
    });
    for (;;) {
      const timeoutS = plan.waitTimeout(clock.now());
      if (timeoutS <= 0) return;
      let envelope: EnvelopeJson;
      try {
        envelope = await this.waitForMessage({ ...pickMatch(options), timeoutS });
      } catch (error) {
        // Trouble answered with wait_then_retry: retry within the window, else reject (unknown).
        await clock.sleep(plan.afterError(asRunsinkError(error), clock.now()).delayS);
        continue;
      }
      if (envelope.message != null && envelope.next_action === "claim_message") {
        throw await this.unexpected(envelope, match, options.forS);
      }
      if (envelope.state === "expired") throw plan.failure(envelope);
      if (envelope.status === "blocked" && envelope.retry_after == null) throw plan.failure(envelope);
      const delay = envelope.retry_after ?? 0;
      if (clock.now() + delay >= plan.deadline) return;
      await clock.sleep(delay);
    }
  }

  private async unexpected(
    envelope: EnvelopeJson,
    match: MatchJson,
    forS: number,
  ): Promise<UnexpectedMessage> {
    const message = await this.read(envelope.message?.message_id);
    const reason = "unexpected_message";
    const hint = "The app sent mail this test expects it not to send: check the trigger, or the criteria.";
    const criteria = Object.keys(match).length ? ` matching ${JSON.stringify(match)}` : "";
    return new UnexpectedMessage(
      describe(
        `expected no message${criteria} in inbox ${this.inboxId} <${this.address}> (run ${this.runId}) ` +
          `for ${forS}s, but message ${message.messageId} arrived`,
        { reason, nextAction: envelope.next_action, hint },
        [`last answer: ${summary(envelope)}`],
      ),
      message,
      {
        reason,
        nextAction: envelope.next_action,
        hint,
        envelope,
        body: envelope,
        traceId: envelope.trace_id,
      },
    );
  }

  private untilLeaseEnd(clock: Clock): number {
    const lease = Math.max(0, (Date.parse(this.created.expires_at) - clock.wallMs()) / 1000) + LEASE_SLACK_S;
    if (this.deadline === null) return lease;
    return Math.min(lease, Math.max(0, (this.deadline.getTime() - clock.wallMs()) / 1000));
  }

  private messageIdOr(given: string | undefined): string {
    if (given !== undefined) return given;
    const message = this.envelope.message;
    if (message == null) {
      throw new TypeError(`inbox ${this.inboxId}: the last answer carries no message; pass messageId`);
    }
    return message.message_id;
  }
}

export function toMatchJson(match: Match): MatchJson {
  const json: MatchJson = {};
  if (match.subjectContains !== undefined) json.subject_contains = match.subjectContains;
  if (match.fromContains !== undefined) json.from_contains = match.fromContains;
  if (match.bodyContains !== undefined) json.body_contains = match.bodyContains;
  if (match.maxAgeS !== undefined) json.max_age_s = match.maxAgeS;
  return json;
}

function pickMatch(match: Match): Match {
  const { subjectContains, fromContains, bodyContains, maxAgeS } = match;
  return { subjectContains, fromContains, bodyContains, maxAgeS };
}

function asRunsinkError(error: unknown): RunsinkError {
  if (error instanceof RunsinkError) return error;
  throw error;
}
