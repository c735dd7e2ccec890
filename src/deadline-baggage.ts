import { propagation, type Baggage, type BaggageEntry } from '@opentelemetry/api';
import { BAGGAGE_DEADLINE_KEY } from './attributes';

/**
 * Baggage whose only entry is `deadline.at_ms`: what setDeadline puts in a
 * context that had no baggage, which is most of them. It implements the
 * API's Baggage interface with one string instead of the API's Map-backed
 * implementation, which costs a few microseconds per hop to build, copy and
 * list. Any other change hands over to the API's implementation.
 */
export class DeadlineOnlyBaggage implements Baggage {
  constructor(private readonly atMs: string) {}

  getEntry(key: string): BaggageEntry | undefined {
    return key === BAGGAGE_DEADLINE_KEY ? { value: this.atMs } : undefined;
  }

  getAllEntries(): [string, BaggageEntry][] {
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
