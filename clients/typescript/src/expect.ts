/**
 * expectMessage's decisions: follow the server's next_action (and next_tool) and retry_after,
 * never loop forever, never create another inbox.
 *
 * Pure: no I/O and no clock of its own; `now` is a parameter (monotonic seconds). `Inbox` drives
 * an `Expectation` with its own I/O. The rules are the Python client's (sink/client/expect.py):
 *
 * - a wait that found the message -> claim it (if asked), then read it;
 * - `wait_for_message` / `verify_trigger` (retryable) -> wait again after `retry_after`
 *   (the long-poll itself does the waiting, so this is usually 0);
 * - `wait_then_retry` (too early, circuit open, provider trouble) -> pause `retry_after`;
 * - an unknown next_action whose `next_tool` is `wait_for_message` -> wait again, likewise;
 * - `expired`, `stop`, `create_new_inbox`, `fix_arguments`, or `blocked` with no `retry_after`
 *   -> reject (never silently create another inbox); so does a refusal of the run;
 * - an error answer that says `wait_then_retry` (a 503 with `Retry-After`: the server at its
 *   long-poll cap, provider trouble or an open circuit on read) -> pause that long, call again;
 *   no answer at all (`TransportError`: the server is down or unreachable) rejects at once;
 * - the deadline is hard: a pause that would pass it rejects at once instead of sleeping for
 *   nothing.
 */

import {
  describe,
  errorClassFor,
  EvidenceNotFound,
  fallbackHint,
  HttpError,
  RunsinkError,
  summary,
} from "./errors.js";
import type { EnvelopeJson, MatchJson } from "./types.js";

export interface Pause {
  kind: "pause";
  delayS: number;
}
export interface Found {
  kind: "found";
  messageId: string;
}
export interface Claimed {
  kind: "claimed";
  messageId: string;
}
export type Step = Pause | Found | Claimed;

const RETRY_ACTIONS = new Set(["wait_for_message", "verify_trigger", "wait_then_retry"]);

export interface ExpectationInit {
  inboxId: string;
  runId: string;
  address: string;
  match: MatchJson;
  /** The overall deadline in seconds from `started`; Infinity for none. */
  timeoutS: number;
  /** The longest single wait (the server caps it by its long_poll_max_s and the lease). */
  longPollS: number;
  /** Monotonic seconds. */
  started: number;
}

export class Expectation {
  readonly deadline: number;
  mismatch = false;
  last: EnvelopeJson | null = null;

  constructor(readonly init: ExpectationInit) {
    if (!(init.timeoutS >= 0) || !(init.longPollS >= 0)) {
      throw new RangeError("timeoutS and longPollS must be >= 0");
    }
    this.deadline = init.started + init.timeoutS;
  }

  /** How long the next wait may long-poll: up to longPollS, within the deadline (seconds, 3 decimals). */
  waitTimeout(now: number): number {
    const left = Math.max(0, Math.min(this.init.longPollS, this.deadline - now));
    return Math.round(left * 1000) / 1000;
  }

  afterWait(envelope: EnvelopeJson, now: number): Found | Pause {
    this.last = envelope;
    if (envelope.reason === "evidence_mismatch") this.mismatch = true;
    if (envelope.state === "expired") {
      // Even "proceed" here means an earlier, already claimed message: nothing new can come.
      throw this.failure(envelope);
    }
    if (
      envelope.message != null &&
      (envelope.next_action === "claim_message" || envelope.next_action === "proceed")
    ) {
      return { kind: "found", messageId: envelope.message.message_id };
    }
    if (RETRY_ACTIONS.has(envelope.next_action) || this.followsToWait(envelope)) {
      return this.pause(envelope, now);
    }
    throw this.failure(envelope);
  }

  afterClaim(envelope: EnvelopeJson, now: number): Claimed | Pause {
    this.last = envelope;
    if (envelope.next_action === "proceed" && envelope.claim != null) {
      return { kind: "claimed", messageId: envelope.claim.message_id };
    }
    if (envelope.next_action === "wait_then_retry") return this.pause(envelope, now);
    throw this.failure(envelope);
  }

  /**
   * An error answer. One that says wait_then_retry (503 with Retry-After, 429) pauses within the
   * deadline; any other is final and is rethrown with this expectation's context.
   */
  afterError(error: RunsinkError, now: number, messageId?: string): Pause {
    if (error.nextAction !== "wait_then_retry") throw this.refused(error);
    const delay = error.retryAfter ?? 1;
    if (now + delay < this.deadline) return { kind: "pause", delayS: delay };
    const what =
      messageId !== undefined
        ? `message ${messageId} in inbox ${this.init.inboxId} (run ${this.init.runId}) was found but could not be read or claimed`
        : `inbox ${this.init.inboxId} (run ${this.init.runId}) could not be waited on`;
    const Class = errorClassFor(error.reason);
    return this.raise(
      new Class(
        describe(`${what} within timeoutS=${this.init.timeoutS}`, fieldsOf(error), [
          `the server said: ${firstLine(error.message)}`,
        ]),
        {
          ...copy(error),
          envelope: this.last ?? error.envelope,
          deadlineExceeded: true,
          mismatch: this.mismatch,
          cause: error,
        },
      ),
    );
  }

