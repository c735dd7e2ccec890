// The pass/fail rules for a runChain() result, shared by bench/load.bench.mjs
// (which prints them) and chain.test.ts (which asserts each one).

/** Heap growth allowed per process over the second half of the run, whatever the request count. */
export const HEAP_SLACK_BYTES = 4 * 2 ** 20;

/** @returns {{ name: string, pass: boolean, detail: string }[]} */
export function verdicts(result) {
  const { checks } = result;
  const hopSpans = Object.entries(checks.spans.hops);
  const leaks = Object.entries(checks.leaks);
  return [
    {
      name: 'every request was sent before the hard stop',
      pass: result.reachedTarget,
      detail: `${result.sent} of ${result.config.requests} within ${result.config.maxSeconds} s`,
    },
    {
      name: 'no request was sent to the last hop after its cutoff',
      pass: checks.lateSendsIntoLastHop === 0 && checks.sendsIntoLastHop > 0,
      detail:
        `${checks.lateSendsIntoLastHop} of ${checks.sendsIntoLastHop} requests left B for C after their cutoff; ` +
        `C's event loop saw ${checks.lateAtLastHop} after their cutoff (latest by ${checks.latestAtLastHopMs} ms, ` +
        `its loop delay reaching ${checks.lastHopLoopDelayMaxMs.toFixed(0)} ms)`,
    },
    {
      name: 'later_than_parent stays at 0',
      pass: checks.laterThanParentMetric === 0 && checks.laterThanParentSpans === 0,
      detail: `deadline.violations metric ${checks.laterThanParentMetric}, spans flagged ${checks.laterThanParentSpans}`,
    },
    {
      name: 'no hop ran under a later cutoff than its caller sent',
      pass: checks.grewAlongChain === 0,
      detail: `${checks.grewAlongChain} handlers`,
    },
    {
      name: 'every request, aborted or not, has its spans',
      pass:
        checks.spans.rootSpans === result.total &&
        // fetch may retry on a fresh connection when a kept-alive one closes under it: one more span, never fewer.
        checks.spans.driverClientSpans >= checks.spans.fetchCalls &&
        checks.spans.rootSpansAborted >= checks.spans.aborted &&
        hopSpans.every(([, h]) => h.serverSpans === h.arrivals && h.clientSpans === h.forwarded),
      detail:
        `root spans ${checks.spans.rootSpans}/${result.total}, driver client spans ${checks.spans.driverClientSpans}/${checks.spans.fetchCalls}, ` +
        `aborted root spans ${checks.spans.rootSpansAborted} ≥ ${checks.spans.aborted} aborted, ` +
        hopSpans.map(([name, h]) => `${name} server ${h.serverSpans}/${h.arrivals} client ${h.clientSpans}/${h.forwarded}`).join(', '),
    },
    {
      name: 'handles and timers back to baseline in every process',
      pass: leaks.every(([, l]) => l.resourcesBack && l.timersAfter <= l.timersBefore),
      detail: leaks.map(([name, l]) => `${name} ${l.resourcesBack ? 'same handles' : 'handles differ'}, timers ${l.timersBefore}→${l.timersAfter}`).join('; '),
    },
    {
      name: `no heap growth over the second half of the run (within ${HEAP_SLACK_BYTES / 2 ** 20} MiB) in any process`,
      pass: leaks.every(([, l]) => l.heapAfterBytes - l.heapMiddleBytes <= HEAP_SLACK_BYTES),
      detail: leaks.map(([name, l]) => `${name} ${((l.heapAfterBytes - l.heapMiddleBytes) / 2 ** 20).toFixed(2)} MiB`).join(', '),
    },
    {
      name: 'every hop exited on its own',
      pass: checks.exitedOnTheirOwn,
      detail: checks.exitedOnTheirOwn ? 'yes' : 'a hop had to be killed',
    },
  ];
}
