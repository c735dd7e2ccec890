import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installOtel } from '../helpers/otel';
import { deadlineScenario, exportAsOtlpJson, SCENARIO_PROCESSOR } from './helpers/scenario';
import { launchChromium, pixelStats } from './helpers/chromium';
import { spansFromOtlp } from '../../src/lineage/otlp';
import { groupTraces } from '../../src/lineage/model';
import { buildTree } from '../../src/lineage/tree';
import { LATE_COLOR, renderHtml } from '../../src/lineage/html';

function rgb(hex: string): [number, number, number] {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)) as [number, number, number];
}

describe('the timeline page in headless Chromium', () => {
  let browser: Browser;
  let dir: string;
  let pageFile: string;

  beforeAll(async () => {
    const otel = installOtel(SCENARIO_PROCESSOR);
    await deadlineScenario();
    const requests = await exportAsOtlpJson(otel.spans());
    await otel.shutdown();
    const trees = groupTraces(requests.flatMap(spansFromOtlp)).map(buildTree);
    dir = mkdtempSync(join(tmpdir(), 'lineage-html-'));
    pageFile = join(dir, 'lineage.html');
    writeFileSync(pageFile, renderHtml(trees));
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('renders every span as a bar with its cutoff marker, fetching nothing, and the late bar is red', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 }, deviceScaleFactor: 1 });
    const fetched: string[] = [];
    page.on('request', (req) => fetched.push(req.url()));
    const url = pathToFileURL(pageFile).href;
    await page.goto(url);

    // Only the page itself was loaded.
    expect(fetched).toEqual([url]);
    expect(await page.locator('svg rect.bar').count()).toBe(5);
    expect(await page.locator('svg g.cutoff').count()).toBe(5);
    const late = page.locator('svg rect.bar.late');
    expect(await late.count()).toBe(1);
    const box = await late.boundingBox();
    expect(box).not.toBeNull();
    expect(box!.width).toBeGreaterThanOrEqual(4);
    const lateCutoff = await page.locator('svg g.cutoff.late line').boundingBox();
    expect(lateCutoff).not.toBeNull();
    // The late child's own cutoff lies far right of its parent's.
    const rootCutoff = await page.locator('svg line.root-cutoff').boundingBox();
    expect(lateCutoff!.x).toBeGreaterThan(rootCutoff!.x + 100);

    const png = await page.screenshot({ fullPage: true });
    const stats = await pixelStats(page, png, [
      { x: box!.x + box!.width / 2, y: box!.y + box!.height / 2 },
      { x: 2, y: 2 },
    ]);
    // Not blank: plenty of ink and more than a handful of colours.
    expect(stats.inked).toBeGreaterThan(stats.width * stats.height * 0.01);
    expect(stats.distinctColors).toBeGreaterThan(8);
    const [lateRed, corner] = stats.probes;
    const want = rgb(LATE_COLOR);
    for (let i = 0; i < 3; i++) expect(Math.abs(lateRed[i] - want[i])).toBeLessThanOrEqual(8);
    expect(corner).toEqual([255, 255, 255]);
    await page.close();
  });
});
