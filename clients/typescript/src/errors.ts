/**
 * The client's errors: one tree, each naming the reason, the next action and a hint.
 *
 *     RunsinkError                      .reason .code .nextAction .nextTool .nextArguments .hint
 *     ├── TransportError                the server could not be reached
 *     ├── ProtocolError                 the answer is not what the contract promises
 *     ├── HttpError                     an error answer with a code the contract does not name
 *     ├── NoEvidence                    expectMessage ended without the message
 *     │   ├── EvidenceNotFound          evidence_not_found: no mail arrived
 *     │   ├── EvidenceMismatch          evidence_mismatch: mail arrived, none matched
 *     │   └── EvidenceMisaddressed      evidence_misaddressed: mail went to a near-miss address
 *     ├── InboxExpired                  lease: the lease ended (or the run was released)
 *     │   ├── BudgetSpent               timeout: the poll budget was spent without evidence
 *     │   └── LeaseExpired              lease_expired: a claim after the lease ended
 *     ├── Unavailable                   wait_then_retry: retry after retryAfter seconds
 *     │   ├── ProviderTimeout           provider_timeout
 *     │   ├── ProviderError             provider_error
 *     │   ├── OverCapacity              over_capacity
 *     │   ├── CircuitOpen               circuit_open
 *     │   ├── TooEarly                  too_early
 *     │   ├── TooManyRequests           too_many_failures, too_many_streams (429)
 *     │   └── InternalError             internal_error (500)
 *     ├── OwnershipRefused              next action stop; nothing of the other run is said
 *     │   ├── WrongRun                  wrong_run
 *     │   └── AlreadyClaimedByOther     claimed_by_other_run
 *     ├── InvalidArguments              fix_arguments
 *     │   ├── InvalidRequest            invalid_request
 *     │   ├── InvalidCursor             invalid_cursor
 *     │   ├── UnknownPolicy             unknown_policy
 *     │   ├── IdempotencyKeyConflict    idempotency_key_conflict
 *     │   └── RequestRefused            the HTTP request itself: method_not_allowed,
 *     │                                 unsupported_media_type, cross_site_request,
 *     │                                 host_not_allowed, forbidden, request_timeout,
 *     │                                 uri_too_long, header_too_large
 *     ├── NotFound                      not_found
 *     ├── PolicyForbids                 policy_forbids
 *     ├── EvidenceReleased              evidence_released
 *     ├── LiveEvidence                  live_evidence: the mail is a live inbox's evidence
 *     ├── WebhookDisabled               webhook_disabled: the webhook was disabled (a 410)
 *     ├── Unauthorized                  unauthorized
 *     ├── ForbiddenScope                forbidden_scope
 *     └── UnexpectedMessage             expectNoMessage: a matching message did arrive
 *
 * `errorClassFor(reasonOrCode)` is the one table from the contract's words to these classes.
 */

import type { EnvelopeJson, ErrorJson, NextAction, ToolName } from "./types.js";

/** What every RunsinkError carries besides its message. */
export interface ErrorFields {
  /** The contract's reason (`lease`, `timeout`, `wrong_run`, ...) or error code, or null. */
  reason?: string | null;
  /** The error answer's `error.code`, when the server sent an error object. */
  code?: string | null;
  nextAction?: NextAction | null;
  nextTool?: ToolName | null;
  nextArguments?: Record<string, unknown> | null;
  /** The server's hint, or the client's own when the server sent none. */
  hint?: string | null;
  /** Seconds to wait before calling again, when the server said so. */
  retryAfter?: number | null;
  /** The last envelope seen (expectMessage), or the envelope of an envelope-shaped error. */
  envelope?: EnvelopeJson | null;
  /** The error answer's JSON body, as sent. */
  body?: ErrorJson | EnvelopeJson | null;
  /** The HTTP status of the answer, when there was one. */
  httpStatus?: number | null;
  traceId?: string | null;
  /** True when expectMessage's own timeoutS ran out while the server still said "retry". */
  deadlineExceeded?: boolean;
  /** True when mail arrived but none matched the criteria at some point (evidence_mismatch). */
  mismatch?: boolean;
  cause?: unknown;
}

