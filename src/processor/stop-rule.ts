/**
 * When a span is late: the rule the span processor applies at a span's end,
 * pure arithmetic on the monotonic clock (docs/lineage.md states it for
 * readers of a trace).
 *
 * A span should stop at its cutoff, or when its deadline's abort reached it
 * if that came later (a timer runs late on a busy event loop; nothing could
 * react before it ran). Its stop lag is the time from that point to its end.
 * Whatever it waited on after that point is judged on its own: the end of its
 * last child moves its own stop point, so a parent that waits for a child's
 * cancel round trip, or for a child that ignored the abort, is not blamed for
 * the child's time. A span the package cut itself (a guard wrote the abort on
 * it: a cancelled query, a destroyed socket, a server span closed by the
 * caller's disconnect) ended when its stop path let it, which the stop-lag
 * histogram measures instead. Everything else gets the stop allowance
 * (`lateGraceMs`) after its stop point and is late beyond it.
 *
 * `ended_after_parent` is the same rule with the parent's end as the point to
 * stop at, when the span's deadline had aborted (by the clock or a
 * cancellation) by the time its parent ended: the parent was ended by that
 * abort and the child was on its way out too. Otherwise no stop was under way
 * and there is no stop path to allow for: a child still running when its
 * parent ended normally is undeclared fire-and-forget work, flagged however
 * soon it ended after.
 */
export interface StopTimes {
  /** The span's start and end, on the monotonic clock. */
  startMono: number;
  endMono: number;
  cutoffMono: number;
  /** When the deadline's abort was recorded (see DeadlineNode#peekAbortRecordedAtMono); undefined if never. */
  abortMono: number | undefined;
  /** The end of its last child that ended, if any did. */
  lastChildEndMono: number | undefined;
  /** The end of its in-process parent, if that has ended. */
  parentEndMono: number | undefined;
  /** A guard of this package cut the span's work and wrote the abort on it before it ended. */
  cutByPackage: boolean;
}

export interface StopJudgement {
  /** Ms from the later of the cutoff and the abort reaching the span to its end; undefined when it ended before its cutoff. */
  stopLagMs: number | undefined;
  endedAfterDeadline: boolean;
  endedAfterParent: boolean;
}

/** When the abort reached the span: never before it started. */
function abortReached(times: StopTimes): number | undefined {
  const { abortMono, startMono } = times;
  if (abortMono === undefined) return undefined;
  return abortMono > startMono ? abortMono : startMono;
}

function later(a: number, b: number | undefined): number {
  return b !== undefined && b > a ? b : a;
}

/** The judgement for a span that ran (a refused span never ran and is never late). */
export function judgeStop(times: StopTimes, graceMs: number): StopJudgement {
  const { endMono, cutoffMono, lastChildEndMono, parentEndMono, cutByPackage } = times;
  const reached = abortReached(times);
  const stopFrom = later(cutoffMono, reached);
  const stopLagMs = endMono >= cutoffMono ? Math.max(0, endMono - stopFrom) : undefined;
  const endedAfterDeadline = !cutByPackage && endMono - later(stopFrom, lastChildEndMono) > graceMs;

  let endedAfterParent = false;
  if (parentEndMono !== undefined && endMono > parentEndMono) {
    // When the span's deadline aborted: recorded, or else at its cutoff.
    const abortedAt = reached ?? cutoffMono;
    const stopping = abortedAt <= parentEndMono;
    if (!stopping) endedAfterParent = true;
    else endedAfterParent = !cutByPackage && endMono - later(parentEndMono, lastChildEndMono) > graceMs;
  }
  return { stopLagMs, endedAfterDeadline, endedAfterParent };
}
