/**
 * Counts what the register entry's trace exporters were given and what they
 * delivered, so that at exit it can say in one line how many spans were
 * dropped instead of dropping them silently.
 */
import type { SpanExporterLike } from './register-exporters';

const SUCCESS = 0;

interface ExportingExporter {
  export(spans: readonly unknown[], done: (result: { code: number }) => void): void;
  shutdown(): Promise<void>;
  forceFlush?(): Promise<void>;
}

/** Spans ended with the sampled flag: what every exporter is meant to deliver. */
export class EndedSpanCounter {
  ended = 0;
  onStart(): void {}
  onEnd(span: { spanContext(): { traceFlags: number } }): void {
    if ((span.spanContext().traceFlags & 1) === 1) this.ended += 1;
  }
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

export interface CountedExporter {
  label: string;
  exporter: SpanExporterLike;
  /** Spans the exporter reported as delivered. */
  delivered(): number;
}

/** The exporter, unchanged but for a count of the spans it delivered. */
export function countDelivered(label: string, exporter: SpanExporterLike): CountedExporter {
  const inner = exporter as ExportingExporter;
  let delivered = 0;
  const counting: ExportingExporter = {
    export(spans, done) {
      inner.export(spans, (result) => {
        if (result.code === SUCCESS) delivered += spans.length;
        done(result);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
  return { label, exporter: counting, delivered: () => delivered };
}

/** The line to print when an exporter delivered fewer spans than ended, or undefined. */
export function droppedSpansLine(ended: number, exporters: readonly CountedExporter[], why: string): string | undefined {
  const short = exporters
    .map((counted) => ({ label: counted.label, dropped: ended - counted.delivered() }))
    .filter((entry) => entry.dropped > 0);
  if (short.length === 0) return undefined;
  const parts = short.map((entry) => `${entry.dropped} of ${ended} spans by ${entry.label}`);
  return `otel-deadline/register: not exported at exit (${why}): ${parts.join(', ')}`;
}
