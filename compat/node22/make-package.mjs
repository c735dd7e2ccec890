// Writes the package.json of the Node 22 / OpenTelemetry 3.x test copy: the
// repository's own package.json, with the devDependencies listed in
// otel3.json moved to the 3.x line (and vitest 5, @types/node 22), and the
// ones under "remove" dropped. Runtime dependencies and peer ranges are left
// exactly as published: check-ranges.mjs then verifies they accept the 3.x line.
//
// usage: node make-package.mjs <repo package.json> <output package.json>
import { readFileSync, writeFileSync } from 'node:fs';

const [source, target] = process.argv.slice(2);
if (source === undefined || target === undefined) {
  console.error('usage: node make-package.mjs <repo package.json> <output package.json>');
  process.exit(2);
}
const pkg = JSON.parse(readFileSync(source, 'utf8'));
const line = JSON.parse(readFileSync(new URL('./otel3.json', import.meta.url), 'utf8'));

pkg.devDependencies = { ...pkg.devDependencies, ...line.devDependencies };
for (const name of line.remove ?? []) delete pkg.devDependencies[name];
pkg.devDependencies = Object.fromEntries(Object.entries(pkg.devDependencies).sort(([a], [b]) => a.localeCompare(b)));

writeFileSync(target, `${JSON.stringify(pkg, null, 2)}\n`);
