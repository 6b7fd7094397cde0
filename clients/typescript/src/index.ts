/**
 * runsink for Node and TypeScript: disposable inboxes leased to a run, expectMessage that follows
 * the server's next_action, claims, run reports, and typed errors that say what to do next.
 *
 *     import { Sink } from "runsink";
 *     const sink = new Sink();                                   // RUNSINK_URL, else :8025
 *     const inbox = await sink.createInbox({ runId: "ci-42", purpose: "signup" });
 *     // ... the app mails inbox.address ...
 *     const mail = await inbox.expectMessage({ subjectContains: "code" });
 *     console.log(mail.code);
 */

export { Sink, DEFAULT_URL, realClock } from "./sink.js";
export type { SinkOptions, CreateInboxOptions, CreateWebhookOptions } from "./sink.js";
export { Inbox, DEFAULT_LONG_POLL_S, toMatchJson } from "./inbox.js";
export type { Clock, ExpectNoOptions, ExpectOptions, Match, WaitOptions } from "./inbox.js";
export { Message } from "./message.js";
export { Expectation } from "./expect.js";
export type { Claimed, Found, Pause, Step } from "./expect.js";
export * from "./errors.js";
export * from "./types.js";
export { runIdFor, isRunId, RUN_ID_MAX } from "./runid.js";
export { describeReport } from "./report.js";
export { verifyWebhook, secretKey, WebhookVerificationError, WEBHOOK_TOLERANCE_S } from "./webhooks.js";
export type { VerifyOptions, WebhookEvent, WebhookHeaders } from "./webhooks.js";
export { startServer } from "./server.js";
export type { RunsinkServer, StartOptions } from "./server.js";
export type { FetchLike } from "./http.js";
