/**
 * The contract's JSON, as the server sends it (snake_case field names, RFC 3339 times as strings).
 *
 * These interfaces are the wire: `scripts/fields.mjs` lists their fields into `dist/fields.json`
 * and a test holds that list against the server's `/openapi.json`, so a field the server sends
 * that is missing here fails the build. Fields added in v3 (agent guidance, resends, near misses,
 * recoverable mismatches, untrusted content) are optional: an older server does not send them.
 *
 * Value lists (`REASONS`, `NEXT_ACTIONS`, ...) are the contract's; the types stay open
 * (`string & {}`) so that a value a newer server adds arrives as a plain string, not a crash.
 */

/** Any string beyond the listed ones, without losing the editor's completion of the known ones. */
type Open = string & {};

export const STATES = ["created", "waiting", "received", "expired"] as const;
export const STATUSES = ["completed", "retryable", "blocked"] as const;
export const NEXT_ACTIONS = [
  "wait_for_message",
  "claim_message",
  "proceed",
  "wait_then_retry",
  "verify_trigger",
  "create_new_inbox",
  "stop",
  "fix_arguments",
] as const;
export const REASONS = [
  "evidence_not_found",
  "evidence_mismatch",
  "evidence_misaddressed",
  "provider_timeout",
  "provider_error",
  "circuit_open",
  "too_early",
  "lease",
  "timeout",
  "already_claimed",
  "claimed_by_other_run",
  "wrong_run",
  "lease_expired",
] as const;
/**
 * The `error.code` values a server answers with (besides envelope states); a Python test
 * (tests/test_error_codes.py) reads the server's code and fails when one is missing here.
 */
export const ERROR_CODES = [
  "invalid_request",
  "invalid_cursor",
  "not_found",
  "idempotency_key_conflict",
  "policy_forbids",
  "unknown_policy",
  "evidence_released",
  "provider_timeout",
  "provider_error",
  "circuit_open",
  "over_capacity",
  "unauthorized",
  "forbidden_scope",
  "wrong_run",
  "claimed_by_other_run",
  "lease_expired",
  "live_evidence",
  "webhook_disabled",
  "internal_error",
  "too_many_failures",
  "too_many_streams",
  "method_not_allowed",
  "unsupported_media_type",
  "cross_site_request",
  "host_not_allowed",
  "forbidden",
  "request_timeout",
  "uri_too_long",
  "header_too_large",
] as const;
/** The MCP tools `next_tool` names; the client's methods map 1:1 (see README). */
export const TOOLS = [
  "create_inbox",
  "wait_for_message",
  "read_message",
  "claim_message",
  "get_run_report",
  "find_mail",
] as const;

export type State = (typeof STATES)[number] | Open;
export type Status = (typeof STATUSES)[number] | Open;
export type NextAction = (typeof NEXT_ACTIONS)[number] | Open;
export type Reason = (typeof REASONS)[number] | Open;
export type ErrorCode = (typeof ERROR_CODES)[number] | Open;
export type ToolName = (typeof TOOLS)[number] | Open;
export type Order = "oldest" | "newest";

/** Wait criteria: literal, case-insensitive substrings (never regex); all optional. */
export interface MatchJson {
  subject_contains?: string;
  from_contains?: string;
  body_contains?: string;
  max_age_s?: number;
}

/** v3 agent guidance: carried by every envelope and every error body. */
export interface AgentGuidanceJson {
  /** The MCP tool to call next, or null when there is nothing more to call. */
  next_tool?: ToolName | null;
  /** The complete arguments for `next_tool`, ready to pass as they are. */
  next_arguments?: Record<string, unknown> | null;
  /** One English sentence: what to do and why (never quotes mail content). */
  hint?: string | null;
}

/** The message a wait returned: `envelope.message`. */
export interface MessageRefJson {
  message_id: string;
  subject: string;
  from: string;
  received_at: string;
}

