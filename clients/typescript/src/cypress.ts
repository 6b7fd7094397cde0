/**
 * Cypress tasks built on the same client: `cy.task` runs them in Node (the Cypress config's
 * `setupNodeEvents`), so the browser-side spec only passes plain JSON back and forth.
 *
 *     // cypress.config.ts
 *     import { runsinkTasks } from "runsink/cypress";
 *     export default defineConfig({ e2e: { setupNodeEvents(on) { on("task", runsinkTasks()); } } });
 *
 *     // a spec
 *     cy.task("runsink:createInbox", { purpose: "signup" }).then((inbox) => { ... inbox.address ... });
 *     cy.task("runsink:expectMessage", { inbox, subjectContains: "code" }, { timeout: 60000 })
 *       .then((mail) => cy.get("#code").type(mail.code));
 *
 * Every task resolves to JSON (never undefined, as cy.task requires) and rejects with the
 * client's error, whose message says the reason, the next action and the hint.
 */

import { randomBytes } from "node:crypto";
import type { ExpectOptions, ExpectNoOptions, Match } from "./inbox.js";
import type { Message } from "./message.js";
import { describeReport } from "./report.js";
import { runIdFor } from "./runid.js";
import { Sink, type SinkOptions } from "./sink.js";
import type { EnvelopeJson, RunReportJson } from "./types.js";

/** An inbox as a task passes it around: plain JSON. */
export interface TaskInbox {
  inboxId: string;
  runId: string;
  address: string;
  purpose: string;
  expiresAt: string;
}

/** A message as a task returns it: plain JSON, camelCase, with `code` and `link` resolved. */
export interface TaskMessage {
  messageId: string;
  subject: string;
  from: string;
  fromName: string | null;
  to: string[];
  text: string | null;
  html: string | null;
  codes: string[];
  code: string | null;
  links: string[];
  link: string | null;
  receivedAt: string;
}

export interface CreateInboxTaskArgs {
  /** Default: a fresh run id made from `name` (e.g. Cypress.currentTest.titlePath.join(" ")). */
  runId?: string;
  name?: string;
  purpose?: string;
  policy?: string;
  ttlS?: number;
  pollBudget?: number;
}

export type ExpectTaskArgs = { inbox: TaskInbox } & Omit<ExpectOptions, "claim"> & { claim?: boolean };
export type ExpectNoTaskArgs = { inbox: TaskInbox } & ExpectNoOptions;

export interface RunsinkTasks {
  [name: string]: (args: never) => Promise<unknown>;
  "runsink:createInbox": (args?: CreateInboxTaskArgs | null) => Promise<TaskInbox>;
  "runsink:expectMessage": (args: ExpectTaskArgs) => Promise<TaskMessage>;
  "runsink:expectNoMessage": (args: ExpectNoTaskArgs) => Promise<null>;
  "runsink:claim": (args: { inbox: TaskInbox; messageId: string }) => Promise<EnvelopeJson>;
  "runsink:runReport": (args: { runId: string }) => Promise<RunReportJson & { summary: string }>;
  "runsink:releaseRun": (args: { runId: string }) => Promise<null>;
}

/** The task functions for `on("task", runsinkTasks())`; `options` go to the Sink. */
export function runsinkTasks(options: SinkOptions = {}): RunsinkTasks {
  const sink = new Sink(options);
  const salt = randomBytes(8).toString("hex");
  let uses = 0;
  return {
    "runsink:createInbox": async (args) => {
      const given = args ?? {};
      uses += 1;
      const runId = given.runId ?? runIdFor(given.name ?? "cypress", salt, uses);
      const inbox = await sink.createInbox({
        runId,
        purpose: given.purpose ?? "cypress",
        ...(given.policy !== undefined && { policy: given.policy }),
        ...(given.ttlS !== undefined && { ttlS: given.ttlS }),
        ...(given.pollBudget !== undefined && { pollBudget: given.pollBudget }),
      });
      return {
        inboxId: inbox.inboxId,
        runId: inbox.runId,
        address: inbox.address,
        purpose: inbox.purpose,
        expiresAt: inbox.created.expires_at,
      };
    },
    "runsink:expectMessage": async ({ inbox, ...options }) => {
      const handle = await sink.openInbox(inbox.inboxId);
      return toTaskMessage(await handle.expectMessage(options));
    },
    "runsink:expectNoMessage": async ({ inbox, ...options }) => {
      const handle = await sink.openInbox(inbox.inboxId);
      await handle.expectNoMessage(options);
      return null;
    },
    "runsink:claim": async ({ inbox, messageId }) => sink.claim(messageId, inbox.runId),
    "runsink:runReport": async ({ runId }) => {
      const report = await sink.runReport(runId);
      return { ...report, summary: describeReport(report) };
    },
    "runsink:releaseRun": async ({ runId }) => {
      await sink.releaseRun(runId);
      return null;
    },
  };
}

export function toTaskMessage(message: Message): TaskMessage {
  return {
    messageId: message.messageId,
    subject: message.subject,
    from: message.from,
    fromName: message.fromName,
    to: message.to,
    text: message.text,
    html: message.html,
    codes: message.codes,
    code: message.code,
    links: message.links,
    link: message.link,
    receivedAt: message.json.received_at,
  };
}

export type { Match };
