/**
 * Playwright Test fixtures: `import { test, expect } from "runsink/playwright"`.
 *
 * - `inbox` (per test): an inbox of its own, leased to a run id made from the test's title path,
 *   id and retry (cleaned to the run_id alphabet, at most 128 characters). `inbox.address` is
 *   ready to type into a form; its expectMessage gives up 1 s before the test's timeout (with
 *   runsink's reason and hint) unless given `timeoutS`. After the test the run is released; when the test failed, its run
 *   report is attached first (`runsink-run-report`, JSON: inboxes and events, no mail content).
 *   Options: `test.use({ runsinkInbox: { purpose, policy, ttlS, pollBudget } })`.
 * - `sink` (per test): a `Sink` for the server.
 * - `runsink` (per worker): where the server is: `RUNSINK_URL` (mail to `RUNSINK_SMTP_HOST`,
 *   default the URL's host, and `RUNSINK_SMTP_PORT`, default 1025), or else a server this worker
 *   starts itself (`runsink serve` on free ports; `RUNSINK_COMMAND` names the command).
 *
 * `setupRunsink()` is for a `globalSetup`: one server for every worker (when `RUNSINK_URL` is not
 * set), announced to the workers and the app through the same environment variables.
 */

import { randomBytes } from "node:crypto";
import { test as base, type TestInfo } from "@playwright/test";
import type { Inbox } from "./inbox.js";
import { describeReport } from "./report.js";
import { runIdFor } from "./runid.js";
import { startServer, type StartOptions } from "./server.js";
import { Sink } from "./sink.js";

export { expect } from "@playwright/test";

export interface RunsinkInboxOptions {
  purpose?: string;
  policy?: string;
  ttlS?: number;
  pollBudget?: number;
}

/** The worker's runsink server. */
export interface RunsinkLocation {
  url: string;
  smtpHost: string;
  smtpPort: number;
  /** True when this worker started the server itself. */
  embedded: boolean;
  /** Random per worker: keeps run ids unique across runs against one long-lived server. */
  salt: string;
}

export interface RunsinkTestFixtures {
  sink: Sink;
  inbox: Inbox;
  runsinkInbox: RunsinkInboxOptions;
}

export interface RunsinkWorkerFixtures {
  runsink: RunsinkLocation;
}

export const REPORT_ATTACHMENT = "runsink-run-report";

export const test = base.extend<RunsinkTestFixtures, RunsinkWorkerFixtures>({
  runsink: [
    // eslint-disable-next-line no-empty-pattern
    async ({}, use) => {
      const salt = randomBytes(8).toString("hex");
      const external = fromEnvironment(process.env);
      if (external !== null) {
        await use({ ...external, embedded: false, salt });
        return;
      }
      const server = await startServer();
      try {
        await use({
          url: server.url,
          smtpHost: server.smtpHost,
          smtpPort: server.smtpPort,
          embedded: true,
          salt,
        });
      } finally {
        await server.stop();
      }
    },
    { scope: "worker" },
  ],
  runsinkInbox: [{}, { option: true }],
  sink: async ({ runsink }, use) => {
    await use(new Sink({ url: runsink.url }));
  },
  inbox: async ({ sink, runsink, runsinkInbox }, use, testInfo) => {
    const runId = runIdForTest(testInfo, runsink.salt);
    const inbox = await sink.createInbox({
      runId,
      purpose: runsinkInbox.purpose ?? "playwright",
      ...(runsinkInbox.policy !== undefined && { policy: runsinkInbox.policy }),
      ...(runsinkInbox.ttlS !== undefined && { ttlS: runsinkInbox.ttlS }),
      ...(runsinkInbox.pollBudget !== undefined && { pollBudget: runsinkInbox.pollBudget }),
    });
    // Fail with runsink's reason and hint just before the runner's own timeout would.
    if (testInfo.timeout > 0) inbox.deadline = new Date(Date.now() + testInfo.timeout - 1000);
    try {
      await use(inbox);
    } finally {
      if (testInfo.status !== testInfo.expectedStatus) await attachReport(testInfo, sink, inbox);
      await sink.releaseRun(runId);
    }
  },
});

/** The run id of a test: its title path, readable; unique per test id, retry and repeat. */
export function runIdForTest(testInfo: TestInfo, salt: string): string {
  const retry = testInfo.retry > 0 ? ` retry${testInfo.retry}` : "";
  return runIdFor(
    `${testInfo.titlePath.join(" ")}${retry}`,
    `${salt}:${testInfo.testId}`,
    `${testInfo.retry}.${testInfo.repeatEachIndex}`,
  );
}

async function attachReport(testInfo: TestInfo, sink: Sink, inbox: Inbox): Promise<void> {
  let body: string;
  try {
    const report = await sink.runReport(inbox.runId);
    body = JSON.stringify(
      {
        run_id: inbox.runId,
        inbox_id: inbox.inboxId,
        address: inbox.address,
        summary: describeReport(report),
        report,
      },
      null,
      2,
    );
  } catch (error) {
    body = JSON.stringify({ run_id: inbox.runId, inbox_id: inbox.inboxId, error: String(error) }, null, 2);
  }
  await testInfo.attach(REPORT_ATTACHMENT, { body, contentType: "application/json" });
}

/** The server named by RUNSINK_URL (and RUNSINK_SMTP_HOST / RUNSINK_SMTP_PORT), or null. */
export function fromEnvironment(env: NodeJS.ProcessEnv): Omit<RunsinkLocation, "embedded" | "salt"> | null {
  const url = (env["RUNSINK_URL"] ?? "").trim();
  if (!url) return null;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`RUNSINK_URL: expected http(s)://host:port, got ${JSON.stringify(url)}`);
  }
  if (!["http:", "https:"].includes(parsed.protocol) || !parsed.hostname) {
    throw new Error(`RUNSINK_URL: expected http(s)://host:port, got ${JSON.stringify(url)}`);
  }
  const smtpHost = (env["RUNSINK_SMTP_HOST"] ?? "").trim() || parsed.hostname.replace(/^\[|\]$/g, "");
  const portText = (env["RUNSINK_SMTP_PORT"] ?? "").trim() || "1025";
  const smtpPort = Number(portText);
  if (!/^\d+$/.test(portText) || smtpPort < 1 || smtpPort > 65535) {
    throw new Error(`RUNSINK_SMTP_PORT: expected a port number, got ${JSON.stringify(portText)}`);
  }
  return { url: url.replace(/\/+$/, ""), smtpHost, smtpPort };
}

/**
 * For a Playwright `globalSetup`: unless `RUNSINK_URL` is set, start one server for the whole run
 * and set `RUNSINK_URL`, `RUNSINK_SMTP_HOST` and `RUNSINK_SMTP_PORT` for the workers (and for an app
 * the setup starts after it). Resolves to the teardown.
 */
export async function setupRunsink(options: StartOptions = {}): Promise<() => Promise<void>> {
  if (fromEnvironment(process.env) !== null) return async () => {};
  const server = await startServer(options);
  process.env["RUNSINK_URL"] = server.url;
  process.env["RUNSINK_SMTP_HOST"] = server.smtpHost;
  process.env["RUNSINK_SMTP_PORT"] = String(server.smtpPort);
  return async () => {
    await server.stop();
  };
}
