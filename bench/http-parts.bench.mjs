// npm run bench:http:parts — where the deadline plugin's cost on the HTTP chain goes.
//
// bench:http compares the whole plugin with nothing. This one adds the pieces
// one at a time to the same chain (bench/http-chain.mjs) and reports the CPU
// each configuration spends per request. Every run is a fresh child process
// that drives its own chain over plain loopback sockets (16 keep-alive
// connections, one request in flight on each): no load generator competes
// for the cores and no cross-process wake-ups blur the figure, so it is
// steadier than bench:http's req/s. The driver's own CPU is the same in
// every configuration. Configurations alternate within each round; medians
// across rounds.
//
// Prints a Markdown section between <!-- bench:http:parts --> markers.
import { spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { startChain } from './http-chain.mjs';
import { CONNECTIONS, drive } from './socket-driver.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_PARTS_ROUNDS ?? 5);
const REQUESTS = Number(process.env.BENCH_PARTS_REQUESTS ?? 20_000);
const WARMUP_REQUESTS = 3_000;
const CHILD_TIMEOUT_MS = 120_000;

const CONFIGURATIONS = [
  { name: 'plain chain (no plugin)', parts: [] },
  // No OpenTelemetry at all: the same two servers and undici.request. Plain minus this is what OTel itself costs.
  { name: 'bare Node (no OTel)', parts: ['bare'] },
  { name: '+ DeadlinePropagator', parts: ['propagator'] },
  { name: '+ DeadlinePropagator + DeadlineSpanProcessor', parts: ['propagator', 'processor'] },
  { name: '+ DeadlineInstrumentation only', parts: ['instrumentation'] },
  { name: 'whole plugin', parts: ['propagator', 'processor', 'instrumentation'] },
  // Not the package: bare stand-ins for the least work the contract requires (bench/contract-floor.mjs),
  // with the histogram on hop-entry spans only (issue 16).
  { name: 'contract floor (stand-ins, not the package)', parts: ['floor', '-client-histogram'] },
];

/** Child: one configuration, one measurement, printed as a JSON line. */
async function measure(parts) {
  const port = await startChain(parts);
  await drive(port, WARMUP_REQUESTS);
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  await drive(port, REQUESTS);
  const cpu = process.cpuUsage(cpuBefore);
  const wallMs = performance.now() - started;
  process.stdout.write(`${JSON.stringify({ cpuUs: (cpu.user + cpu.system) / REQUESTS, wallUs: (wallMs * 1000) / REQUESTS })}\n`);
  process.exit(0);
}

function runChild(parts) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--measure', parts.join(',')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.stdout.on('data', (chunk) => (output += chunk));
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`configuration [${parts}] exited with ${code}`));
      resolve(JSON.parse(output.trim().split('\n').pop()));
    });
  });
}

const signed = (us) => `${us >= 0 ? '+' : '−'}${fmt(Math.abs(us), 1)}`;

async function main() {
  const samples = CONFIGURATIONS.map(() => []);
  for (let round = 0; round < ROUNDS; round++) {
    // Rotate the order, so drift in machine load does not always hit the same configuration.
    for (let k = 0; k < CONFIGURATIONS.length; k++) {
      const i = (k + round) % CONFIGURATIONS.length;
      samples[i].push(await runChild(CONFIGURATIONS[i].parts));
    }
  }
  const cpu = samples.map((runs) => median(runs.map((r) => r.cpuUs)));
  const wall = samples.map((runs) => median(runs.map((r) => r.wallUs)));
  // Against the plain chain of the same round (run within a few seconds of it): the
  // machine's slow periods, which last tens of seconds, then hit both sides alike.
  const overPlain = samples.map((runs) => median(runs.map((r, round) => r.cpuUs - samples[0][round].cpuUs)));
  const throughputVsPlain = samples.map((runs) => median(runs.map((r, round) => samples[0][round].wallUs / r.wallUs)));
  // What OTel itself adds (plain minus bare), and each configuration's added CPU as a share of it, per round.
  const otelCpu = median(samples[0].map((plain, round) => plain.cpuUs - samples[1][round].cpuUs));
  const ofOtel = samples.map((runs) => median(runs.map((r, round) => (r.cpuUs - samples[0][round].cpuUs) / (samples[0][round].cpuUs - samples[1][round].cpuUs))));
  const lines = [
    '<!-- bench:http:parts -->',
    '### HTTP chain, piece by piece (`npm run bench:http:parts`)',
    '',
    `The bench:http chain in one process per run, driven over ${CONNECTIONS} plain keep-alive sockets;`,
    `${fmt(REQUESTS)} requests per run after ${fmt(WARMUP_REQUESTS)} warm-up requests, ${ROUNDS} rounds, medians;`,
    '"over plain" and "throughput vs plain" are medians of per-round comparisons with the plain chain of the same round.',
    `CPU includes the in-process driver, the same in every row. Node ${process.version}, ${cpus().length} CPUs.`,
    'The last row is not the package: bare stand-ins (bench/contract-floor.mjs) for the least work the deadline',
    'contract adds to this chain (a context entry per hop, three headers, the histogram record on the server spans and',
    'eight attributes per span, a timer per outgoing call, a close listener per response), with no validation and no',
    'abort handling. "Share of OTel\'s own" is the added CPU over what OpenTelemetry itself adds (plain minus bare),',
    'per round, median; time-based, so on a shared machine it moves by tens of percent from run to run.',
    '',
    "| configuration | CPU µs / request | over plain | share of OTel's own added CPU | wall µs / request | throughput vs plain |",
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...CONFIGURATIONS.map((c, i) => {
      const share = i < 2 ? '' : `${fmt(100 * ofOtel[i], 0)}%`;
      return `| ${c.name} | ${fmt(cpu[i], 1)} | ${i === 0 ? '' : signed(overPlain[i])} | ${share} | ${fmt(wall[i], 1)} | ${fmt(throughputVsPlain[i], 3)} |`;
    }),
    '',
    `OpenTelemetry itself (plain minus bare, per round, median): ${fmt(otelCpu, 1)} µs of CPU per request.`,
    '<!-- /bench:http:parts -->',
  ];
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--measure') await measure(process.argv[3] ? process.argv[3].split(',') : []);
else await main();
