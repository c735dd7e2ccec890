'use strict';
// Test-only stand-in for @opentelemetry/sdk-trace-base on the 3.x line (see package.json).
// At run time it restores the 2.x names and constructor shapes, so the suite's helpers,
// examples and docs samples, written against 2.x, can run on 3.x. Its types do so only
// for what tests use (BasicTracerProvider, SimpleSpanProcessor): product code that
// constructs a BatchSpanProcessor the 2.x way still fails to compile here, as it would
// for a user on 3.x. .ci/node22.sh also fails when dist/ requires this package at all.
// eslint-disable-next-line @typescript-eslint/no-require-imports -- a CommonJS file: require is how it loads
const sdkTrace = require('@opentelemetry/sdk-trace');

/** 2.x processors took (exporter, config?); 3.x ones take ({ exporter, ...config }). */
function optionsOf(exporterOrOptions, config) {
  const isExporter = typeof (exporterOrOptions && exporterOrOptions.export) === 'function';
  return isExporter ? { ...config, exporter: exporterOrOptions } : exporterOrOptions;
}

class SimpleSpanProcessor extends sdkTrace.SimpleSpanProcessor {
  constructor(exporterOrOptions) {
    super(optionsOf(exporterOrOptions));
  }
}

class BatchSpanProcessor extends sdkTrace.BatchSpanProcessor {
  constructor(exporterOrOptions, config) {
    super(optionsOf(exporterOrOptions, config));
  }
}

module.exports = { ...sdkTrace, BasicTracerProvider: sdkTrace.TracerProvider, SimpleSpanProcessor, BatchSpanProcessor };
