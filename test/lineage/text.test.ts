import { describe, expect, it } from 'vitest';
import { buildTree } from '../../src/lineage/tree';
import { renderText } from '../../src/lineage/text';
import type { LineageSpan } from '../../src/lineage/model';

function span(spanId: string, parentSpanId: string | undefined, service: string, name: string): LineageSpan {
  return {
    traceId: 'a'.repeat(32),
    spanId,
    parentSpanId,
    service,
    name,
    kind: 'internal',
    startUs: 1_700_000_000_000_000,
    endUs: 1_700_000_000_050_000,
    attributes: { 'deadline.at_ms': 1_700_000_001_000, 'deadline.remaining_ms': 1_000, 'deadline.outcome': 'completed' },
  };
}

describe('text tree labels', () => {
  it('shortens a long service name before the operation name', () => {
    // The default service name of an SDK without OTEL_SERVICE_NAME embeds the node binary path.
    const longService = `unknown_service:${'/very/long/cache/dir'.repeat(4)}/bin/node`;
    const tree = buildTree({
      traceId: 'a'.repeat(32),
      spans: [span('1'.repeat(16), undefined, longService, 'agent.run'), span('2'.repeat(16), '1'.repeat(16), longService, 'inventory.lookup')],
    });
    const text = renderText(tree);
    expect(text).toContain('agent.run');
    expect(text).toContain('inventory.lookup');
    expect(text).not.toContain(longService);
  });
});
