/**
 * No silent no-op (issue 12 §7): without a registered context manager no
 * deadline is ever active, so the first withDeadline says so, once, through
 * diag and a process warning that names the fix. Each case runs in a child
 * process against the build (npm test builds first): the global context
 * manager is process-wide state.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../', import.meta.url));
const tmp = fileURLToPath(new URL('./.tmp/', import.meta.url));

interface Report {
  warnings: (string | undefined)[];
  diagWarnings: number;
  innerRemainingMs: number;
}

async function runApp(name: string, setup: string): Promise<{ report: Report; stderr: string }> {
  mkdirSync(tmp, { recursive: true });
  const file = `${tmp}context-manager-${name}-${process.pid}.mjs`;
  writeFileSync(
    file,
    `import { context, diag, DiagLogLevel } from '@opentelemetry/api';
     import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
     import { retryWithinDeadline, runTool, withDeadline } from 'otel-deadline';
     ${setup}
     const warnings = [];
     process.on('warning', (warning) => warnings.push(warning.code));
     let diagWarnings = 0;
     const ignore = () => {};
     diag.setLogger({ warn: (m) => m.startsWith('otel-deadline') && diagWarnings++, error: ignore, info: ignore, debug: ignore, verbose: ignore }, DiagLogLevel.WARN);
     let innerRemainingMs = -1;
     await withDeadline({ operation: 'outer', timeoutMs: 200, parent: null }, () =>
       withDeadline({ operation: 'inner', timeoutMs: 10_000 }, (inner) => {
         innerRemainingMs = Math.round(inner.remainingMs());
       }),
     );
     await runTool('tool', () => 1);
     await retryWithinDeadline(() => 1, { deadline: null });
     // Process warnings are delivered on a later turn.
     await new Promise((resolve) => setTimeout(resolve, 10));
     console.log(JSON.stringify({ warnings, diagWarnings, innerRemainingMs }));`,
  );
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [file], { cwd: root, timeout: 20_000 });
    return { report: JSON.parse(stdout.trim()) as Report, stderr };
  } finally {
    rmSync(file, { force: true });
  }
}

describe('without a context manager', () => {
  it('warns once, through diag and a process warning naming the fix', async () => {
    const { report, stderr } = await runApp('none', '');
    expect(report.warnings).toEqual(['OTEL_DEADLINE_NO_CONTEXT_MANAGER']);
    expect(report.diagWarnings).toBe(1);
    expect(stderr).toContain('OTEL_DEADLINE_NO_CONTEXT_MANAGER');
    expect(stderr).toContain('AsyncLocalStorageContextManager');
    // What the warning is about: the inner deadline was not clamped under the 200 ms outer one.
    expect(report.innerRemainingMs).toBeGreaterThan(200);
  });
});

describe('with a context manager', () => {
  it('says nothing, and the inner deadline is clamped', async () => {
    const { report, stderr } = await runApp('async-hooks', 'context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());');
    expect(report).toEqual({ warnings: [], diagWarnings: 0, innerRemainingMs: expect.any(Number) as number });
    expect(report.innerRemainingMs).toBeLessThanOrEqual(200);
    expect(stderr).toBe('');
  });
});
