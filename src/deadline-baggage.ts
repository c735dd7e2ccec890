import { propagation, type Baggage, type BaggageEntry } from '@opentelemetry/api';
import { BAGGAGE_DEADLINE_KEY } from './attributes';
import { dispatchingCall } from './dispatching-call';

/**
 * Baggage whose only entry is `deadline.at_ms`: what setDeadline puts in a
 * context that had no baggage, which is most of them. It implements the
 * API's Baggage interface with one string instead of the API's Map-backed
 * implementation, which costs a few microseconds per hop to build, copy and
 * list. Any other change hands over to the API's implementation.
 *
 * The cutoff may be given as a number (whole ms) and is turned into text
 * only when the entry is read: a 13-digit number costs V8 about a thousand
 * instructions to print, and on the usual path nobody reads this entry (the
 * deadline headers are written from the deadline itself, and a guarded
 * call's transport runs without this baggage).
 */
export class DeadlineOnlyBaggage implements Baggage {
  private text: string | undefined;
  private readonly cutoffMs: number;

  constructor(atMs: string | number) {
    this.text = typeof atMs === 'string' ? atMs : undefined;
    this.cutoffMs = typeof atMs === 'number' ? atMs : Number.NaN;
  }

  /** The entry's value, `deadline.at_ms=<this>`. */
  get atMs(): string {
    return (this.text ??= String(this.cutoffMs));
  }

  getEntry(key: string): BaggageEntry | undefined {
    return key === BAGGAGE_DEADLINE_KEY ? { value: this.atMs } : undefined;
  }

  /**
   * Nothing while a guarded call dispatches inline (runInCallTransport): the
   * call's own headers carry the deadline, and a W3C baggage propagator inside
   * the transport would only print the cutoff for us to drop the repeat, as
   * a transport context without this baggage (OutgoingCallBaggage) makes it
   * see nothing either. getEntry still answers: only propagators list entries.
   */
  getAllEntries(): [string, BaggageEntry][] {
    if (dispatchingCall() !== undefined) return [];
    return [[BAGGAGE_DEADLINE_KEY, { value: this.atMs }]];
  }

  setEntry(key: string, entry: BaggageEntry): Baggage {
    if (key === BAGGAGE_DEADLINE_KEY && entry.metadata === undefined) return new DeadlineOnlyBaggage(entry.value);
    return propagation.createBaggage({ [BAGGAGE_DEADLINE_KEY]: { value: this.atMs } }).setEntry(key, entry);
  }

  removeEntry(key: string): Baggage {
    return key === BAGGAGE_DEADLINE_KEY ? propagation.createBaggage() : this;
  }

  removeEntries(...keys: string[]): Baggage {
    return keys.includes(BAGGAGE_DEADLINE_KEY) ? propagation.createBaggage() : this;
  }

  clear(): Baggage {
    return propagation.createBaggage();
  }
}
