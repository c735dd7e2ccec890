// One user request against the running services.
import { withDeadline } from 'otel-deadline';
import { postJson } from './http.mjs';

/**
 * Sends one question to the agent under a `budgetMs` deadline, waits for the
 * queued report and the detached audit to settle, and returns the answer,
 * the report job's fate and how many requests reached each service.
 */
export async function runAgentScenario(services, { budgetMs = 2_000, question = 'Which laptop can ship today?' } = {}) {
  const jobsBefore = services.queue.results.length;
  const before = Object.fromEntries(Object.entries(services.arrivals).map(([name, list]) => [name, list.length]));
  const answer = await withDeadline({ operation: 'user.request', timeoutMs: budgetMs, parent: null }, ({ signal }) =>
    postJson(`${services.urls.agent}/ask`, { question }, { signal }),
  );
  await services.settle();
  const arrivals = Object.fromEntries(Object.entries(services.arrivals).map(([name, list]) => [name, list.length - before[name]]));
  return { answer, jobs: services.queue.results.slice(jobsBefore), arrivals };
}
