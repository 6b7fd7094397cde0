import { defineConfig } from "@playwright/test";

// A test that fails on purpose, to show the run report it carries:
//   npx playwright test -c playwright.failing.config.ts
// No globalSetup and no app: each worker's `runsink` fixture starts its own `runsink serve`.
export default defineConfig({ testDir: "failing" });
