import { coexistenceSuite } from './helpers/coexistence';

// instrumentation-http and -undici enabled first: we wrap and subscribe on top of them.
coexistenceSuite('otel-first');
