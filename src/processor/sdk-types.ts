import type { Attributes, AttributeValue, Context, SpanKind } from '@opentelemetry/api';

/** The slice of an SDK span this processor uses, structural so the types fit both SDK lines (2.x and 3.x). */
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