  /** A final error answer (wrong_run, claimed_by_other_run, not_found, ...): same class, our context. */
  refused(error: RunsinkError): RunsinkError {
    const Class = error.constructor as new (message: string, fields?: object) => RunsinkError;
    return new Class(
      describe(this.head(), fieldsOf(error), [`the server said: ${firstLine(error.message)}`]),
      { ...copy(error), envelope: this.last ?? error.envelope, mismatch: this.mismatch, cause: error },
    );
  }

  /** The error for a terminal answer, or for a deadline reached while still retrying. */
  failure(envelope: EnvelopeJson, deadlineExceeded = false): RunsinkError {
    const reason = envelope.reason;
    const action = envelope.next_action;
    const hint = envelope.hint ?? fallbackHint(reason);
    const extra: string[] = [];
    if (deadlineExceeded) {
      extra.push(
        `gave up after timeoutS=${this.init.timeoutS} while the server still said ${envelope.status}` +
          (envelope.retry_after ? ` (retry_after=${envelope.retry_after}s)` : ""),
      );
    }
    if (envelope.state === "expired" && envelope.claim != null) {
      extra.push(
        `note: the inbox expired after its message ${envelope.claim.message_id} was claimed; ` +
          "no new message can arrive here: create a new inbox",
      );
    }
    if (this.mismatch && reason !== "evidence_mismatch") {
      extra.push("note: mail did arrive, but none matched the criteria (evidence_mismatch)");
    }
    if (envelope.near_misses && envelope.near_misses.length > 0) {
      extra.push(`near misses: ${envelope.near_misses.map((n) => n.address).join(", ")}`);
    }
    if (envelope.next_tool !== undefined) {
      extra.push(
        `next_tool=${envelope.next_tool} next_arguments=${JSON.stringify(envelope.next_arguments ?? null)}`,
      );
    }
    extra.push(`last answer: ${summary(envelope)}`);
    let Class = errorClassFor(reason);
    if (Class === HttpError) Class = deadlineExceeded ? EvidenceNotFound : RunsinkError;
    return new Class(describe(this.head(), { reason, nextAction: action, hint }, extra), {
      reason,
      nextAction: action,
      nextTool: envelope.next_tool ?? null,
      nextArguments: envelope.next_arguments ?? null,
      hint,
      retryAfter: envelope.retry_after,
      envelope,
      body: envelope,
      traceId: envelope.trace_id,
      deadlineExceeded,
      mismatch: this.mismatch,
    });
  }

  private followsToWait(envelope: EnvelopeJson): boolean {
    // A next_action this client does not know yet, whose next_tool says to wait again.
    const known = ["claim_message", "proceed", "create_new_inbox", "stop", "fix_arguments"];
    return !known.includes(envelope.next_action) && envelope.next_tool === "wait_for_message";
  }

  private pause(envelope: EnvelopeJson, now: number): Pause {
    if (envelope.status === "blocked" && envelope.retry_after == null) {
      throw this.failure(envelope); // blocked with no retry_after: do not repeat it at all
    }
    const delay = envelope.retry_after ?? 0;
    if (now + delay >= this.deadline) throw this.failure(envelope, true);
    return { kind: "pause", delayS: delay };
  }

  private raise(error: RunsinkError): never {
    throw error;
  }

  private head(): string {
    const entries = Object.entries(this.init.match).filter(([, v]) => v !== undefined);
    const criteria = entries.length
      ? ` matching ${entries.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")}`
      : "";
    return `no message${criteria} in inbox ${this.init.inboxId} <${this.init.address}> (run ${this.init.runId})`;
  }
}

function fieldsOf(error: RunsinkError): {
  reason: string | null;
  nextAction: string | null;
  hint: string | null;
} {
  return { reason: error.reason, nextAction: error.nextAction, hint: error.hint };
}

function copy(error: RunsinkError) {
  return {
    reason: error.reason,
    code: error.code,
    nextAction: error.nextAction,
    nextTool: error.nextTool,
    nextArguments: error.nextArguments,
    hint: error.hint,
    retryAfter: error.retryAfter,
    body: error.body,
    httpStatus: error.httpStatus,
    traceId: error.traceId,
  };
}

function firstLine(text: string): string {
  return text.split("\n")[0] ?? text;
}
