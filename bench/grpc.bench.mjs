// npm run bench:grpc — the cost of the deadline plugin on unary gRPC calls.
//
// One child process per mode, each running the workload of
// bench/grpc-workload.mjs: a grpc-js server and a client calling it over
// loopback, under the OpenTelemetry Node SDK with instrumentation-grpc on both
// sides. "without" has no deadline plugin; "contract" has the deadline
// propagator and span processor and calls under a deadline (600 s, so none is
// cut); "with" adds DeadlineInstrumentation; "floor" is not the package but
// bare stand-ins for the least work the deadline contract needs
// (bench/contract-floor.mjs). All pass the same `deadline` option (600 s)
// of their own, as gRPC callers usually do.
//
// The parent asks each child in turn for a batch of CALLS calls, CONCURRENCY
// in flight, in rotating order, and compares calls/s per round: each round
// runs "with" right next to "without", so a shared machine that slows down for
// a while slows both sides of a round alike. Bounded: ROUNDS × 4 batches.
//
// Information only: the target is judged in instructions (bench:grpc:instructions).
// Writes bench/results/grpc.json.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { CONCURRENCY, MODES, startGrpc } from './grpc-workload.mjs';
import { writeResult } from './report.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_GRPC_ROUNDS ?? 10);
const CALLS = Number(process.env.BENCH_GRPC_CALLS ?? 4_000);
const WARMUP_CALLS = 4_000;

/** Child: the workload; runs a batch of calls per IPC message. */
async function serve(mode) {
  // A batch's deadline that a loaded machine cannot use up.
  const { batch, close } = await startGrpc(mode, { budgetMs: 600_000 });
  process.on('message', async ({ calls }) => {
    const cpuBefore = process.cpuUsage();
    const t0 = performance.now();
    await batch(calls);
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpuBefore);
    process.send({ ms, cpuUsPerCall: (cpu.user + cpu.system) / calls });
  });
  process.once('disconnect', () => void close().finally(() => process.exit(0)));
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
}

function startChild(mode) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve', mode], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    createInterface({ input: child.stdout }).once('line', () => resolve(child));
  });
}

function runBatch(child, calls) {
  return new Promise((resolve) => {
    child.once('message', (result) => resolve({ ...result, cps: (calls / result.ms) * 1000 }));
    child.send({ calls });
  });
}

async function drive() {
  const modes = MODES;
  const children = Object.fromEntries(await Promise.all(modes.map(async (mode) => [mode, await startChild(mode)])));
  try {
    for (const mode of modes) await runBatch(children[mode], WARMUP_CALLS);
    const samples = Object.fromEntries(modes.map((mode) => [mode, []]));
    for (let round = 0; round < ROUNDS; round++) {
      // Rotate which goes first, so drift in machine load hits every mode alike.
      const order = modes.map((_, k) => modes[(k + round) % modes.length]);
      for (const mode of order) samples[mode].push(await runBatch(children[mode], CALLS));
    }
    const med = (mode, pick) => median(samples[mode].map(pick));
    const paired = (pick, mode = 'with') => median(samples[mode].map((s, round) => pick(s) / pick(samples.without[round])));
    const names = { without: 'without', with: 'with (the whole plugin)', contract: 'contract only (no DeadlineInstrumentation)', floor: 'contract floor (stand-ins, not the package)' };
    writeResult('grpc', {
      title: 'gRPC unary calls in wall-clock time (information only)',
      command: 'npm run bench:grpc',
      tables: [
        {
          caption: `${ROUNDS} rounds of ${fmt(CALLS)} calls (${CONCURRENCY} in flight) per mode, rotating order, after ${fmt(WARMUP_CALLS)} warm-up calls; medians, and medians of per-round ratios over without`,
          columns: ['mode', 'calls/s:', 'CPU µs / call (client + server):', 'calls/s ratio:', 'CPU ratio:'],
          rows: modes.map((mode) => [
            names[mode],
            fmt(med(mode, (s) => s.cps)),
            fmt(med(mode, (s) => s.cpuUsPerCall)),
            mode === 'without' ? '' : fmt(paired((s) => s.cps, mode), 3),
            mode === 'without' ? '' : fmt(paired((s) => s.cpuUsPerCall, mode), 3),
          ]),
        },
      ],
      data: { rounds: ROUNDS, calls: CALLS, samples },
    });
  } finally {
    for (const child of Object.values(children)) child.disconnect();
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await drive();
