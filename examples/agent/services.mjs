// Starts the example's services on loopback, port 0: the agent and the
// dependencies its tools call, plus the report queue and its worker.
import { runTool, withDeadline } from 'otel-deadline';
import { answer } from './agent.mjs';
import { pause, serve } from './http.mjs';
import { startReportQueue } from './queue.mjs';

export const DEFAULT_SERVICE_OPTIONS = Object.freeze({
  plannerDelayMs: 50,
  subAgentDelayMs: 150,
  /** How many reads of one idempotency key fail with 503 before one succeeds. */
  inventoryFailures: 1,
  enrichmentDelayMs: 100,
  /** How long a report job waits in the queue before the worker takes it. */
  queueDelayMs: 100,
  reportDelayMs: 20,
  /** What the agent keeps back to serialize its answer. */
  reserveMs: 300,
  /** The optional enrichment runs only if this much is usable after the reserve. */
  enrichmentMinMs: 400,
  /** The agent's budget for requests that arrive without a deadline. */
  defaultBudgetMs: 2_000,
});

/** Starts every service; `close()` stops them all (and drops pending queue deliveries). */
export async function startAgentServices(overrides = {}) {
  const o = { ...DEFAULT_SERVICE_OPTIONS, ...overrides };
  const readsByKey = new Map();

  const planner = await serve('planner', async ({ deadline }) => {
    await pause(o.plannerDelayMs, deadline?.signal);
    return { steps: ['research', 'inventory', 'report'] };
  });
  const subAgent = await serve('sub-agent', () =>
    runTool('sub-agent.search', async ({ signal }) => {
      await pause(o.subAgentDelayMs, signal);
      return { findings: 3 };
    }),
  );
  const inventory = await serve('inventory', async ({ headers }) => {
    const key = String(headers['idempotency-key']);
    const reads = (readsByKey.get(key) ?? 0) + 1;
    readsByKey.set(key, reads);
    if (reads <= o.inventoryFailures) throw Object.assign(new Error('busy'), { status: 503 });
    return { available: 4 };
  });
  const enrichment = await serve('enrichment', async ({ deadline }) => {
    await pause(o.enrichmentDelayMs, deadline?.signal);
    return { rows: 2 };
  });
  const report = await serve('report', async ({ deadline }) => {
    await pause(o.reportDelayMs, deadline?.signal);
    return { ok: true };
  });
  const queue = startReportQueue({ reportUrl: report.url, delayMs: o.queueDelayMs });

  const audits = new Set();
  const urls = { planner: planner.url, subAgent: subAgent.url, inventory: inventory.url, enrichment: enrichment.url, report: report.url };
  const agent = await serve('agent', ({ body, deadline }) => {
    const run = async () => {
      const { audit, ...reply } = await answer(body, { urls, queue, reserveMs: o.reserveMs, enrichmentMinMs: o.enrichmentMinMs });
      const tracked = audit.catch(() => undefined).finally(() => audits.delete(tracked));
      audits.add(tracked);
      return reply;
    };
    // An edge gives a budget to requests that arrive without one.
    return deadline === undefined ? withDeadline({ operation: 'agent.request', timeoutMs: o.defaultBudgetMs, parent: null }, run) : run();
  });

  const services = [agent, planner, subAgent, inventory, enrichment, report];
  return {
    options: o,
    urls: { agent: agent.url, ...urls },
    /** Requests that reached each service, by service name. */
    arrivals: Object.fromEntries(services.map((s) => [s.name, s.arrivals])),
    queue,
    /** Waits for queued jobs and detached work started so far. */
    async settle() {
      await queue.drain();
      await Promise.all(audits);
    },
    async close() {
      queue.close();
      await Promise.all(services.map((s) => s.close()));
    },
  };
}
