import { coexistenceSuite } from './helpers/coexistence';

// DeadlineInstrumentation enabled before instrumentation-http and -undici: they wrap and subscribe on top of us.
coexistenceSuite('deadline-first');
