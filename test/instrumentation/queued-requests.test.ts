import { queuedRequestSuite } from './helpers/queued-requests';

// DeadlineInstrumentation alone: only its own wrappers and undici channel subscriber write the deadline headers.
queuedRequestSuite('alone');