export class RunsinkError extends Error {
  readonly reason: string | null;
  readonly code: string | null;
  readonly nextAction: NextAction | null;
  readonly nextTool: ToolName | null;
  readonly nextArguments: Record<string, unknown> | null;
  readonly hint: string | null;
  readonly retryAfter: number | null;
  readonly envelope: EnvelopeJson | null;
  readonly body: ErrorJson | EnvelopeJson | null;
  readonly httpStatus: number | null;
  readonly traceId: string | null;
  readonly deadlineExceeded: boolean;
  readonly mismatch: boolean;

  constructor(message: string, fields: ErrorFields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.reason = fields.reason ?? null;
    this.code = fields.code ?? null;
    this.nextAction = fields.nextAction ?? null;
    this.nextTool = fields.nextTool ?? null;
    this.nextArguments = fields.nextArguments ?? null;
    this.hint = fields.hint ?? null;
    this.retryAfter = fields.retryAfter ?? null;
    this.envelope = fields.envelope ?? null;
    this.body = fields.body ?? null;
    this.httpStatus = fields.httpStatus ?? null;
    this.traceId = fields.traceId ?? null;
    this.deadlineExceeded = fields.deadlineExceeded ?? false;
    this.mismatch = fields.mismatch ?? false;
  }
}

export class TransportError extends RunsinkError {}
export class ProtocolError extends RunsinkError {}
export class HttpError extends RunsinkError {}

export class NoEvidence extends RunsinkError {}
export class EvidenceNotFound extends NoEvidence {}
export class EvidenceMismatch extends NoEvidence {}
export class EvidenceMisaddressed extends NoEvidence {}

export class InboxExpired extends RunsinkError {}
export class BudgetSpent extends InboxExpired {}
export class LeaseExpired extends InboxExpired {}

export class Unavailable extends RunsinkError {}
export class ProviderTimeout extends Unavailable {}
export class ProviderError extends Unavailable {}
export class OverCapacity extends Unavailable {}
export class CircuitOpen extends Unavailable {}
export class TooEarly extends Unavailable {}
export class TooManyRequests extends Unavailable {}
export class InternalError extends Unavailable {}

export class OwnershipRefused extends RunsinkError {}
export class WrongRun extends OwnershipRefused {}
export class AlreadyClaimedByOther extends OwnershipRefused {}

export class InvalidArguments extends RunsinkError {}
export class InvalidRequest extends InvalidArguments {}
export class InvalidCursor extends InvalidArguments {}
export class UnknownPolicy extends InvalidArguments {}
export class IdempotencyKeyConflict extends InvalidArguments {}
export class RequestRefused extends InvalidArguments {}

export class NotFound extends RunsinkError {}
export class PolicyForbids extends RunsinkError {}
export class EvidenceReleased extends RunsinkError {}
export class LiveEvidence extends RunsinkError {}
export class WebhookDisabled extends RunsinkError {}
export class Unauthorized extends RunsinkError {}
export class ForbiddenScope extends RunsinkError {}

/** expectNoMessage: a matching message arrived within the window. `.message` is that mail. */
export class UnexpectedMessage extends RunsinkError {
  constructor(
    message: string,
    readonly unexpected: unknown,
    fields: ErrorFields = {},
  ) {
    super(message, fields);
  }
}

type ErrorClass = new (message: string, fields?: ErrorFields) => RunsinkError;

/** The contract's reasons and error codes, each to its class. */
const CLASSES: Record<string, ErrorClass> = {
  evidence_not_found: EvidenceNotFound,
  evidence_mismatch: EvidenceMismatch,
  evidence_misaddressed: EvidenceMisaddressed,
  lease: InboxExpired,
  timeout: BudgetSpent,
  lease_expired: LeaseExpired,
  provider_timeout: ProviderTimeout,
  provider_error: ProviderError,
  over_capacity: OverCapacity,
  circuit_open: CircuitOpen,
  too_early: TooEarly,
  too_many_failures: TooManyRequests,
  too_many_streams: TooManyRequests,
  internal_error: InternalError,
  wrong_run: WrongRun,
  claimed_by_other_run: AlreadyClaimedByOther,
  invalid_request: InvalidRequest,
  invalid_cursor: InvalidCursor,
  unknown_policy: UnknownPolicy,
  idempotency_key_conflict: IdempotencyKeyConflict,
  method_not_allowed: RequestRefused,
  unsupported_media_type: RequestRefused,
  cross_site_request: RequestRefused,
  host_not_allowed: RequestRefused,
  forbidden: RequestRefused,
  request_timeout: RequestRefused,
  uri_too_long: RequestRefused,
  header_too_large: RequestRefused,
  not_found: NotFound,
  policy_forbids: PolicyForbids,
  evidence_released: EvidenceReleased,
  live_evidence: LiveEvidence,
  webhook_disabled: WebhookDisabled,
  unauthorized: Unauthorized,
  forbidden_scope: ForbiddenScope,
};

