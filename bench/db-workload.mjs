// The database workloads shared by bench:db and bench:db:instructions: PostgreSQL
// `SELECT 1` (a pool under concurrency, and one client serially for latency)
// and Redis `GET`, against the real servers at 127.0.0.1, under the
// OpenTelemetry SDK with instrumentation-pg and -ioredis and a batch span
// processor with a no-op exporter. `mode` says what of the deadline plugin is
// added:
// - 'none': nothing (OpenTelemetry and its driver instrumentations only);
// - 'guard-off': DeadlineSpanProcessor and DeadlineInstrumentation with the
//   pg and ioredis guards switched off (`pg: false, ioredis: false`), every
//   statement under an active deadline: what an app with deadlines pays
//   without the database guard;
// - 'guard-on': the same with the guards on, so each statement is guarded;
// - 'idle': guards on, no deadline active (the path that must cost one
//   context read);
// - 'floor-off' / 'floor-on': not the package but bare stand-ins for the
//   least work of the deadline contract (bench/contract-floor.mjs): its span
//   processor, every statement under a deadline; 'floor-on' adds its
//   per-statement part in the driver instrumentations' request and response hooks.
import { createRequire } from 'node:module';
import * as contractFloor from './contract-floor.mjs';

const require = createRequire(import.meta.url);

export const MODES = Object.freeze(['none', 'guard-off', 'guard-on', 'idle', 'floor-off', 'floor-on']);
/** What each mode is compared with: the guard with the guard switched off, the rest with no plugin. */
export const BASELINE = Object.freeze({ 'guard-off': 'none', 'guard-on': 'guard-off', idle: 'none', 'floor-off': 'none', 'floor-on': 'floor-off' });
/** Workers running at once in the throughput workloads, and the pg pool's size. */
export const CONCURRENCY = 8;
/** A budget no statement comes near: the guard arms and disarms, the cutoff never fires. */
const BUDGET_MS = 600_000;
const PG_CONFIG = { host: '127.0.0.1', port: 5432, database: 'test', user: 'postgres' };
const REDIS_KEY = 'otel-deadline:bench';

/** Starts the SDK and the connections; resolves with `run(workload, { seconds } | { count })`. */
export async function startWorkload(mode) {
  const api = require('@opentelemetry/api');
  const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
  const { registerInstrumentations } = require('@opentelemetry/instrumentation');
  const { BasicTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  const { PgInstrumentation } = require('@opentelemetry/instrumentation-pg');
  const { IORedisInstrumentation } = require('@opentelemetry/instrumentation-ioredis');
  const floor = mode.startsWith('floor');
  const lib = mode === 'none' || floor ? undefined : require('../dist/cjs/src/index.js');
  const floorHooks = mode === 'floor-on' ? contractFloor.floorStatementHooks(api) : {};

  const noopExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} };
  const guardOff = mode === 'guard-off' ? { pg: false, ioredis: false } : {};
  const deadline = lib === undefined ? undefined : new lib.DeadlineInstrumentation(guardOff);
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.trace.setGlobalTracerProvider(
    new BasicTracerProvider({
      spanProcessors: [
        ...(lib === undefined ? [] : [new lib.DeadlineSpanProcessor()]),
        ...(floor ? [new contractFloor.FloorSpanProcessor(api)] : []),
        new BatchSpanProcessor(noopExporter, { maxQueueSize: 65_536, maxExportBatchSize: 512, scheduledDelayMillis: 2 ** 31 - 1 }),
      ],
    }),
  );
  registerInstrumentations({
    instrumentations: [
      // The instrumentation's request hooks, where this version of the package offers them.
      new PgInstrumentation(deadline?.pgRequestHook ? { requestHook: deadline.pgRequestHook } : floorHooks),
      // The workers run outside any server span; instrumentation-ioredis would otherwise record nothing.
      new IORedisInstrumentation({ requireParentSpan: false, ...(deadline?.ioredisRequestHook ? { requestHook: deadline.ioredisRequestHook } : floorHooks) }),
      ...(deadline ? [deadline] : []),
    ],
  });
  const pg = require('pg');
  const Redis = require('ioredis').default;
  const pool = new pg.Pool({ ...PG_CONFIG, max: CONCURRENCY });
  const client = new pg.Client(PG_CONFIG);
  await client.connect();
  const redis = new Redis({ host: '127.0.0.1', port: 6379 });
  await redis.set(REDIS_KEY, 'v');

  const operations = {
    'pg-throughput': { concurrency: CONCURRENCY, op: () => pool.query('SELECT 1') },
    'pg-latency': { concurrency: 1, op: () => client.query('SELECT 1') },
    'redis-throughput': { concurrency: CONCURRENCY, op: () => redis.get(REDIS_KEY) },
  };

  /** Runs `workload` for `seconds`, or `count` operations; resolves with its figures. */
  async function run(workload, { seconds, count }) {
    const { concurrency, op } = operations[workload];
    const scope = mode === 'guard-on' || mode === 'guard-off' ? lib.openDeadline({ operation: 'bench', timeoutMs: BUDGET_MS, parent: null }) : undefined;
    const active = api.context.active();
    const ctx = floor ? contractFloor.withFloorDeadline(api, active, BUDGET_MS) : scope === undefined ? active : lib.setDeadline(active, scope);
    const latenciesUs = [];
    let started = 0;
    const end = seconds === undefined ? Infinity : performance.now() + seconds * 1000;
    const more = () => (count === undefined ? performance.now() < end : started < count);
    const worker = async () => {
      while (more()) {
        started++;
        const t0 = performance.now();
        await op();
        latenciesUs.push((performance.now() - t0) * 1000);
      }
    };
    const cpuBefore = process.cpuUsage();
    const t0 = performance.now();
    await api.context.with(ctx, () => Promise.all(Array.from({ length: concurrency }, worker)));
    const elapsedS = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    scope?.dispose();
    latenciesUs.sort((a, b) => a - b);
    return {
      ops: latenciesUs.length,
      opsPerS: latenciesUs.length / elapsedS,
      p50Us: latenciesUs[Math.floor(latenciesUs.length / 2)],
      cpuPerOpUs: (cpu.user + cpu.system) / latenciesUs.length,
    };
  }

  async function close() {
    await pool.end();
    await client.end();
    redis.disconnect();
  }

  return { run, close };
}

/** The workload of bench/callgrind.mjs: `CONFIG` is `workload/mode`, such as `redis-throughput/guard-on`. */
export async function open(config) {
  const [workload, mode] = config.split('/');
  if (!MODES.includes(mode)) throw new RangeError(`unknown mode ${mode}: one of ${MODES.join(', ')}`);
  const { run, close } = await startWorkload(mode);
  return { run: (count) => run(workload, { count }), close };
}
