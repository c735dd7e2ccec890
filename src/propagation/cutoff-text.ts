import { BAGGAGE_DEADLINE_KEY } from '../attributes';
import type { Deadline } from '../deadline';

/** The wire text of one cutoff: `x-deadline-at-ms` and the baggage member `deadline.at_ms=<ms>`. */
export interface CutoffStrings {
  readonly atMs: string;
  readonly baggage: string;
}

/**
 * The wire text of the last cutoff injected, kept for the next inject of the
 * same cutoff: the calls a request makes all carry its one cutoff, so after
 * the first they reuse its two strings instead of converting a 13-digit
 * number and concatenating again. The baggage text is built by `join`, which
 * makes a flat string; a template literal of this length makes a rope, and
 * grpc-js's metadata check (a regular expression per value) then takes V8's
 * slow path to flatten it, on every call.
 */
export class CutoffText {
  private flooredMs = Number.NaN;
  private strings: CutoffStrings = { atMs: '', baggage: '' };

  of(expiresAtMs: number): CutoffStrings {
    const floored = Math.floor(expiresAtMs);
    if (floored !== this.flooredMs) {
      const atMs = String(floored);
      this.strings = { atMs, baggage: [BAGGAGE_DEADLINE_KEY, atMs].join('=') };
      this.flooredMs = floored;
    }
    return this.strings;
  }
}

/** The `x-deadline-remaining-ms` value for `deadline`: whole ms left now. */
export function remainingText(deadline: Deadline): string {
  return String(Math.floor(deadline.remainingMs()));
}
