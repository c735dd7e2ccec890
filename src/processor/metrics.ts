import { metrics, type Counter, type Histogram, type MeterProvider } from '@opentelemetry/api';
import { METRIC_ABORTS, METRIC_REMAINING, METRIC_STOP_LAG, METRIC_VIOLATIONS } from '../attributes';

export interface DeadlineInstruments {
  violations: Counter;
  aborts: Counter;
  remaining: Histogram;
  stopLag: Histogram;
}

/** Remaining-budget buckets in ms: fine near zero, where admission decisions are made. */
const REMAINING_BUCKETS_MS = [0, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000];
/** Stop-lag buckets in ms: a socket close takes a few, a cancel round trip tens, work that ignores the abort far more. */
const STOP_LAG_BUCKETS_MS = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/** Instruments made on first use, so a MeterProvider registered after the processor still gets the data. */
export function lazyInstruments(meterProvider: MeterProvider | undefined): () => DeadlineInstruments {
  let instruments: DeadlineInstruments | undefined;
  return () => {
    if (instruments === undefined) {
      const meter = (meterProvider ?? metrics.getMeterProvider()).getMeter('otel-deadline');
      instruments = {
        violations: meter.createCounter(METRIC_VIOLATIONS, {
          description: 'Spans that broke a deadline invariant, by violation kind',
        }),
        aborts: meter.createCounter(METRIC_ABORTS, {
          description: 'Spans whose deadline was aborted before they ended, by abort code',
        }),
        remaining: meter.createHistogram(METRIC_REMAINING, {
          description: 'Deadline budget left when a hop started: a server or consumer span',
          unit: 'ms',
          advice: { explicitBucketBoundaries: REMAINING_BUCKETS_MS },
        }),
        stopLag: meter.createHistogram(METRIC_STOP_LAG, {
          description: 'Time from the later of the cutoff and the abort reaching a span to its end, for spans that ended after their cutoff',
          unit: 'ms',
          advice: { explicitBucketBoundaries: STOP_LAG_BUCKETS_MS },
        }),
      };
    }
    return instruments;
  };
}
