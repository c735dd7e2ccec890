// What the demo prints: a live line per finished hop, then the lineage.
import { deadlineFacts } from '../../dist/cjs/src/lineage/index.js';

const HOP_KINDS = new Set(['server', 'consumer']);

/** One line for a finished hop (a server or consumer span) or a late span, else undefined. */
export function hopLine(span) {
  const facts = deadlineFacts(span);
  // Spans without a deadline (the services' warm-up calls, say) are not part of the story.
  if (!facts.present || (!HOP_KINDS.has(span.kind) && !facts.late)) return undefined;
  const spent = Math.round((span.endUs - span.startUs) / 1000);
  const bad = facts.late || (facts.outcome !== undefined && facts.outcome !== 'completed');
  const budget = `remaining ${Math.round(facts.remainingMs)} → ${Math.round(facts.remainingAtEndMs)} ms`;
  const dwell = facts.queueDwellMs === undefined ? '' : `, ${Math.round(facts.queueDwellMs)} ms queued`;
  const outcome = [facts.outcome ?? '-', facts.abortCode, facts.late ? 'LATE' : undefined].filter(Boolean).join(' ');
  return `  ${bad ? '✗' : '✓'} ${`${span.service}: ${span.name}`.padEnd(28)} ${String(spent).padStart(5)} ms  ${outcome.padEnd(28)} ${budget}${dwell}`;
}
