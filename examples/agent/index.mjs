export { startAgentServices, DEFAULT_SERVICE_OPTIONS } from './services.mjs';
export { runAgentScenario } from './scenario.mjs';
export { startTracing } from './tracing.mjs';