/** The class for a contract reason or error code; `HttpError` for one the contract does not name. */
export function errorClassFor(reasonOrCode: string | null | undefined): ErrorClass {
  return (reasonOrCode != null && CLASSES[reasonOrCode]) || HttpError;
}

/** What each reason (or error code) means, in a few words. */
const REASON_TEXT: Record<string, string> = {
  evidence_not_found: "no mail arrived for this inbox",
  evidence_mismatch: "mail arrived, but none matched the criteria",
  evidence_misaddressed: "mail arrived for an address a few letters away from this inbox's (a near miss)",
  provider_timeout: "the server's store did not answer in time",
  provider_error: "the server's store failed",
  over_capacity: "the server is at its capacity (connections or long-polls)",
  circuit_open: "the circuit breaker is open after repeated provider trouble",
  too_early: "the wait came before next_poll_at",
  lease: "the inbox's lease ended (or the run was released)",
  timeout: "the poll budget was spent without evidence",
  lease_expired: "the lease ended before the message was claimed",
  already_claimed: "this run had already claimed the message",
  claimed_by_other_run: "another run claimed the message",
  wrong_run: "the run does not own this inbox or message",
  invalid_request: "the request's arguments are not valid",
  invalid_cursor: "the cursor is not one the server gave",
  unknown_policy: "no policy of that name exists",
  idempotency_key_conflict: "this run and purpose already have a live inbox created with other arguments",
  not_found: "no such inbox or message",
  policy_forbids: "the policy allows no more inboxes for this run and purpose",
  evidence_released: "the evidence was released: bodies are gone, metadata kept",
  unauthorized: "the API token is missing or wrong",
  forbidden_scope: "the token's scope does not cover this call",
  live_evidence: "the mail is evidence of a live inbox and cannot be deleted now",
  webhook_disabled: "the webhook is disabled (its receiver answered 410 Gone)",
  too_many_failures: "too many calls from this address gave a wrong API token",
  too_many_streams: "too many live-event streams are open for this run or token",
  internal_error: "the server failed on this call",
  method_not_allowed: "this endpoint does not take that HTTP method",
  unsupported_media_type: "a request body must be JSON",
  cross_site_request: "the server refuses a change sent from another site",
  host_not_allowed: "the request's Host is not one this server answers for",
  forbidden: "a signed-in browser's change lacks its CSRF header",
  request_timeout: "the request did not arrive in time",
  uri_too_long: "the request target is too long",
  header_too_large: "the request head is too large",
};

/** What each next action asks the caller to do. */
const ACTION_TEXT: Record<string, string> = {
  wait_for_message: "wait again (no evidence yet)",
  verify_trigger: "check that the app really sent the mail you expect (to this address), or your criteria",
  wait_then_retry: "wait retry_after seconds, then retry",
  create_new_inbox:
    "the policy allows another inbox for this run and purpose: create one and trigger the mail again",
  stop: "nothing more is allowed for this run and purpose",
  claim_message: "claim the message",
  proceed: "use the evidence already claimed",
  fix_arguments: "correct what the error names, then call again",
};

