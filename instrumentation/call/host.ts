import type { Tracer } from '@opentelemetry/api';
import type { ResolvedConfig } from '../config';

/** What the transport wrappers (HTTP, database, gRPC) need from the instrumentation, read on every call (config can change). */
export interface ClientHost {
  readonly settings: ResolvedConfig;
  readonly tracer: Tracer;
}
