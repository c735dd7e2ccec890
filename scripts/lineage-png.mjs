// `npm run demo:png`: runs the demo once (as `npm run demo` does, into a
// scratch folder), opens the timeline page it wrote in headless Chromium and
// saves a picture of it as docs/demo-lineage.png, which the README shows.
// The picture is of a real run, never drawn by hand. It needs Debian's
// chromium (.ci/ensure-apt.sh installs it) and the build (npm run build).
// A run that did not give the demo's usual partial answer (a machine too busy
// for the 1.5 s budget) is not pictured: the script says so and exits 1.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { runDemo } from '../examples/demo/run.mjs';

const CHROMIUM = '/usr/bin/chromium';
const target = fileURLToPath(new URL('../docs/demo-lineage.png', import.meta.url));

if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: run .ci/ensure-apt.sh (Debian package chromium)`);
  process.exit(1);
}
const outDir = mkdtempSync(join(tmpdir(), 'demo-png-'));
try {
  const { answer, htmlFile } = await runDemo({ outDir, print: () => {} });
  if (answer.status !== 200 || answer.answer !== 'partial') {
    console.error(`the demo run gave HTTP ${answer.status} ${answer.code ?? answer.answer}, not its usual partial answer: not pictured (machine too busy?)`);
    process.exitCode = 1;
  } else {
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      // No outside network here: without these Chromium keeps trying to reach Google's hosts.
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 700 }, deviceScaleFactor: 1 });
      await page.goto(pathToFileURL(htmlFile).href);
      await page.screenshot({ path: target, fullPage: true });
    } finally {
      await browser.close();
    }
    console.log(`wrote ${target} from trace ${answer.traceId}`);
  }
} finally {
  rmSync(outDir, { recursive: true, force: true });
}
