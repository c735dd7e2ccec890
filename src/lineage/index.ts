// `otel-deadline/lineage`: programmatic access to what the `deadline-lineage` CLI does
// (load traces, search Jaeger, build the deadline tree, render it as text or HTML, receive OTLP).
export { loadTraces, parseTraceText, pickTrace, LineageInputError, type LoadOptions } from './load';
export { groupTraces, deadlineFacts, type LineageSpan, type LineageTrace, type DeadlineFacts, type TagValue } from './model';
export { buildTree, buildTreeWith, summarize, hasViolation, isLate, lateReasons, type LineageNode, type LineageTree, type LineageSummary, type TreeOptions } from './tree';
export { REMOTE_GRACE_MS, type RemoteLateness, type RemoteViolation } from './remote';
export { searchJaeger, type SearchOptions, type SearchResult } from './search';
export { renderText, renderSummary, SUMMARY_LEGEND } from './text';
export { renderHtml } from './html';
export { spansFromJaeger, type JaegerAnswer } from './jaeger';
export { spansFromOtlp, type OtlpRequest } from './otlp';
export { startOtlpReceiver, type OtlpReceiver, type OtlpReceiverOptions } from './receiver';
