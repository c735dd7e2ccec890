import type { Tracer } from '@opentelemetry/api';
import type { DeadlinePropagator } from '../src/propagation/DeadlinePropagator';
import type { ClientHost } from './call/host';
import type { ResolvedConfig } from './config';
import type { ServerHost } from './server/admission';

/**
 * What every wrapper reads from DeadlineInstrumentation on each call: one
 * object per instrumentation, whose fields setConfig replaces. A class with
 * data fields, not an object literal with getters: V8 keeps a literal with
 * accessors in dictionary mode, so each `host.settings` in a compiled wrapper
 * was an inline-cache miss (the LoadIC builtin) and a getter call.
 */
export class WrapperHost implements ClientHost, ServerHost {
  constructor(
    public settings: ResolvedConfig,
    public serverPropagator: DeadlinePropagator,
    private readonly currentTracer: () => Tracer,
    readonly isEnabled: () => boolean,
  ) {}

  /** Read only where a span of our own is made; the instrumentation's tracer follows setTracerProvider. */
  get tracer(): Tracer {
    return this.currentTracer();
  }

  get grpcEnabled(): boolean {
    return this.settings.grpc;
  }
}
