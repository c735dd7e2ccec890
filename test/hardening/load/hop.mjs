// One hop of the load chain, run as a child process (node --expose-gc) by
// chain.mjs: a node:http server with the full telemetry setup that, per the
// request's query, holds for a while and then calls the next hop with undici
// or node:http. Every hop is its own process with its own SDK, as services
// are; they share the machine's clock, so a hop can compare the moment a
// request reaches it with the cutoff the request carried.
//
// The parent drives it over IPC: start → ready, settle → settled (snapshot),
// report → report, exit. Query: `?a=20&b=r-7&c=5000` holds 20 ms at A, until
// 7 ms before its cutoff at B, and 5 s at C (cut short by the deadline).
import diagnosticsChannel from 'node:diagnostics_channel';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as hold } from 'node:timers/promises';
import { getDeadline, isDeadlineError, withDeadline } from '../../../dist/esm/index.mjs';
import { activeResources, sameCounts, settleResources, snapshot, trackTimers } from './resources.mjs';
import { startTelemetry } from './telemetry.mjs';
import { resetSends, sends, watchSends } from './wire-probe.mjs';

trackTimers();
watchSends();
const { counter, http, undici, violationsMetric, shutdown } = startTelemetry();

const state = {
  arrivals: 0,
  /** Arrived after the cutoff they carried (x-deadline-at-ms), by this machine's clock. */
  late: 0,
  latestMs: 0,
  /** Handlers that ran under a deadline later than the one the sender wrote. */
  grew: 0,
  inFlight: 0,
  forwarded: 0,
  results: {},
};
const tally = (key) => (state.results[key] = (state.results[key] ?? 0) + 1);
/** How late this hop's event loop runs: a request it sees late may have waited for the loop, not the network. */
const loopDelay = monitorEventLoopDelay({ resolution: 1 });
loopDelay.enable();

function holdMs(spec, deadline) {
  if (!spec) return 0;
  if (spec[0] !== 'r') return Number(spec);
  return Math.max(0, (deadline?.remainingMs() ?? 0) + Number(spec.slice(1)));
}

/** The next hop's reply through `transport`, under a local deadline that asks for more than the request has. */
function forward(transport, url) {
  return withDeadline({ operation: 'hop.forward', timeoutMs: 60_000 }, async () => {
    // Counted here: withDeadline refuses to run this at all once the request's cutoff has passed.
    state.forwarded++;
    if (transport === 'undici') {
      const { statusCode, body } = await undici.request(url);
      return { status: statusCode, text: await body.text() };
    }
    return new Promise((resolve, reject) => {
      http
        .get(url, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk) => (text += chunk));
          res.once('end', () => resolve({ status: res.statusCode, text }));
          res.once('error', reject);
        })
        .once('error', reject);
    });
  });
}

function handler(config) {
  return async (req, res) => {
    state.inFlight++;
    const deadline = getDeadline();
    const sentAtMs = Number(req.headers['x-deadline-at-ms']);
    if (deadline !== undefined && Math.floor(deadline.expiresAtMs) > sentAtMs) state.grew++;
    const query = new URL(req.url, 'http://hop').searchParams;
    try {
      const ms = holdMs(query.get(config.name.toLowerCase()), deadline);
      if (ms > 0) await hold(ms, undefined, { signal: deadline?.signal });
      const reply = config.next === undefined ? { status: 200, text: 'ok' } : await forward(config.transport, `${config.next}${req.url}`);
      res.statusCode = reply.status;
      res.end(reply.text);
      tally(`status ${reply.status}`);
    } catch (err) {
      // An abortable wait rejects with an AbortError whose cause is the deadline's reason.
      const reason = err?.name === 'AbortError' && err.cause !== undefined ? err.cause : err;
      tally(isDeadlineError(reason) ? reason.code : (reason?.code ?? reason?.name ?? 'unknown'));
      if (!res.headersSent && !res.destroyed) {
        res.statusCode = isDeadlineError(reason) ? 504 : 502;
        res.end();
      }
    } finally {
      state.inFlight--;
    }
  };
}

