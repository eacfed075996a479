// Strict config: an unknown key is an error that names its path and the nearest key the schema
// knows there ("did you mean"), so a typo (`soakSecond`) never silently becomes a default. Pure.
import { z } from 'zod';

/** The object schema found at `path` below `schema` (through defaults, optionals, arrays), if any. */
export function objectAt(schema: z.ZodTypeAny, path: readonly (string | number)[]): z.AnyZodObject | undefined {
  let s: z.ZodTypeAny | undefined = schema;
  for (let i = 0; ; i++) {
    s = unwrap(s);
    if (i === path.length) return s instanceof z.ZodObject ? s : undefined;
    const k = path[i];
    if (s instanceof z.ZodArray) s = s.element;
    else if (s instanceof z.ZodObject) s = s.shape[String(k)];
    else return undefined;
  }
}

function unwrap(s: z.ZodTypeAny | undefined): z.ZodTypeAny | undefined {
  for (;;) {
    if (s instanceof z.ZodDefault) s = s._def.innerType;
    else if (s instanceof z.ZodOptional || s instanceof z.ZodNullable) s = s.unwrap();
    else if (s instanceof z.ZodEffects) s = s.innerType();
    else return s;
  }
}

/** Levenshtein distance, case-insensitive (a key's case is a typo too). */
export function editDistance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let prev = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const cur = [i];
    for (let j = 1; j <= y.length; j++) cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x[i - 1] === y[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[y.length];
}

/** The known key closest to `key`, when it is close enough to be what was meant. */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const d = editDistance(key, k);
    if (d < bestD) [best, bestD] = [k, d];
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

/** One line per unknown key: `limits.soakSecond: unknown key (did you mean limits.soakSeconds?)`. */
export function unknownKeyLines(schema: z.ZodTypeAny, issue: z.ZodIssue): string[] {
  if (issue.code !== 'unrecognized_keys') return [];
  const known = Object.keys(objectAt(schema, issue.path)?.shape ?? {});
  return issue.keys.map((k) => {
    const at = [...issue.path, k].join('.');
    const near = nearestKey(k, known);
    const hint = near ? `did you mean ${[...issue.path, near].join('.')}?` : `known keys here: ${known.join(', ') || 'none'}`;
    return `${at}: unknown key (${hint})`;
  });
}
