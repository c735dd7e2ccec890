import { writeFileSync } from 'node:fs';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { isRefusal, withDeadline } from '../../../src/open';
import { startOtlpReceiver } from '../../../src/lineage/receiver';
import type { OtlpRequest } from '../../../src/lineage/otlp';
import { aborted, sleep } from '../../helpers/otel';

/**
 * Span processor settings for the scenario: `slow-dependency` ends when its
 * cutoff's timer fires. Its stop lag counts from that moment, however late the
 * timer ran, but a loaded machine can still stall the promise chain that ends
 * the span; a wide allowance keeps `ended_after_deadline`, which these tests
 * are not about, out of them.
 */
export const SCENARIO_PROCESSOR = { lateGraceMs: 1_000 };

/**
 * One request under a 600 ms deadline, produced by the real core and SDK
 * (nothing sets a deadline attribute by hand):
 * - `clamped`: asks for 60 s and gets the request's cutoff;
 * - `slow-dependency`: own 120 ms cutoff, waits on its signal, aborted there;
 * - `retry`: needs 10 s of budget, refused before it starts;
 * - `late-child`: opens a fresh 5 s root under the request, later than its parent.
 */
export async function deadlineScenario(): Promise<void> {
  await withDeadline({ operation: 'request', timeoutMs: 600, parent: null }, async () => {
    await withDeadline({ operation: 'clamped', timeoutMs: 60_000 }, () => sleep(20));
    await withDeadline({ operation: 'slow-dependency', timeoutMs: 120 }, async (deadline) => {
      await aborted(deadline.signal);
    });
    await withDeadline({ operation: 'retry', timeoutMs: 1_000, minUsefulMs: 10_000 }, () => 'never runs').catch((err) => {
      if (!isRefusal(err)) throw err;
    });
    await withDeadline({ operation: 'late-child', timeoutMs: 5_000, parent: null }, () => sleep(10));
  });
}

/**
 * Sends finished spans through the real OTLP/HTTP JSON exporter to the lineage
 * receiver: what comes back is OTLP/JSON exactly as a collector or Jaeger gets it.
 */
export async function exportAsOtlpJson(spans: ReadableSpan[], file?: string): Promise<OtlpRequest[]> {
  const receiver = await startOtlpReceiver();
  const exporter = new OTLPTraceExporter({ url: receiver.tracesUrl });
  try {
    const result = await new Promise<{ code: number; error?: Error }>((resolve) => exporter.export(spans, resolve));
    if (result.code !== 0) throw result.error ?? new Error('export failed');
    if (file !== undefined) writeFileSync(file, receiver.requests.map((r) => JSON.stringify(r)).join('\n') + '\n');
    return receiver.requests;
  } finally {
    await exporter.shutdown();
    await receiver.close();
  }
}
