import { GrpcInstrumentation } from '@opentelemetry/instrumentation-grpc';
import { useEchoSuite } from './helpers';
import { grpcPropagateToSuite } from './propagate-to-helpers';

// instrumentation-grpc injects through the global propagator (deadline included) before we run.
grpcPropagateToSuite(useEchoSuite(() => [new GrpcInstrumentation()]));
