import { cutoffOffsetMs, isLate, lateReasons, summarize, type LineageNode, type LineageTree } from './tree';
import { clip, renderText, spanLabel } from './text';
import { isRefused } from './model';

/** A self-contained timeline page (inline CSS and SVG, no script): a bar per span, cutoffs marked, late spans red. */

const LABEL_W = 380;
const CHART_W = 780;
const ROW_H = 22;
const BAR_H = 12;
const AXIS_H = 30;
const RIGHT_PAD = 24;

export const LATE_COLOR = '#d62728';
const OUTCOME_COLORS: Record<string, string> = {
  completed: '#4c78a8',
  expired: '#f58518',
  cancelled: '#b279a2',
  not_started: '#bab0ac',
  unknown: '#9d755d',
};
const NO_DEADLINE_COLOR = '#d9d9d9';

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function niceStep(span: number, ticks: number): number {
  const raw = span / ticks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 5, 10]) if (raw <= factor * magnitude) return factor * magnitude;
  return 10 * magnitude;
}

function colorOf(node: LineageNode): string {
  if (isLate(node)) return LATE_COLOR;
  if (!node.facts.present) return NO_DEADLINE_COLOR;
  if (isRefused(node.facts)) return OUTCOME_COLORS.not_started;
  return OUTCOME_COLORS[node.facts.outcome ?? ''] ?? OUTCOME_COLORS.completed;
}

function fmt(value: number | undefined): string {
  return value === undefined ? '-' : `${Math.round(value)} ms`;
}

function tooltip(tree: LineageTree, node: LineageNode): string {
  const { facts, span } = node;
  const lines = [
    spanLabel(node),
    `start +${Math.round((span.startUs - tree.originUs) / 1000)} ms, spent ${fmt((span.endUs - span.startUs) / 1000)}`,
  ];
  if (facts.present) {
    const cutoff = cutoffOffsetMs(tree, node);
    lines.push(
      `cutoff ${cutoff === undefined ? '-' : `+${Math.round(cutoff)} ms`}`,
      `remaining ${fmt(facts.remainingMs)} at start, ${fmt(facts.remainingAtEndMs)} at end`,
      `outcome ${facts.outcome ?? '-'}${facts.abortCode ? ` (${facts.abortCode})` : ''}`,
    );
  }
  if (isLate(node)) lines.push(`LATE: ${lateReasons(node).join(', ')}`);
  return lines.join('\n');
}

