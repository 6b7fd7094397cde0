/** Envelopes shaped as the contract's table says, for the pure decision tests. */

import type { EnvelopeJson } from "../dist/types.js";

export function envelope(overrides: Partial<EnvelopeJson> = {}): EnvelopeJson {
  return {
    state: "waiting",
    status: "retryable",
    next_action: "wait_for_message",
    reason: "evidence_not_found",
    inbox_id: "ib_1",
    run_id: "run-1",
    purpose: "signup",
    address: "abc123@sink.test",
    expires_at: "2026-10-21T02:30:00.000Z",
    attempt: 1,
    remaining_attempts: 11,
    retry_after: null,
    next_poll_at: null,
    cursor: "c0",
    message: null,
    claim: null,
    last_error: null,
    trace_id: "t1",
    ...overrides,
  };
}

export const received = (overrides: Partial<EnvelopeJson> = {}): EnvelopeJson =>
  envelope({
    state: "received",
    status: "completed",
    next_action: "claim_message",
    reason: null,
    message: {
      message_id: "m_1",
      subject: "Your code",
      from: "app@example.test",
      received_at: "2026-10-21T02:00:00.000Z",
    },
    ...overrides,
  });

export const claimed = (overrides: Partial<EnvelopeJson> = {}): EnvelopeJson =>
  received({
    next_action: "proceed",
    claim: { claim_id: "c_1", message_id: "m_1", run_id: "run-1", claimed_at: "2026-10-21T02:00:01.000Z" },
    ...overrides,
  });

export const expired = (
  reason: "lease" | "timeout",
  next: "create_new_inbox" | "stop",
  overrides: Partial<EnvelopeJson> = {},
): EnvelopeJson =>
  envelope({
    state: "expired",
    status: "blocked",
    next_action: next,
    reason,
    retry_after: null,
    remaining_attempts: 0,
    ...overrides,
  });
