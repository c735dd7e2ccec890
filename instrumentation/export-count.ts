/**
 * Counts what the register entry's trace exporters were given and what they
 * delivered, so that at exit it can say in one line how many spans were
 * dropped instead of dropping them silently.
 */
import type { SpanExporterLike } from './register-exporters';

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
  async forceFlush(): Promise<void> {}
  async shutdown(): Promise<void> {}
}

interface CountedExporter {
  label: string;
  exporter: SpanExporterLike;
  /** Spans the exporter reported as delivered (ExportResultCode.SUCCESS is 0). */
  delivered(): number;
}

/** The exporter, unchanged but for a count of the spans it delivered. */
export function countDelivered(label: string, exporter: SpanExporterLike): CountedExporter {
  const inner = exporter as ExportingExporter;
  let delivered = 0;
  const counting: ExportingExporter = {
    export: (spans, done) =>
      inner.export(spans, (result) => {
        if (result.code === 0) delivered += spans.length;
        done(result);
      }),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
  return { label, exporter: counting, delivered: () => delivered };
}

/** The line to print when an exporter delivered fewer spans than ended, or undefined. */
export function droppedSpansLine(ended: number, exporters: readonly CountedExporter[], why: string): string | undefined {
  const parts = exporters.filter((counted) => counted.delivered() < ended).map((counted) => `${ended - counted.delivered()} of ${ended} spans by ${counted.label}`);
  return parts.length === 0 ? undefined : `otel-deadline/register: not exported at exit (${why}): ${parts.join(', ')}`;
}
