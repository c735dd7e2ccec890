// Reads the demo's trace back from Jaeger's query API once Jaeger has stored
// all of it. The services have flushed their spans when demo.stop() returns,
// but Jaeger batches them (200 ms in deploy/jaeger/config.yaml) before they
// are searchable, so the trace is read until its span count holds still.
import { setTimeout as sleep } from 'node:timers/promises';
import { loadTraces } from '../../dist/cjs/src/lineage/index.js';

/**
 * @param {string} jaegerUrl the query service, e.g. http://127.0.0.1:16686
 * @param {string} traceId
 * @param {{ timeoutMs?: number, settleMs?: number, minSpans?: number }} [options]
 */
export async function traceFromJaeger(jaegerUrl, traceId, { timeoutMs = 20_000, settleMs = 1_000, minSpans = 1 } = {}) {
  const started = Date.now();
  let last;
  let count = -1;
  let stableSince = Date.now();
  for (;;) {
    const traces = await loadTraces(jaegerUrl, { traceId, timeoutMs: 5_000 }).catch((err) => {
      // Not stored yet is expected at first; anything else (Jaeger down) is not.
      if (/not found/.test(err?.message ?? '')) return undefined;
      throw err;
    });
    const spans = traces?.[0]?.spans.length ?? 0;
    if (spans !== count) {
      count = spans;
      stableSince = Date.now();
    }
    last = traces;
    if (count >= minSpans && Date.now() - stableSince >= settleMs) return last;
    if (Date.now() - started > timeoutMs) {
      throw new Error(`trace ${traceId} did not settle in Jaeger at ${jaegerUrl} within ${timeoutMs} ms (${count} spans seen)`);
    }
    await sleep(200);
  }
}
