import { existsSync } from 'node:fs';
import { jaegerBinary, startJaeger, type RunningJaeger } from '../../../scripts/jaeger.mjs';

/**
 * The Jaeger tests need the binary .ci/ensure-jaeger.sh builds. CI always
 * builds it first, so there a missing binary fails the tests (startJaeger
 * says how to build it); on a developer's machine without Go they are skipped.
 */
export const SKIP_JAEGER = !existsSync(jaegerBinary()) && !process.env.CI;

/**
 * Jaeger with deploy/jaeger/config.yaml on free loopback ports, span metrics
 * published every second, and every trace it receives also forwarded as
 * OTLP/JSON to `forwardTo` (an embedded receiver writing the demo's OTLP file),
 * so one run yields both the file and Jaeger's view of the same spans.
 */
export function startTestJaeger(forwardTo?: string): Promise<RunningJaeger> {
  const overlays =
    forwardTo === undefined
      ? []
      : [
          `yaml:exporters::otlphttp/file::endpoint: ${forwardTo}`,
          'yaml:exporters::otlphttp/file::encoding: json',
          'yaml:exporters::otlphttp/file::compression: none',
          'yaml:service::pipelines::traces::exporters: [jaeger_storage_exporter, spanmetrics, otlphttp/file]',
        ];
  return startJaeger({ ports: 'free', spanMetricsFlush: '1s', overlays });
}
