// Loopback HTTP for the demo services, with the deadline carried explicitly:
// propagation.inject on every call, propagation.extract on every request.
// (With the package's transport instrumentation registered, plain fetch and
// http servers would do the same without this file.)
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { ATTR_DEADLINE_OUTCOME, getDeadline, openDeadline, setDeadline } from 'otel-deadline';

const tracer = trace.getTracer('otel-deadline-demo');

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
  return tracer.startActiveSpan(`POST ${service}${path}`, { kind: SpanKind.CLIENT }, async (span) => {
    try {
      const headers = { 'content-type': 'application/json' };
      propagation.inject(context.active(), headers);
      const res = await fetch(`${peer(service)}${path}`, {
        method: 'POST',
        headers,
        body: JSON.stringify(body),
        signal: signal ?? getDeadline()?.signal,
      });
      if (!res.ok) {
        await res.arrayBuffer();
        throw statusError(res.status);
      }
      return await res.json();
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err?.name ?? 'Error' });
      throw err;
    } finally {
      span.end();
    }
  });
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
 * the request's root deadline itself (`edgeTimeoutMs`). A request whose
 * deadline has already passed is answered 504 before its route runs.
 * GET /metrics serves the Prometheus exposition and is not traced.
 */
export function serve({ routes, metrics, edgeTimeoutMs }) {
  return createServer(async (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/metrics') return metrics(req, res);
    if (req.method === 'GET' && path === '/health') return send(res, 200, { ok: true });
    const route = req.method === 'POST' ? routes[path] : undefined;
    if (route === undefined) return send(res, 404, { code: 'NOT_FOUND' });

    let incoming = propagation.extract(ROOT_CONTEXT, req.headers);
    const edge = edgeTimeoutMs === undefined ? undefined : openDeadline({ operation: path, timeoutMs: edgeTimeoutMs, parent: null });
    if (edge !== undefined) incoming = setDeadline(incoming, edge);
    const deadline = getDeadline(incoming);
    const span = tracer.startSpan(`POST ${path}`, { kind: SpanKind.SERVER }, incoming);
    try {
      if (deadline?.expired) {
        span.setAttribute(ATTR_DEADLINE_OUTCOME, 'not_started');
        return send(res, 504, { code: 'DEADLINE_EXCEEDED' }, { 'x-deadline-expired': '1' });
      }
      const body = await readJson(req);
      const result = await context.with(trace.setSpan(incoming, span), () => route(body, { traceId: span.spanContext().traceId }));
      send(res, 200, result);
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err?.name ?? 'Error' });
      if (err?.code === 'DEADLINE_EXCEEDED') send(res, 504, { code: err.code }, { 'x-deadline-expired': '1' });
      else send(res, typeof err?.status === 'number' ? err.status : 500, { code: 'ERROR' });
    } finally {
      span.end();
      // The deadline this request brought (or opened) ends with it: release its timer now.
      deadline?.dispose?.();
    }
  });
}