let server;
let startup;

async function start(config) {
  server = http.createServer(handler(config));
  // Counted before any listener runs, so early-rejected requests count too.
  diagnosticsChannel.subscribe('http.server.request.start', ({ request, server: from }) => {
    if (from !== server) return;
    state.arrivals++;
    const lateByMs = Date.now() - Number(request.headers['x-deadline-at-ms']);
    if (lateByMs > 0) {
      state.late++;
      state.latestMs = Math.max(state.latestMs, lateByMs);
    }
  });
  // Node's default accept backlog (511) overflows under 2,000 simultaneous connects: the kernel drops
  // the handshakes and the clients retry seconds later, long after the requests' cutoffs.
  await new Promise((resolve) => server.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, resolve));
  startup = activeResources();
  return { type: 'ready', url: `http://127.0.0.1:${server.address().port}` };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits for in-flight work and its spans, closes the server's connections and
 * reads what the process holds. The driver has stopped sending by then, so no
 * connection carries a request; closing them all (not only the ones Node
 * counts as idle: a connection whose only request was aborted before it was
 * written counts as active) lets every client pool in the chain drop its sockets.
 */
async function settle() {
  const until = performance.now() + 15_000;
  while ((state.inFlight > 0 || counter.count('server') < state.arrivals) && performance.now() < until) await sleep(20);
  await settleResources(startup, () => server.closeAllConnections());
  // Judged on the snapshot's own reading, taken after it lets short timers fire: a socket that
  // appears or is still closing in that time must send the chain round again, not slip past it.
  const shot = await snapshot();
  const held = await new Promise((resolve) => server.getConnections((_err, count) => resolve(count ?? -1)));
  const sockets = (pool) => Object.values(pool).reduce((sum, list) => sum + list.length, 0);
  // Where a socket left open is, should the leak check fail: accepted by this hop's server, or this hop's client pool.
  const openSockets = { server: held, clientBusy: sockets(http.globalAgent.sockets), clientFree: sockets(http.globalAgent.freeSockets) };
  return { type: 'settled', atBaseline: sameCounts(shot.resources, startup), snapshot: { ...shot, openSockets }, lateness: lateness() };
}

/** Late arrivals and late sends so far; zeroed after warm-up, so that the figures cover the measured run. */
function lateness() {
  return { arrivals: state.arrivals, late: state.late, latestMs: state.latestMs, sends: { ...sends } };
}

function resetLateness() {
  loopDelay.reset();
  state.late = 0;
  state.latestMs = 0;
  resetSends();
}

async function report() {
  return {
    type: 'report',
    arrivals: state.arrivals,
    late: state.late,
    latestMs: state.latestMs,
    sends: { ...sends },
    loopDelayMaxMs: loopDelay.max / 1e6,
    loopDelayP99Ms: loopDelay.percentile(99) / 1e6,
    grew: state.grew,
    forwarded: state.forwarded,
    inFlight: state.inFlight,
    results: state.results,
    spans: Object.fromEntries(counter.spans),
    spanViolations: Object.fromEntries(counter.violations),
    violationsMetric: await violationsMetric(),
    serverSpans: counter.count('server'),
    clientSpans: counter.count('client'),
  };
}

let stopping = false;
// The driver died (a hard stop, Ctrl-C): do not outlive it.
process.on('disconnect', () => stopping || process.exit(1));

process.on('message', async (message) => {
  if (message.cmd === 'start') process.send(await start(message));
  else if (message.cmd === 'settle') process.send(await settle());
  else if (message.cmd === 'reset') {
    resetLateness();
    process.send({ type: 'reset' });
  }
  else if (message.cmd === 'report') process.send(await report());
  else if (message.cmd === 'exit') {
    // Nothing is killed: the process must end on its own once the server and the IPC channel close.
    stopping = true;
    server.closeAllConnections();
    server.close();
    await shutdown();
    process.disconnect();
  }
});
