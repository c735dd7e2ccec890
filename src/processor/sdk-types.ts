import type { Attributes, AttributeValue, Context, SpanKind } from '@opentelemetry/api';

/**
 * The slice of an SDK span this processor uses. Declared structurally rather
 * than imported from @opentelemetry/sdk-trace-base, so the published types do
 * not tie users to one SDK package: the 2.x line calls it sdk-trace-base, the
 * 3.x line sdk-trace, and both spans satisfy this.
 */
export interface ProcessedSpan {
  readonly kind: SpanKind;
  readonly attributes: Attributes;
  setAttribute(key: string, value: AttributeValue): unknown;
  setAttributes(attributes: Attributes): unknown;
}

/** The SpanProcessor contract of both SDK lines, with the optional `onEnding` hook. */
export interface SdkSpanProcessor {
  onStart(span: ProcessedSpan, parentContext: Context): void;
  onEnding?(span: ProcessedSpan): void;
  onEnd(span: object): void;
  forceFlush(): Promise<void>;
  shutdown(): Promise<void>;
}