/** The client's own hint, for answers from a server that sends none (before contract v3). */
const FALLBACK_HINTS: Record<string, string> = {
  evidence_not_found:
    "No mail has reached this inbox yet: check that the app sent the mail, to this exact address.",
  evidence_mismatch: "Mail arrived but none matched: check what the app sends, or loosen the criteria.",
  evidence_misaddressed:
    "Mail went to an address close to this inbox's: check how the app builds the recipient address.",
  lease:
    "The inbox's lease is over: fix the trigger if no mail ever arrived, then create a new inbox if the policy allows.",
  timeout:
    "The poll budget is spent: fix the trigger if no mail ever arrived, then create a new inbox if the policy allows.",
  lease_expired: "The lease ended before the claim: create a new inbox and trigger the mail again.",
  provider_timeout: "The server's store is slow: wait retry_after seconds and call again.",
  provider_error: "The server's store failed: wait retry_after seconds and call again.",
  over_capacity: "The server is busy: wait retry_after seconds and call again.",
  circuit_open: "The circuit breaker is open: wait retry_after seconds, then call again.",
  too_early: "The wait came before next_poll_at: wait retry_after seconds, then wait again.",
  wrong_run: "Use the run_id the inbox was created with.",
  claimed_by_other_run:
    "Another run owns this evidence: create an inbox of your own and trigger the mail to it.",
  invalid_request: "Correct the argument the error names, then call again.",
  invalid_cursor: "Pass a cursor the server gave for this inbox, or none.",
  unknown_policy: "Use a policy the server knows (ci, preview, production, or one in its policy file).",
  idempotency_key_conflict: "Repeat the earlier arguments, or use another purpose.",
  not_found: "Use the id returned by the call that made it.",
  policy_forbids: "The policy allows no more inboxes for this run and purpose: use another run or purpose.",
  evidence_released: "The evidence was released: only its metadata is left.",
  unauthorized: "Send a valid API token (Authorization: Bearer ...).",
  forbidden_scope: "Use a token whose scope covers this call.",
  live_evidence: "The mail is a live inbox's evidence: delete it once that inbox has expired or its run is released.",
  webhook_disabled: "The webhook is disabled: create a new one for a receiver that accepts deliveries.",
  too_many_failures: "Wait retry_after seconds, then call again with a valid API token.",
  too_many_streams: "Close a live-event stream of this run or token, or wait and retry.",
  internal_error: "The server failed: wait retry_after seconds and call again.",
  method_not_allowed: "Use a method the endpoint takes (the answer's Allow header).",
  unsupported_media_type: "Send the request body as JSON (Content-Type: application/json).",
  cross_site_request: "Call the API from a program, not a web page of another site.",
  host_not_allowed: "Call the server by a host name it answers for.",
  forbidden: "Send the signed-in browser's X-Runsink-CSRF header with the change.",
  request_timeout: "Send the whole request promptly, then call again.",
  uri_too_long: "Shorten the request target (fewer or shorter query parameters).",
  header_too_large: "Send fewer or smaller request headers.",
};

export function explainReason(reason: string | null | undefined): string | null {
  if (reason == null) return null;
  return REASON_TEXT[reason] ?? reason;
}

export function explainAction(action: string | null | undefined): string | null {
  if (action == null) return null;
  return ACTION_TEXT[action] ?? action;
}

export function fallbackHint(reason: string | null | undefined): string | null {
  if (reason == null) return null;
  return FALLBACK_HINTS[reason] ?? null;
}

/**
 * The text of an error: a head line, then reason, next action and hint, one per line.
 * `extra` lines come after the hint (the last answer, notes).
 */
export function describe(
  head: string,
  fields: { reason: string | null; nextAction: string | null; hint: string | null },
  extra: string[] = [],
): string {
  const lines = [`${head}: reason=${fields.reason}, next_action=${fields.nextAction}`];
  const reason = explainReason(fields.reason);
  if (reason !== null) lines.push(`reason: ${reason}`);
  const action = explainAction(fields.nextAction);
  if (action !== null) lines.push(`next: ${action}`);
  lines.push(`hint: ${fields.hint ?? fallbackHint(fields.reason) ?? "(none)"}`);
  lines.push(...extra);
  return lines.join("\n  ");
}

/** One line about an envelope for error messages (no subject, no content). */
export function summary(envelope: EnvelopeJson): string {
  const parts = [
    `state=${envelope.state}`,
    `status=${envelope.status}`,
    `next_action=${envelope.next_action}`,
    `reason=${envelope.reason}`,
    `attempt=${envelope.attempt}`,
    `remaining_attempts=${envelope.remaining_attempts}`,
  ];
  if (envelope.retry_after != null) parts.push(`retry_after=${envelope.retry_after}s`);
  if (envelope.next_tool !== undefined) parts.push(`next_tool=${envelope.next_tool}`);
  if (envelope.last_error) parts.push(`last_error=${envelope.last_error}`);
  parts.push(`trace_id=${envelope.trace_id}`);
  return parts.join(" ");
}
