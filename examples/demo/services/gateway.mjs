// The edge: every request gets one absolute deadline here, DEMO_BUDGET_MS from arrival.
import { call } from '../http.mjs';

export const edgeTimeoutMs = Number(process.env.DEMO_BUDGET_MS ?? 1_500);

export const routes = {
  '/ask': async (body, { traceId }) => ({ traceId, ...(await call('agent', '/run', body)) }),
};
