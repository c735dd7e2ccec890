import { propagateToSuite } from './helpers/propagate-to';

propagateToSuite('otel-first');