function renderSvg(tree: LineageTree): string {
  const origin = tree.originUs;
  const offsets: number[] = [0];
  for (const node of tree.ordered) {
    offsets.push((node.span.startUs - origin) / 1000, (node.span.endUs - origin) / 1000);
    const cutoff = cutoffOffsetMs(tree, node);
    if (cutoff !== undefined) offsets.push(cutoff);
  }
  const lo = Math.min(...offsets);
  const hi = Math.max(...offsets, lo + 1);
  const pad = (hi - lo) * 0.03;
  const d0 = lo - pad;
  const d1 = hi + pad;
  const x = (offsetMs: number) => LABEL_W + ((offsetMs - d0) / (d1 - d0)) * CHART_W;
  const height = AXIS_H + tree.ordered.length * ROW_H + 8;
  const width = LABEL_W + CHART_W + RIGHT_PAD;
  const parts: string[] = [];

  const step = niceStep(d1 - d0, 8);
  for (let t = Math.ceil(d0 / step) * step; t <= d1; t += step) {
    const tx = x(t).toFixed(1);
    parts.push(
      `<line class="grid" x1="${tx}" x2="${tx}" y1="${AXIS_H - 6}" y2="${height}"/>`,
      `<text class="tick" x="${tx}" y="${AXIS_H - 10}" text-anchor="middle">${Math.round(t)} ms</text>`,
    );
  }

  tree.ordered.forEach((node, i) => {
    const y = AXIS_H + i * ROW_H;
    const mid = y + ROW_H / 2;
    const start = (node.span.startUs - origin) / 1000;
    const end = (node.span.endUs - origin) / 1000;
    // Whole pixels and a visible minimum, so a short span still shows its colour unblended.
    const barX = Math.round(x(start));
    const barW = Math.max(4, Math.round(x(end)) - barX);
    const late = isLate(node);
    const classes = ['bar', `outcome-${node.facts.present ? (node.facts.outcome ?? 'unknown') : 'none'}`];
    if (late) classes.push('late');
    const title = `<title>${escapeHtml(tooltip(tree, node))}</title>`;
    if (i % 2 === 1) parts.push(`<rect class="stripe" x="0" y="${y}" width="${width}" height="${ROW_H}"/>`);
    parts.push(
      `<text class="label${late ? ' late' : ''}" x="${8 + node.depth * 14}" y="${mid + 4}">` +
        `${escapeHtml(clipLabel(spanLabel(node), node.depth))}${title}</text>`,
      `<rect class="${classes.join(' ')}" data-span-id="${escapeHtml(node.span.spanId)}" data-late="${late}" ` +
        `x="${barX}" y="${mid - BAR_H / 2}" width="${barW}" height="${BAR_H}" ` +
        `fill="${colorOf(node)}">${title}</rect>`,
    );
    const cutoff = cutoffOffsetMs(tree, node);
    if (cutoff !== undefined) {
      const cx = x(cutoff).toFixed(1);
      parts.push(
        `<g class="cutoff${late ? ' late' : ''}" data-span-id="${escapeHtml(node.span.spanId)}">` +
          `<line x1="${cx}" x2="${cx}" y1="${y + 2}" y2="${y + ROW_H - 2}"/>` +
          `<path d="M${cx} ${y + 7} l-4 -5 h8 z"/>` +
          `<title>cutoff of ${escapeHtml(spanLabel(node))}: +${Math.round(cutoff)} ms</title></g>`,
      );
    }
  });

  const rootCutoff = tree.rootCutoffMs === undefined ? undefined : tree.rootCutoffMs - origin / 1000;
  if (rootCutoff !== undefined) {
    const rx = x(rootCutoff).toFixed(1);
    parts.push(
      `<line class="root-cutoff" x1="${rx}" x2="${rx}" y1="${AXIS_H - 4}" y2="${height}">` +
        `<title>root cutoff +${Math.round(rootCutoff)} ms</title></line>`,
    );
  }
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ` +
    `role="img" aria-label="deadline timeline of trace ${escapeHtml(tree.traceId)}">${parts.join('')}</svg>`
  );
}

function clipLabel(label: string, depth: number): string {
  return clip(label, Math.floor((LABEL_W - 16 - depth * 14) / 7));
}

const STYLE = `
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:28px 0 6px;font-family:ui-monospace,monospace}
.summary{margin:4px 0 8px}.summary .bad{color:${LATE_COLOR};font-weight:600}
svg{display:block;max-width:100%;height:auto;border:1px solid #ddd}
svg text{font:12px ui-monospace,monospace;fill:#222}svg text.tick{fill:#666;font-size:11px}
svg text.label.late{fill:${LATE_COLOR};font-weight:600}
.bar{shape-rendering:crispEdges}.grid{stroke:#eee}.stripe{fill:#fafafa}
.cutoff line{stroke:#222;stroke-width:2}.cutoff path{fill:#222}
.cutoff.late line{stroke:${LATE_COLOR}}.cutoff.late path{fill:${LATE_COLOR}}
.root-cutoff{stroke:#444;stroke-width:1;stroke-dasharray:4 3}
.bar.outcome-not_started{stroke:#777;stroke-dasharray:2 2}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
pre{font-size:12px;background:#f6f6f6;padding:8px;overflow:auto}
`;

function legend(): string {
  const items = [
    ...Object.entries(OUTCOME_COLORS).map(([name, color]) => [name === 'not_started' ? 'refused' : name, color]),
    ['late (violation)', LATE_COLOR],
    ['no deadline', NO_DEADLINE_COLOR],
  ];
  const swatches = items.map(([name, color]) => `<span><i style="background:${color}"></i>${name}</span>`).join('');
  return `<p class="legend">${swatches}<span>▼ the span's own cutoff</span><span>┆ root cutoff</span></p>`;
}

export function renderHtml(trees: LineageTree[], title = 'Deadline lineage'): string {
  const sections = trees.map((tree) => {
    const s = summarize(tree);
    const remote = s.remoteLate.length > 0 ? `, ${s.remoteLate.length} late across processes` : '';
    const late = `<span class="${s.late.length + s.remoteLate.length > 0 ? 'bad' : ''}">${s.late.length} late${remote}</span>`;
    return (
      `<section data-trace-id="${escapeHtml(tree.traceId)}"><h2>trace ${escapeHtml(tree.traceId)}</h2>` +
      `<p class="summary">${s.spans} spans, ${s.children} under the root: ${late}, ${s.exceeded} exceeded, ${s.aborted} aborted, ${s.refused} refused</p>` +
      `${renderSvg(tree)}<details><summary>text view</summary><pre>${escapeHtml(renderText(tree))}</pre></details></section>`
    );
  });
  return [
    '<!doctype html>',
    '<html lang="en"><head><meta charset="utf-8">',
    `<meta name="viewport" content="width=device-width, initial-scale=1"><title>${escapeHtml(title)}</title>`,
    `<style>${STYLE}</style></head><body>`,
    `<h1>${escapeHtml(title)}</h1>`,
    'Each bar is a span on the trace&#39;s time axis (0 = start of the root span). Hover for details.',
    legend(),
    ...sections,
    '</body></html>',
    '',
  ].join('\n');
}
