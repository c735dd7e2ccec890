// npm run bench:grpc — the cost of the deadline plugin on unary gRPC calls.
//
// One child process per mode, each running the workload of
// bench/grpc-workload.mjs: a grpc-js server and a client calling it over
// loopback, under the OpenTelemetry Node SDK with instrumentation-grpc on both
// sides. "without" has no deadline plugin; "contract" has the deadline
// propagator and span processor and calls under a deadline (60 s, so none is
// cut); "with" adds DeadlineInstrumentation; "floor" is not the package but
// bare stand-ins for the least work the deadline contract needs
// (bench/grpc-contract-floor.mjs). All pass the same `deadline` option (60 s)
// of their own, as gRPC callers usually do.
//
// The parent asks each child in turn for a batch of CALLS calls, CONCURRENCY
// in flight, in rotating order, and compares calls/s per round: each round
// runs "with" right next to "without", so a shared machine that slows down for
// a while slows both sides of a round alike. Bounded: ROUNDS × 4 batches.
//
// Prints a Markdown section between <!-- bench:grpc --> markers.
import { spawn } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { CONCURRENCY, MODES, startGrpc } from './grpc-workload.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_GRPC_ROUNDS ?? 10);
const CALLS = Number(process.env.BENCH_GRPC_CALLS ?? 4_000);
const WARMUP_CALLS = 4_000;

/** Child: the workload; runs a batch of calls per IPC message. */
async function serve(mode) {
  const { batch, close } = await startGrpc(mode);
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
    const throughputRatio = paired((s) => s.cps);
    const cpuRatio = paired((s) => s.cpuUsPerCall);
    const contractRatios = { cps: paired((s) => s.cps, 'contract'), cpu: paired((s) => s.cpuUsPerCall, 'contract') };
    const floorRatios = { cps: paired((s) => s.cps, 'floor'), cpu: paired((s) => s.cpuUsPerCall, 'floor') };
    const lines = [
      '<!-- bench:grpc -->',
      '## gRPC unary calls: with vs without the deadline plugin (`npm run bench:grpc`)',
      '',
      'A grpc-js client and server in one process, over loopback, under NodeSDK with instrumentation-grpc',
      `on both sides. "with" adds the deadline propagator, span processor and DeadlineInstrumentation, and calls under`,
      `an active deadline; all pass a 60 s \`deadline\` option of their own. "contract" has the propagator and processor,`,
      'calls under a deadline, but no DeadlineInstrumentation: the cost of the deadline contract on instrumentation-grpc\'s',
      `spans and metadata alone. ${ROUNDS} rounds of ${fmt(CALLS)} calls (${CONCURRENCY} in flight) per mode, in rotating order,`,
      `after ${fmt(WARMUP_CALLS)} warm-up calls each. The ratios are medians of per-round ratios (each mode over without,`,
      `run back to back). Node ${process.version}, ${cpus().length} CPUs, load average ${loadavg()[0].toFixed(1)} at the start.`,
      '',
      '| | calls/s | CPU µs / call (client + server) |',
      '| --- | ---: | ---: |',
      `| without | ${fmt(med('without', (s) => s.cps))} | ${fmt(med('without', (s) => s.cpuUsPerCall))} |`,
      `| with | ${fmt(med('with', (s) => s.cps))} | ${fmt(med('with', (s) => s.cpuUsPerCall))} |`,
      `| contract only (no DeadlineInstrumentation) | ${fmt(med('contract', (s) => s.cps))} | ${fmt(med('contract', (s) => s.cpuUsPerCall))} |`,
      `| contract floor (stand-ins, not the package) | ${fmt(med('floor', (s) => s.cps))} | ${fmt(med('floor', (s) => s.cpuUsPerCall))} |`,
      '',
      `Throughput ratio (with / without): **${fmt(throughputRatio, 3)}** (target ≥ 0.95: ${throughputRatio >= 0.95 ? 'met' : 'NOT met'}).`,
      `CPU per call, with / without: **${fmt(cpuRatio, 3)}**.`,
      `Contract only over without: throughput **${fmt(contractRatios.cps, 3)}**, CPU per call **${fmt(contractRatios.cpu, 3)}**.`,
      `Contract floor over without: throughput **${fmt(floorRatios.cps, 3)}**, CPU per call **${fmt(floorRatios.cpu, 3)}**`,
      '(bench/grpc-contract-floor.mjs: bare stand-ins for the least work the deadline contract needs, not the package).',
      `Per round, "without" alone ran at ${fmt(Math.min(...samples.without.map((s) => s.cps)))} to ${fmt(Math.max(...samples.without.map((s) => s.cps)))} calls/s:`,
      'where that spread is wide, one run\'s throughput ratio decides little, and CPU time per call (which load skews less) says more.',
      '',
      `Per round, calls/s without: ${samples.without.map((s) => fmt(s.cps)).join(', ')}; with: ${samples.with.map((s) => fmt(s.cps)).join(', ')}; contract: ${samples.contract.map((s) => fmt(s.cps)).join(', ')}; floor: ${samples.floor.map((s) => fmt(s.cps)).join(', ')}.`,
      '<!-- /bench:grpc -->',
    ];
    console.log(lines.join('\n'));
  } finally {
    for (const child of Object.values(children)) child.disconnect();
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await drive();
