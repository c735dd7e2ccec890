import type { Tracer } from '@opentelemetry/api';
import type { DeadlinePropagator } from '../src/propagation/DeadlinePropagator';
import type { ClientHost } from './call/host';
import type { ResolvedConfig } from './config';
import type { ServerHost } from './server/listener';

/** What every wrapper reads from DeadlineInstrumentation on each call; setConfig replaces its settings. */
export class WrapperHost implements ClientHost, ServerHost {
  constructor(
    public settings: ResolvedConfig,
    public serverPropagator: DeadlinePropagator,
    private readonly currentTracer: () => Tracer,
    readonly isEnabled: () => boolean,
  ) {}

  /** The instrumentation's tracer follows setTracerProvider. */
  get tracer(): Tracer {
    return this.currentTracer();
  }

  get grpcEnabled(): boolean {
    return this.settings.grpc;
  }
}