/** The one-time consumption of a message by its run: `envelope.claim`. */
export interface ClaimJson {
  claim_id: string;
  message_id: string;
  run_id: string;
  claimed_at: string;
}

/** v3: caught mail addressed within 2 edits of this inbox's address. */
export interface NearMissJson {
  address: string;
  received_at: string;
  distance: number;
}

/** v3: a delivery an `evidence_mismatch` wait looked at and did not match (sender-written). */
export interface UnmatchedJson {
  message_id: string;
  received_at: string;
  from: string;
  subject: string;
}

/** Every agent-facing answer (create, get, wait, claim). */
export interface EnvelopeJson extends AgentGuidanceJson {
  state: State;
  status: Status;
  next_action: NextAction;
  reason: Reason | null;
  inbox_id: string;
  run_id: string;
  purpose: string;
  address: string;
  expires_at: string;
  attempt: number;
  remaining_attempts: number;
  retry_after: number | null;
  next_poll_at: string | null;
  cursor: string;
  message: MessageRefJson | null;
  claim: ClaimJson | null;
  last_error: string | null;
  trace_id: string;
  /** v3: newer unclaimed deliveries matching the same criteria (a resend); null without a message. */
  newer_matching?: number | null;
  /** v3: up to 3 near misses, newest first. */
  near_misses?: NearMissJson[];
  /** v3: up to 3 deliveries an `evidence_mismatch` wait did not match, newest first. */
  unmatched?: UnmatchedJson[];
  /** v3: the cursor from before an `evidence_mismatch` wait, to look at the same mail again. */
  rescan_cursor?: string | null;
}

/** The create answer: an envelope, plus what the policy capped and whether it was a replay. */
export interface CreatedJson extends EnvelopeJson {
  /** v2: the request's values the policy lowered, e.g. `["ttl_s"]`. */
  capped?: string[];
  /** v3: true when a live inbox was replayed (also the `Idempotent-Replayed` header). */
  replayed?: boolean;
}

export interface ErrorObjectJson {
  code: ErrorCode;
  message: string;
  details: Record<string, unknown> | null;
}

/**
 * An error answer: `{"error": {...}}`, and (ownership refusals, provider trouble, v3 every error)
 * the agent fields beside it.
 */
export interface ErrorJson extends AgentGuidanceJson {
  error: ErrorObjectJson;
  status?: Status;
  reason?: Reason | null;
  next_action?: NextAction;
  retry_after?: number | null;
  trace_id?: string;
}

export interface AttachmentJson {
  /** The name made safe to save under (no path, control, bidi or zero-width characters). */
  filename: string;
  content_type: string;
  size: number;
  sha256: string;
  /** The name as the mail gives it (untrusted: it may hold bidi or zero-width characters). */
  original_filename?: string;
}

export interface SmtpEnvelopeJson {
  mail_from: string;
  rcpt_to: string[];
  /** v3: the SMTP AUTH user name given (never the password), or null. */
  auth_user?: string | null;
}

/** v3: one code and where it was found. */
export interface CodeDetailJson {
  value: string;
  sources: ("subject" | "text" | "html" | Open)[];
}

/** read_message: the whole message, decoded; bodies are null once the evidence is released. */
export interface MessageJson {
  message_id: string;
  inbox_id: string;
  headers: Record<string, string[]> | null;
  from: string;
  /** v2: the decoded display name, or null. */
  from_name: string | null;
  to: string[];
  cc: string[];
  subject: string;
  date: string | null;
  text: string | null;
  html: string | null;
  attachments: AttachmentJson[];
  /** Absolute http(s) URLs, action links first. */
  links: string[];
  /** Likely one-time codes, most likely first. */
  codes: string[];
  /** v3: each code with its sources. */
  codes_detail?: CodeDetailJson[];
  /** v3: text a reader of the HTML would not see, or null. */
  hidden_text?: string | null;
  /** v3: facts about the content (`hidden_text`, `bidi_controls`, ...), never a verdict. */
  content_flags?: string[];
  /** v2: what could not be parsed strictly. */
  parse_warnings: string[];
  envelope: SmtpEnvelopeJson;
  size: number;
  claimed: boolean;
  received_at: string;
  released_at: string | null;
}

