import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

/** Debian's chromium (installed by .ci/ensure-apt.sh); playwright never downloads a browser here. */
export const CHROMIUM = '/usr/bin/chromium';

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run .ci/ensure-apt.sh (Debian package chromium)`);
  return chromium.launch({
    executablePath: CHROMIUM,
    // The machine has no outside network: without these, Chromium keeps trying to reach Google's hosts.
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

export interface PixelStats {
  width: number;
  height: number;
  /** Pixels that are not (near) white. */
  inked: number;
  distinctColors: number;
  /** Colour at each probe point, as [r, g, b]. */
  probes: [number, number, number][];
}

// The few DOM types the page function needs (the project compiles without lib "dom").
interface PageImage {
  src: string;
  width: number;
  height: number;
  decode(): Promise<void>;
}
interface PageCanvas {
  width: number;
  height: number;
  getContext(kind: '2d'): {
    drawImage(img: PageImage, x: number, y: number): void;
    getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray };
  } | null;
}
interface PageGlobals {
  Image: new () => PageImage;
  document: { createElement(tag: 'canvas'): PageCanvas };
}

/**
 * Decodes a PNG screenshot in the browser itself (canvas), so the check reads
 * the pixels Chromium actually painted without a PNG library.
 */
export async function pixelStats(page: Page, png: Buffer, probes: { x: number; y: number }[]): Promise<PixelStats> {
  return page.evaluate(
    async ({ b64, points }) => {
      const { Image, document } = globalThis as unknown as PageGlobals;
      const img = new Image();
      img.src = `data:image/png;base64,${b64}`;
      await img.decode();
      const canvas = document.createElement('canvas');
      canvas.width = img.width;
      canvas.height = img.height;
      const ctx = canvas.getContext('2d')!;
      ctx.drawImage(img, 0, 0);
      const { data } = ctx.getImageData(0, 0, img.width, img.height);
      let inked = 0;
      const colors = new Set<number>();
      for (let i = 0; i < data.length; i += 4) {
        const [r, g, b] = [data[i], data[i + 1], data[i + 2]];
        if (r < 240 || g < 240 || b < 240) inked++;
        colors.add((r << 16) | (g << 8) | b);
      }
      const at = (x: number, y: number): [number, number, number] => {
        const i = (Math.round(y) * img.width + Math.round(x)) * 4;
        return [data[i], data[i + 1], data[i + 2]];
      };
      return {
        width: img.width,
        height: img.height,
        inked,
        distinctColors: colors.size,
        probes: points.map((p) => at(p.x, p.y)),
      };
    },
    { b64: png.toString('base64'), points: probes },
  );
}
