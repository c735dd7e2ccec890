import { context, propagation } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { openDeadline, setDeadline } from '../../src';
import { withDeadlineOffWire } from '../../instrumentation/call/wire-context';
import { callKind, KINDS, type EchoSuite } from './helpers';

/**
 * `propagateTo` on gRPC (issue 12 §6: every transport): a target off the
 * list gets none of our metadata and no `deadline.at_ms` baggage entry; the
 * user's baggage and the call's own (clamped) grpc-timeout go as usual.
 */
export function grpcPropagateToSuite(suite: EchoSuite): void {
  const port = () => Number(suite.server.address.split(':').at(-1));

  /** `offWireBefore`: the call is made where an earlier call to an unlisted host left its mark (a node:http response callback runs there). */
  async function callUnderDeadline(kind: (typeof KINDS)[number], offWireBefore = false) {
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000, parent: null });
    const bag = propagation.createBaggage({ 'user.tier': { value: 'gold' } });
    const scoped = setDeadline(propagation.setBaggage(context.active(), bag), deadline);
    try {
      return { deadline, ...(await context.with(offWireBefore ? withDeadlineOffWire(scoped) : scoped, () => callKind(suite.client, kind, 'echo', { deadline: Date.now() + 60_000 }))) };
    } finally {
      deadline.dispose();
    }
  }

  describe.each(KINDS)('propagateTo, %s call', (kind) => {
    it('sends our metadata to a listed target', async () => {
      suite.instrumentation.setConfig({ propagateTo: [`127.0.0.1:${port()}`] });
      const { error, reply, deadline } = await callUnderDeadline(kind);
      expect(error).toBeNull();
      expect(reply!.atMsHeader).toBe(String(Math.floor(deadline.expiresAtMs)));
      expect(reply!.baggageHeader).toContain('deadline.at_ms=');
    });

    it('sends it to a listed target from where a call to an unlisted host left its mark', async () => {
      suite.instrumentation.setConfig({ propagateTo: [`127.0.0.1:${port()}`] });
      const { error, reply, deadline } = await callUnderDeadline(kind, true);
      expect(error).toBeNull();
      expect(reply!.atMsHeader).toBe(String(Math.floor(deadline.expiresAtMs)));
      expect(reply!.baggageHeader).toContain('deadline.at_ms=');
      expect(reply!.baggageHeader).toContain('user.tier=gold');
    });

    it('withholds it from any other, keeping the user baggage and the clamped grpc-timeout', async () => {
      suite.instrumentation.setConfig({ propagateTo: [`127.0.0.1:${port() === 65_535 ? 1 : port() + 1}`] });
      const { error, reply, deadline } = await callUnderDeadline(kind);
      expect(error).toBeNull();
      expect(reply!.atMsHeader).toBeNull();
      expect(reply!.remainingHeader).toBeNull();
      expect(reply!.baggageHeader).toBe('user.tier=gold');
      // gRPC's own deadline is still the cutoff, not the call's 60 s (1 s bounds the transit on a loaded machine).
      expect(reply!.grpcDeadline!).toBeLessThan(deadline.expiresAtMs + 1_000);
    });
  });
}
