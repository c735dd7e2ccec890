// Loopback HTTP for the demo services. By default the deadline is carried
// explicitly: propagation.inject on every call, propagation.extract on every
// request, with our own CLIENT and SERVER spans. Under
// `node --import otel-deadline/register` (DEMO_TELEMETRY=register) the
// package's transport instrumentation does all of that for plain fetch and
// node:http, so this file only routes.
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { DeadlineAttributes, getDeadline, openDeadline, setDeadline } from 'otel-deadline';

const tracer = trace.getTracer('otel-deadline-demo');
const instrumented = process.env.DEMO_TELEMETRY === 'register';

/** Another demo service's base URL: from the launcher (IPC) or DEMO_PEER_<NAME> (docker-compose). */
const peers = new Map();
export function setPeers(map) {
  for (const [name, url] of Object.entries(map)) peers.set(name, url);
}
export function peer(name) {
  const url = peers.get(name) ?? process.env[`DEMO_PEER_${name.toUpperCase()}`];
  if (url === undefined) throw new Error(`no address for service ${name}`);
  return url;
}

/** An HTTP error that keeps its status, so the retry helper can classify it. */
export function statusError(status) {
  return Object.assign(new Error(`HTTP ${status}`), { status });
}

/**
 * POSTs JSON to another service in a CLIENT span. The active deadline goes on
 * the wire (x-deadline-remaining-ms, x-deadline-at-ms, baggage) and its signal
 * aborts the call at the cutoff.
 */
export async function call(service, path, body = {}, { signal } = {}) {
  const post = async () => {
    const headers = { 'content-type': 'application/json' };
    if (!instrumented) propagation.inject(context.active(), headers);
    const res = await fetch(`${peer(service)}${path}`, {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
      signal: signal ?? getDeadline()?.signal,
    });
    if (!res.ok) {
      await res.arrayBuffer();
      if (res.status === 504 && res.headers.get('x-deadline-expired') === '1') throw await expiredReply();
      throw statusError(res.status);
    }
    return res.json();
  };
  if (instrumented) return post();
  return tracer.startActiveSpan(`POST ${service}${path}`, { kind: SpanKind.CLIENT }, async (span) => {
    try {
      return await post();
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err?.name ?? 'Error' });
      throw err;
    } finally {
      span.end();
    }
  });
}

/**
 * The server gave up at the cutoff we share, a moment before our own timer
 * fired: report it as our own expiry (a DeadlineExceededError) once the
 * cutoff has passed here too, so both sides of the hop tell the same story.
 */
async function expiredReply() {
  const deadline = getDeadline();
  const left = deadline?.remainingMs() ?? Infinity;
  if (left <= 50) {
    await sleep(Math.ceil(left) + 1);
    if (deadline.aborted) return deadline.abortReason;
  }
  return Object.assign(statusError(504), { code: 'DEADLINE_EXCEEDED' });
}

/** Waits `ms`, or rejects with the signal's own reason (a DeadlineExceededError at the cutoff) when it aborts first. */
export async function pause(ms, signal) {
  try {
    await sleep(ms, undefined, { signal });
  } catch (err) {
    throw signal?.aborted ? signal.reason : err;
  }
}

function send(res, status, body, headers = {}) {
  if (res.writableEnded || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function readJson(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > 1_000_000) req.destroy(new Error('body too large'));
      else chunks.push(chunk);
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString() || '{}'));
      } catch (err) {
        reject(err);
      }
    });
    req.on('error', reject);
  });
}

/**
 * A JSON service. Each POST runs its route in a SERVER span, in the context
 * the request's headers describe (trace and deadline). An edge service opens
 * the request's root deadline itself (`edgeTimeoutMs`) when none arrived. A
 * request whose deadline has already passed is answered 504 before its route
 * runs. GET /metrics serves the Prometheus exposition.
 */
export function serve({ routes, metrics, edgeTimeoutMs }) {
  return createServer(async (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/metrics') return metrics(req, res);
    if (req.method === 'GET' && path === '/health') return send(res, 200, { ok: true });
    const route = req.method === 'POST' ? routes[path] : undefined;
    if (route === undefined) return send(res, 404, { code: 'NOT_FOUND' });

    // Instrumented, the http server span and the request's deadline are already active.
    let incoming = instrumented ? context.active() : propagation.extract(ROOT_CONTEXT, req.headers);
    let opened;
    if (edgeTimeoutMs !== undefined && getDeadline(incoming) === undefined) {
      opened = openDeadline({ operation: path, timeoutMs: edgeTimeoutMs, parent: null });
      incoming = setDeadline(incoming, opened);
    }
    const deadline = getDeadline(incoming);
    const own = instrumented ? undefined : tracer.startSpan(`POST ${path}`, { kind: SpanKind.SERVER }, incoming);
    const active = own === undefined ? incoming : trace.setSpan(incoming, own);
    const hop = trace.getSpan(active);
    // Lets the caller find the request's trace even when the answer is an error.
    if (hop !== undefined) res.setHeader('x-trace-id', hop.spanContext().traceId);
    try {
      if (deadline?.expired) {
        own?.setAttribute(DeadlineAttributes.OUTCOME, 'not_started');
        return send(res, 504, { code: 'DEADLINE_EXCEEDED' }, { 'x-deadline-expired': '1' });
      }
      const body = await readJson(req);
      const result = await context.with(active, () => route(body, { traceId: hop?.spanContext().traceId }));
      send(res, 200, result);
    } catch (err) {
      hop?.setStatus({ code: SpanStatusCode.ERROR, message: err?.name ?? 'Error' });
      if (err?.code === 'DEADLINE_EXCEEDED') send(res, 504, { code: err.code }, { 'x-deadline-expired': '1' });
      else send(res, typeof err?.status === 'number' ? err.status : 500, { code: 'ERROR' });
    } finally {
      own?.end();
      // A deadline this code made ends with the request: release its timer now.
      if (!instrumented) deadline?.dispose?.();
      else opened?.dispose();
    }
  });
}
