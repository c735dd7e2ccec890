import { queuedRequestSuite } from './helpers/queued-requests';

// instrumentation-http and -undici enabled first: their undici:request:create subscriber runs before ours.
queuedRequestSuite('otel-first');
