import { cutoffOffsetMs, isLate, lateReasons, summarize, type LineageNode, type LineageTree } from './tree';

const MAX_LABEL = 64;

/** Trace data is untrusted: keep terminal control sequences out of the output. */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

export function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, Math.max(1, max - 1))}…`;
}

function ms(value: number | undefined): string {
  return value === undefined ? '-' : String(Math.round(value));
}

function signedMs(value: number | undefined): string {
  if (value === undefined) return '-';
  const rounded = Math.round(value);
  return `${rounded >= 0 ? '+' : ''}${rounded} ms`;
}

function treePrefix(node: LineageNode): string {
  if (node.depth === 0) return '';
  const rails = node.ancestorsLast.map((last) => (last ? '   ' : '│  ')).join('');
  return `${rails}${node.last ? '└─ ' : '├─ '}`;
}

/** Longest service name shown; the operation is what a reader scans for, so it is shortened last. */
const MAX_SERVICE = 24;

export function spanLabel(node: LineageNode): string {
  return printable(`${clip(node.span.service, MAX_SERVICE)}: ${node.span.name}`);
}

function outcomeText(node: LineageNode): string {
  const { facts } = node;
  const parts = facts.present ? [facts.outcome ?? '-'] : ['(no deadline)'];
  if (facts.present && facts.abortCode !== undefined) parts.push(printable(facts.abortCode));
  if (facts.present && facts.stopLagMs !== undefined) parts.push(`stop lag ${ms(facts.stopLagMs)} ms`);
  if (isLate(node)) parts.push(`✗ LATE ${printable(lateReasons(node).join(','))}`);
  return parts.join('  ');
}

const HEADER = ['SPAN (service: operation)', 'CUTOFF', 'REMAINING start → end', 'SPENT', 'OUTCOME'];

/** The span tree, one line per span, followed by the summary. */
export function renderText(tree: LineageTree): string {
  const rows = tree.ordered.map((node) => {
    const { facts, span } = node;
    return [
      clip(treePrefix(node) + spanLabel(node), MAX_LABEL),
      signedMs(cutoffOffsetMs(tree, node)),
      facts.present ? `${ms(facts.remainingMs)} → ${ms(facts.remainingAtEndMs)} ms` : '-',
      `${ms((span.endUs - span.startUs) / 1000)} ms`,
      outcomeText(node),
    ];
  });
  // Widths in code points: the tree's rails and arrows are one column each.
  const widths = HEADER.map((_, col) => Math.max(...[HEADER, ...rows].map((row) => [...row[col]].length)));
  const fill = (text: string, col: number) => ' '.repeat(Math.max(0, widths[col] - [...text].length));
  // The label is padded on the right, the numbers on the left; the outcome is last and not padded.
  const line = (row: string[]) =>
    row
      .map((cell, col) => (col === 0 ? cell + fill(cell, col) : col === row.length - 1 ? cell : fill(cell, col) + cell))
      .join('  ')
      .trimEnd();

  const root = tree.roots[0];
  const budget = root?.facts.budgetMs === undefined ? '' : `, root budget ${ms(root.facts.budgetMs)} ms`;
  const title = `trace ${printable(tree.traceId)} (${rows.length} span${rows.length === 1 ? '' : 's'}${budget})`;
  return [title, line(HEADER), ...rows.map(line), '', renderSummary(tree)].join('\n');
}

/** What each number of the summary counts; docs/lineage.md says the same. */
export const SUMMARY_LEGEND =
  'late children = flagged deadline.late by their own span processor; exceeded = still running at their cutoff; ' +
  'aborted = cut or cancelled while running; refused = never started for lack of budget';
const REMOTE_LEGEND = 'late across processes = went on after their remote caller ended, or started after its cutoff, by more than --grace';

export function renderSummary(tree: LineageTree): string {
  const summary = summarize(tree);
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const lines = [
    `summary: ${plural(summary.late.length, 'late child')}`.replace('childs', 'children') +
      `, ${summary.exceeded} exceeded, ${summary.aborted} aborted, ${summary.refused} refused` +
      (summary.remoteLate.length > 0 ? `, ${summary.remoteLate.length} late across processes` : ''),
    `legend: of the ${plural(summary.children, 'span')} under the root, ${SUMMARY_LEGEND}` +
      (summary.remoteLate.length > 0 ? `; ${REMOTE_LEGEND}` : ''),
  ];
  for (const node of summary.late) {
    const parent = node.parent;
    const theirs = parent === undefined ? '' : `, parent's ${signedMs(cutoffOffsetMs(tree, parent))}`;
    lines.push(
      `  late: ${spanLabel(node)}: ${printable(node.facts.violations.join(',') || 'late')} ` +
        `(cutoff ${signedMs(cutoffOffsetMs(tree, node))}${theirs})`,
    );
  }
  for (const node of summary.remoteLate) {
    const caller = node.parent === undefined ? '' : ` (caller ${spanLabel(node.parent)})`;
    for (const { violation, byMs } of node.remote) {
      const what = violation === 'remote_ended_after_caller' ? 'after its caller ended' : "after the caller's cutoff";
      lines.push(`  late across processes: ${spanLabel(node)}: ${violation}, ${signedMs(byMs)} ${what}${caller}`);
    }
  }
  return lines.join('\n');
}
