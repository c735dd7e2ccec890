/**
 * When a span is late (docs/lineage.md, "What late means"): `lateGraceMs` after the later of its
 * cutoff, the abort reaching it and its last child's end, unless the package cut it itself. Against
 * the parent's end likewise if the deadline had aborted by then; otherwise outliving the parent is
 * fire-and-forget work, unless it was running when the parent ended and ended in that same
 * event-loop turn (event-loop-turn.ts).
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
  /** The span ended in the event-loop turn its parent ended in. */
  endedInParentsTurn?: boolean;
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
    // Running when its parent ended, and ended on that same event: not work left behind.
    if (!stopping) endedAfterParent = !(times.endedInParentsTurn === true && times.startMono <= parentEndMono);
    else endedAfterParent = !cutByPackage && endMono - later(parentEndMono, lastChildEndMono) > graceMs;
  }
  return { stopLagMs, endedAfterDeadline, endedAfterParent };
}
