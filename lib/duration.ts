// Parses operator durations ("72h", "30s", "1h30m", "500ms", or plain seconds). Pure.
import { invalidInput } from './errors';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDurationMs(text: string, what = 'duration'): number {
  const s = String(text ?? '').trim();
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/g;
  let total = 0;
  let consumed = 0;
  for (const m of s.matchAll(re)) {
    if (m.index !== consumed) break;
    total += Number(m[1]) * UNIT_MS[m[2]];
    consumed += m[0].length;
  }
  if (!s || consumed !== s.length || !Number.isFinite(total)) {
    throw invalidInput(`invalid ${what} ${JSON.stringify(s)}: use e.g. 30s, 10m, 72h, 1h30m or a number of seconds`);
  }
  return Math.round(total);
}

/** Seconds as an operator writes them (hours the largest unit, as soaks are given): 72h, 1h30m, 10m, 0s. */
export function formatDurationSeconds(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s === 0) return '0s';
  const parts: string[] = [];
  let rest = s;
  for (const [unit, n] of [
    ['h', 3600],
    ['m', 60],
    ['s', 1],
  ] as const) {
    if (rest >= n) {
      parts.push(`${Math.floor(rest / n)}${unit}`);
      rest %= n;
    }
  }
  return parts.join('');
}