export interface MessageListItemJson {
  message_id: string;
  subject: string;
  from: string;
  received_at: string;
  size: number;
  claimed: boolean;
}

export interface MessageListJson {
  messages: MessageListItemJson[];
  next_cursor: string;
  has_more: boolean;
}

/** One inbox of a run report. */
export interface RunInboxJson {
  inbox_id: string;
  purpose: string;
  address: string;
  policy: string;
  state: State;
  reason: Reason | null;
  reserved_at: string;
  expires_at: string;
  attempt: number;
  remaining_attempts: number;
  last_poll_at: string | null;
  last_poll_latency_ms: number | null;
  accepted_message_id: string | null;
  last_change_reason: string | null;
  evidence_release_at: string | null;
  released_at: string | null;
}

export interface RunEventJson {
  at: string;
  type: string;
  inbox_id: string | null;
  message_id?: string | null;
  detail: Record<string, unknown>;
}

/** The run report: its inboxes and events, in order (no mail content). */
export interface RunReportJson {
  run_id: string;
  inboxes: RunInboxJson[];
  events: RunEventJson[];
}

export interface RunTokenJson {
  token: string;
  run_id: string;
  expires_at: string;
}

/** One search hit (v2 search over evidence and caught mail). */
export interface FoundItemJson {
  message_id: string;
  caught: boolean;
  inbox_id: string | null;
  run_id: string | null;
  subject: string;
  from: string;
  to: string[];
  rcpt_to: string[];
  received_at: string;
  size: number;
  has_attachment: boolean;
  claimed: boolean;
  released: boolean;
}

export interface SearchJson {
  messages: FoundItemJson[];
  next_cursor: string | null;
  has_more: boolean;
}

/** The body of `POST /v1/inboxes`. */
export interface CreateInboxBody {
  run_id: string;
  purpose: string;
  ttl_s?: number;
  poll_budget?: number;
  policy?: string;
  match?: MatchJson;
}

/** The body of `POST /v1/inboxes/{id}/wait`. */
export interface WaitBody {
  timeout_s?: number;
  cursor?: string;
  match?: MatchJson;
  run_id?: string;
  /** v3: `oldest` (default) or `newest` unclaimed matching delivery. */
  order?: Order;
}

/** The body of `POST /v1/messages/{id}/claim`. */
export interface ClaimBody {
  run_id: string;
}

/** The body of `POST /v1/runs/{run_id}/token`. */
export interface RunTokenBody {
  ttl_s?: number;
}

/** A live event type a webhook can receive (v3). */
export type WebhookEventType = "message" | "inbox" | "run_event";

/** The body of `POST /v1/webhooks` (v3). */
export interface CreateWebhookBody {
  url: string;
  events?: WebhookEventType[];
  run_id?: string;
  run_glob?: string;
  description?: string;
}

/** A webhook (v3). `secret` is only in the create answer: keep it for `verifyWebhook`. */
export interface WebhookJson {
  webhook_id: string;
  url: string;
  events: WebhookEventType[];
  run_id: string | null;
  run_glob: string | null;
  description?: string | null;
  secret?: string;
  created_at: string;
  disabled_at: string | null;
}

export interface WebhookListJson {
  webhooks: WebhookJson[];
}

/** One attempt to deliver one event (v3), newest first in its list. */
export interface DeliveryJson {
  delivery_id: string;
  event_id: string;
  type: string;
  attempt: number;
  state: "pending" | "delivered" | "failed";
  status_code: number | null;
  error: string | null;
  at: string;
  next_attempt_at: string | null;
}

export interface DeliveryListJson {
  deliveries: DeliveryJson[];
  next_cursor: string | null;
  has_more: boolean;
}

/** The answer of `POST /v1/webhooks/{id}/test` (202). */
export interface TestDeliveryJson {
  delivery_id: string;
}

