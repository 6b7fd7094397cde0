/** The real runsink server for the integration tests, from the repository's .venv. */

import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { startServer, type RunsinkServer } from "../dist/server.js";

/** RUNSINK_COMMAND, else the repository's .venv/bin/runsink (clients/typescript/../../.venv). */
export function runsinkCommand(): string {
  const given = process.env["RUNSINK_COMMAND"];
  if (given) return given;
  // .test-build/server.js -> the repository root is three levels up.
  const local = fileURLToPath(new URL("../../../.venv/bin/runsink", import.meta.url));
  if (!existsSync(local)) throw new Error(`no runsink command: set RUNSINK_COMMAND (looked for ${local})`);
  return local;
}

export async function startTestServer(...args: string[]): Promise<RunsinkServer> {
  return startServer({ command: runsinkCommand(), args });
}
