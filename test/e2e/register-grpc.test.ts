/**
 * The register entry with a grpc-js application (client and server in one
 * process), as child processes exporting to an OTLP/HTTP receiver run here:
 * ESM under --import, CommonJS under --require. Runs against the build.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';
import { node, root, type Run } from './run-node';

const fixtures = join(__dirname, 'fixtures');
let receiver: OtlpReceiver;

interface GrpcAppReport {
  results: ({ operation: string | null; remainingMs: number | null } | { code: number; deadlineError: boolean })[];
  runs: number;
}

function reportOf(run: Run): GrpcAppReport {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as GrpcAppReport;
}

/** Our own client and server spans (no instrumentation-grpc in the register entry), named by the RPC conventions. */
function rpcSpans(service: string) {
  return receiver.spans().filter((span) => span.service === service && span.name === 'test.Echo/Unary');
}

beforeAll(async () => {
  if (!existsSync(join(root, 'dist', 'esm', 'register.mjs'))) throw new Error('run `npm run build` first');
  receiver = await startOtlpReceiver();
});
afterAll(async () => {
  await receiver.close();
});

// Hang guards, not speed checks: a child process takes over 20 s on a loaded 2-core machine.
describe('otel-deadline/register with a grpc-js app', { timeout: 90_000 }, () => {
  it('ESM under --import: the call is clamped to the budget and the handler inherits it', async () => {
    const run = await node(['--import', 'otel-deadline/register', join(fixtures, 'grpc-app.mjs'), '3000'], {
      OTEL_SERVICE_NAME: 'grpc-esm',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    });
    const app = reportOf(run);
    expect(app.runs).toBe(1);
    const [first] = app.results as { operation: string; remainingMs: number }[];
    expect(first.operation).toBe('grpc.server');
    // The 3 s budget, not the call's own 60 s.
    expect(first.remainingMs).toBeLessThanOrEqual(3_000);
    expect(first.remainingMs).toBeGreaterThan(0);
    const spans = rpcSpans('grpc-esm');
    expect(spans.map((span) => span.kind).sort()).toEqual(['client', 'server']);
    for (const span of spans) expect(span.attributes['deadline.at_ms']).toBeDefined();
  });

  it('CommonJS under --require: below OTEL_DEADLINE_MIN_USEFUL_MS the call is refused before the server sees it', async () => {
    const run = await node(['--require', 'otel-deadline/register', join(fixtures, 'grpc-app.cjs'), '10000', '2000'], {
      OTEL_SERVICE_NAME: 'grpc-cjs',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_DEADLINE_MIN_USEFUL_MS: '5000',
    });
    const app = reportOf(run);
    expect(app.results[0]).toMatchObject({ operation: 'grpc.server' });
    expect(app.results[1]).toEqual({ code: 4, deadlineError: true });
    expect(app.runs).toBe(1);
    const refused = rpcSpans('grpc-cjs').filter((span) => span.attributes['deadline.outcome'] === 'not_started');
    expect(refused.map((span) => span.kind)).toEqual(['client']);
  });

  it('OTEL_DEADLINE_GRPC_ENABLED=false leaves grpc-js alone', async () => {
    const run = await node(['--import', 'otel-deadline/register', join(fixtures, 'grpc-app.mjs'), '3000'], {
      OTEL_SERVICE_NAME: 'grpc-off',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_DEADLINE_GRPC_ENABLED: 'false',
    });
    const app = reportOf(run);
    // No deadline reached the handler: grpc-js only saw the call's own 60 s.
    expect(app.results[0]).toEqual({ operation: null, remainingMs: null });
    expect(rpcSpans('grpc-off')).toEqual([]);
  });
});
