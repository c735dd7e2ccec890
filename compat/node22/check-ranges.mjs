// Verifies that the package's own dependency and peer ranges accept the
// versions installed in this copy (the OpenTelemetry 3.x line). The main CI
// run does the same for the 2.x line implicitly, through `npm ci`.
//
// usage (from the copy's root): node check-ranges.mjs
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = process.cwd();
const require = createRequire(join(root, 'package.json'));
const semver = require('semver');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

let bad = 0;
for (const field of ['dependencies', 'peerDependencies']) {
  for (const [name, range] of Object.entries(pkg[field] ?? {})) {
    let installed;
    try {
      installed = JSON.parse(readFileSync(require.resolve(`${name}/package.json`), 'utf8')).version;
    } catch {
      // Some packages do not export ./package.json: find it on disk instead.
      installed = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')).version;
    }
    const ok = semver.satisfies(installed, range, { includePrerelease: true });
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${field} ${name} ${range} accepts ${installed}: ${ok ? 'yes' : 'no'}`);
    if (!ok) bad++;
  }
}
process.exit(bad === 0 ? 0 : 1);
