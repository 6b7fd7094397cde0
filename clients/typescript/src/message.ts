/** A message as read_message returns it, with camelCase fields and `claim()`. */

import type { AttachmentJson, CodeDetailJson, EnvelopeJson, MessageJson, SmtpEnvelopeJson } from "./types.js";

/** What a Message needs to claim itself: the Sink's claim. */
export interface Claimer {
  claim(messageId: string, runId: string): Promise<EnvelopeJson>;
}

export class Message {
  readonly messageId: string;
  readonly inboxId: string;
  readonly subject: string;
  /** The header From address (bare; not verified: the sender wrote it). */
  readonly from: string;
  /** The decoded display name, or null. */
  readonly fromName: string | null;
  readonly to: string[];
  readonly cc: string[];
  readonly date: string | null;
  /** null once the evidence is released. */
  readonly text: string | null;
  readonly html: string | null;
  /** Likely one-time codes, most likely first. */
  readonly codes: string[];
  readonly codesDetail: CodeDetailJson[];
  /** Absolute http(s) URLs, action links first. */
  readonly links: string[];
  readonly attachments: AttachmentJson[];
  readonly headers: Record<string, string[]> | null;
  readonly envelope: SmtpEnvelopeJson;
  readonly size: number;
  /** Whether the message was claimed when it was read. */
  readonly claimed: boolean;
  readonly receivedAt: Date;
  readonly releasedAt: Date | null;
  readonly parseWarnings: string[];
  readonly contentFlags: string[];
  readonly hiddenText: string | null;

  constructor(
    /** The server's JSON, as sent. */
    readonly json: MessageJson,
    /** The run this message was read for (claim() claims for it). */
    readonly runId: string | null,
    private readonly claimer: Claimer,
  ) {
    this.messageId = json.message_id;
    this.inboxId = json.inbox_id;
    this.subject = json.subject;
    this.from = json.from;
    this.fromName = json.from_name ?? null;
    this.to = json.to;
    this.cc = json.cc;
    this.date = json.date;
    this.text = json.text;
    this.html = json.html;
    this.codes = json.codes;
    this.codesDetail = json.codes_detail ?? [];
    this.links = json.links;
    this.attachments = json.attachments;
    this.headers = json.headers;
    this.envelope = json.envelope;
    this.size = json.size;
    this.claimed = json.claimed;
    this.receivedAt = new Date(json.received_at);
    this.releasedAt = json.released_at === null ? null : new Date(json.released_at);
    this.parseWarnings = json.parse_warnings ?? [];
    this.contentFlags = json.content_flags ?? [];
    this.hiddenText = json.hidden_text ?? null;
  }

  /** The likeliest one-time code, or null. */
  get code(): string | null {
    return this.codes[0] ?? null;
  }

  /** The first link (action links come first), or null. */
  get link(): string | null {
    return this.links[0] ?? null;
  }

  /**
   * claim_message for this message's run (or `runId`). Resolves to the envelope (`proceed`;
   * a repeat by the same run is `already_claimed`, also resolved); rejects with WrongRun,
   * AlreadyClaimedByOther or LeaseExpired.
   */
  async claim(runId?: string): Promise<EnvelopeJson> {
    const run = runId ?? this.runId;
    if (run == null) throw new TypeError(`message ${this.messageId}: claim(runId) needs the run`);
    return this.claimer.claim(this.messageId, run);
  }

  toJSON(): MessageJson {
    return this.json;
  }
}
