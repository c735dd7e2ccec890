import { queuedRequestSuite } from './helpers/queued-requests';

// DeadlineInstrumentation enabled before instrumentation-http and -undici, which inject through the global propagator.
queuedRequestSuite('deadline-first');
