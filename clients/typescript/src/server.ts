/**
 * A runsink server in a child process, on free ports, for a test run.
 *
 * `startServer()` runs `runsink serve --smtp-port 0 --http-port 0 --db <tmp>/runsink.db` (the
 * command from `RUNSINK_COMMAND`, else `runsink` on PATH), reads the ports from its `listening`
 * log line, waits until `/readyz` answers 200, and `stop()` ends it with SIGTERM (the server's
 * clean shutdown). The Playwright fixture uses it when `RUNSINK_URL` is not set; so can any
 * other test runner (a Playwright globalSetup, a Cypress config, node --test).
 */

import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface StartOptions {
  /** The command to run (split on spaces). Default: `RUNSINK_COMMAND`, else `runsink`. */
  command?: string;
  /** More `runsink serve` flags, e.g. `["--enable-faults"]`. */
  args?: string[];
  /** Where the database and log go. Default: a new temporary folder, removed by stop(). */
  folder?: string;
  startupTimeoutS?: number;
}

export interface RunsinkServer {
  /** The HTTP API, e.g. http://127.0.0.1:41234 */
  readonly url: string;
  readonly smtpHost: string;
  readonly smtpPort: number;
  readonly folder: string;
  readonly logPath: string;
  /** SIGTERM, then wait (SIGKILL after `timeoutS`); resolves to the exit code. */
  stop(timeoutS?: number): Promise<number | null>;
}

const POLL_MS = 25;

export async function startServer(options: StartOptions = {}): Promise<RunsinkServer> {
  const command = (options.command ?? process.env["RUNSINK_COMMAND"] ?? "runsink").trim().split(/\s+/);
  const [program, ...commandArgs] = command;
  if (!program) throw new Error("startServer: an empty command");
  const ownFolder = options.folder === undefined;
  const folder = options.folder ?? mkdtempSync(join(tmpdir(), "runsink-"));
  const logPath = join(folder, "runsink.log");
  const args = [
    ...commandArgs,
    "serve",
    "--smtp-port",
    "0",
    "--http-port",
    "0",
    "--db",
    join(folder, "runsink.db"),
    ...(options.args ?? []),
  ];
  // The caller's RUNSINK_* settings describe the server it would use instead of this one.
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("RUNSINK_")));
  const child = spawn(program, args, { env, stdio: ["ignore", "ignore", "pipe"] });
  const log = createWriteStream(logPath);
  child.stderr?.pipe(log);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const spawnError = new Promise<Error>((resolve) => child.once("error", resolve));
  const deadline = Date.now() + (options.startupTimeoutS ?? 30) * 1000;
  const stop = async (timeoutS = 20): Promise<number | null> => {
    const code = await end(child, exited, timeoutS);
    log.end();
    if (ownFolder) rmSync(folder, { recursive: true, force: true });
    return code;
  };
  try {
    const listening = await Promise.race([
      waitForListening(logPath, child, deadline),
      spawnError.then((error) => {
        throw new Error(
          `could not run ${JSON.stringify(program)} (${error.message}): install runsink (pip install runsink) ` +
            "so that `runsink` is on PATH, or set RUNSINK_COMMAND to its path, or RUNSINK_URL to a running server",
        );
      }),
    ]);
    const host = reachable(listening["http_host"]);
    const url = `http://${host.includes(":") ? `[${host}]` : host}:${Number(listening["http_port"])}`;
    await waitReady(url, child, logPath, deadline);
    return {
      url,
      smtpHost: reachable(listening["smtp_host"]),
      smtpPort: Number(listening["smtp_port"]),
      folder,
      logPath,
      stop,
    };
  } catch (error) {
    await stop(5);
    throw error;
  }
}

async function waitForListening(
  logPath: string,
  child: ChildProcess,
  deadline: number,
): Promise<Record<string, unknown>> {
  while (Date.now() < deadline) {
    for (const line of jsonLines(logPath)) {
      if (line["event"] === "listening") return line;
    }
    if (child.exitCode !== null) {
      throw new Error(`runsink exited with code ${child.exitCode} at start-up:\n${tail(logPath)}`);
    }
    await pause(POLL_MS);
  }
  throw new Error(`runsink did not start listening in time:\n${tail(logPath)}`);
}

async function waitReady(url: string, child: ChildProcess, logPath: string, deadline: number): Promise<void> {
  while (Date.now() < deadline && child.exitCode === null) {
    try {
      const response = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5000) });
      await response.arrayBuffer();
      if (response.status === 200) return;
    } catch {
      // not answering yet
    }
    await pause(POLL_MS);
  }
  throw new Error(`runsink never became ready:\n${tail(logPath)}`);
}

async function end(
  child: ChildProcess,
  exited: Promise<number | null>,
  timeoutS: number,
): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) {
    return child.exitCode;
  }
  child.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), timeoutS * 1000);
  });
  const first = await Promise.race([exited, late]);
  clearTimeout(timer);
  if (first !== "late") return first;
  child.kill("SIGKILL");
  return exited;
}

function reachable(host: unknown): string {
  if (typeof host !== "string" || host === "" || host === "0.0.0.0" || host === "::") return "127.0.0.1";
  return host;
}

function jsonLines(path: string): Record<string, unknown>[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return [];
  }
  const lines: Record<string, unknown>[] = [];
  for (const raw of text.split("\n")) {
    try {
      const parsed: unknown = JSON.parse(raw);
      if (typeof parsed === "object" && parsed !== null) lines.push(parsed as Record<string, unknown>);
    } catch {
      // a partial or non-JSON line
    }
  }
  return lines;
}

function tail(path: string, count = 20): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-count).join("\n");
  } catch {
    return "(no log)";
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
