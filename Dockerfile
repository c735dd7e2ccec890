# The demo services (examples/demo), built from this repository. One image,
# four services: DEMO_SERVICE picks gateway, agent, tools or worker.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
# Dev dependencies included: the demo uses the OTel SDK packages, which are dev dependencies of the library.
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
COPY instrumentation ./instrumentation
COPY examples ./examples
RUN npm run build
ENV HOST=0.0.0.0 PORT=8080 DEMO_TELEMETRY=register
EXPOSE 8080
# The package's register entry sets up the SDK, the deadline propagator,
# processor and transport instrumentation; OTEL_* variables configure the export.
CMD ["node", "--import", "otel-deadline/register", "examples/demo/service.mjs"]
