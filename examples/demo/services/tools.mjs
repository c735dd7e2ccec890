// The tools the agent calls. Each honours the deadline that came with the request.
import { getDeadline } from 'otel-deadline';
import { pause, statusError } from '../http.mjs';

const signal = () => getDeadline()?.signal;

export const routes = {
  '/plan': async () => {
    await pause(80, signal());
    return { steps: ['search', 'read', 'summarize'] };
  },
  // A dependency far slower than any budget: only the cutoff ends it.
  '/search': async () => {
    await pause(5_000, signal());
    return { hits: 0 };
  },
  // Busy: always 503, so the caller wants to retry.
  '/flaky': async () => {
    await pause(60, signal());
    throw statusError(503);
  },
  '/warm': async () => {
    await pause(40, signal());
    return { warmed: true };
  },
};
