// npm run bench:clock — how often each configuration reads the clock, and
// what one read costs on this machine.
//
// Deadlines are all about time, so the package reads the monotonic clock
// (performance.now()) wherever it must know the time left. On most machines
// a read is a few tens of nanoseconds. On some virtual machines the clock
// source cannot be read from user space (kvm-clock without a stable TSC, for
// one), every read is a system call, and a read costs about as much as the
// rest of a small check. So reads are counted, not timed: the count does not
// depend on the machine, and the cost per read printed beside it says what
// the count is worth here.
//
// One child process per configuration counts the calls to performance.now()
// and Date.now() over a fixed number of requests (the bench:http chain) or
// operations (the bench:db workloads against the local PostgreSQL and
// Redis), after a warm-up, and prints the reads per request or operation.
// The chain's driver and the workloads' own timing reads are in every
// configuration alike; what a configuration adds is its count less the
// baseline's.
//
// Prints a Markdown section between <!-- bench:clock --> markers.
// BENCH_CLOCK_SKIP_DB=1 leaves out the database workloads (no servers needed).
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const HTTP_REQUESTS = 2_000;
const DB_OPERATIONS = 4_000;
const HTTP_CONFIGURATIONS = [
  { name: 'plain chain (OTel SDK + http + undici instrumentations)', parts: [] },
  { name: 'whole plugin', parts: ['propagator', 'processor', 'instrumentation'] },
];
const DB_WORKLOADS = ['redis-throughput', 'pg-latency'];
const DB_MODES = ['none', 'guard-off', 'guard-on', 'idle'];

/** Child: installs the counters, runs the warm-up and the counted stretch, prints {perf, date} per unit. */
async function count(kind, what, mode) {
  let counting = false;
  let perf = 0;
  let date = 0;
  const realPerformanceNow = performance.now.bind(performance);
  const realDateNow = Date.now;
  performance.now = () => (counting && perf++, realPerformanceNow());
  Date.now = () => (counting && date++, realDateNow());
  let units;
  if (kind === 'http') {
    const { startChain } = await import('./http-chain.mjs');
    const { drive } = await import('./socket-driver.mjs');
    const port = await startChain(what.split(',').filter(Boolean));
    await drive(port, HTTP_REQUESTS, 600_000);
    counting = true;
    await drive(port, HTTP_REQUESTS, 600_000);
    units = HTTP_REQUESTS;
  } else {
    const { startWorkload } = await import('./db-workload.mjs');
    const workload = await startWorkload(mode);
    await workload.run(what, { count: DB_OPERATIONS });
    counting = true;
    await workload.run(what, { count: DB_OPERATIONS });
    counting = false;
    await workload.close();
    units = DB_OPERATIONS;
  }
  counting = false;
  process.stdout.write(JSON.stringify({ perf: perf / units, date: date / units }));
  process.exit(0);
}

function inChild(args) {
  const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), '--count', ...args], { encoding: 'utf8', timeout: 300_000 });
  return JSON.parse(out);
}

/** Median ns per call of `read`, 7 rounds of 200,000 calls. */
function nsPerRead(read) {
  const rounds = [];
  let sink = 0;
  for (let round = 0; round < 7; round++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < 200_000; i++) sink += read();
    rounds.push(Number(process.hrtime.bigint() - start) / 200_000);
  }
  globalThis.clockSink = sink;
  return rounds.sort((a, b) => a - b)[3];
}

const fmt = (n) => n.toFixed(2);

async function main() {
  const perfNs = nsPerRead(() => performance.now());
  const dateNs = nsPerRead(() => Date.now());
  const lines = [
    '<!-- bench:clock -->',
    '### Clock reads (`npm run bench:clock`)',
    '',
    `Calls to performance.now() and Date.now() per request of the bench:http chain (${HTTP_REQUESTS.toLocaleString('en-US')} requests after as many`,
    `warm-up requests) and per operation of the bench:db workloads (${DB_OPERATIONS.toLocaleString('en-US')} after as many), one process each; the`,
    "driver's and the workloads' own timing reads are in every row alike. On this machine one read costs",
    `**${Math.round(perfNs)} ns** (performance.now()) and **${Math.round(dateNs)} ns** (Date.now()), medians of 7 rounds of 200,000; Node ${process.version}.`,
    '',
    '| workload | configuration | performance.now() | Date.now() | added reads | added time at this machine\'s cost |',
    '| --- | --- | ---: | ---: | ---: | ---: |',
  ];
  const row = (workload, name, counts, base) => {
    const added = base === undefined ? undefined : counts.perf - base.perf + (counts.date - base.date);
    const addedNs = base === undefined ? undefined : (counts.perf - base.perf) * perfNs + (counts.date - base.date) * dateNs;
    lines.push(`| ${workload} | ${name} | ${fmt(counts.perf)} | ${fmt(counts.date)} | ${added === undefined ? '' : fmt(added)} | ${addedNs === undefined ? '' : `${(addedNs / 1000).toFixed(2)} µs`} |`);
  };
  const httpCounts = HTTP_CONFIGURATIONS.map((c) => inChild(['http', c.parts.join(',')]));
  HTTP_CONFIGURATIONS.forEach((c, i) => row('http chain', c.name, httpCounts[i], i === 0 ? undefined : httpCounts[0]));
  if (process.env.BENCH_CLOCK_SKIP_DB !== '1') {
    for (const workload of DB_WORKLOADS) {
      const counts = Object.fromEntries(DB_MODES.map((mode) => [mode, inChild(['db', workload, mode])]));
      const baseline = { 'guard-off': counts.none, 'guard-on': counts['guard-off'], idle: counts.none };
      for (const mode of DB_MODES) row(workload, mode, counts[mode], baseline[mode]);
    }
  }
  lines.push('', '"Added" is over the row above it in the bench:db sense: guard-off and idle over none, guard-on over guard-off;', 'for the chain, the whole plugin over the plain chain.', '<!-- /bench:clock -->');
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--count') await count(process.argv[3], process.argv[4], process.argv[5]);
else await main();
