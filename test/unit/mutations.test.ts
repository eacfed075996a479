// The mutation list (scripts/mutations.ts) stays applicable and documented: each mutation's
// line occurs exactly once in its file (else scripts/mutate.ts cannot apply it), it changes the
// line, its test file exists and names the test, and docs/testing.md lists it.
import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { MUTATIONS } from '../../scripts/mutations';

const ROOT = path.join(__dirname, '..', '..');
const read = (f: string) => fs.readFileSync(path.join(ROOT, f), 'utf8');

/** A test file's text, with the shared suites it imports (`./<name>-suite`, e.g. the fence suite run per implementation). */
function testSource(file: string): string {
  const text = read(file);
  const suites = [...text.matchAll(/from '\.\/([\w-]+-suite)'/g)].map((x) => read(path.join(path.dirname(file), `${x[1]}.ts`)));
  return [text, ...suites].join('\n');
}

describe('mutation list', () => {
  it('has unique ids', () => {
    expect(new Set(MUTATIONS.map((m) => m.id)).size).toBe(MUTATIONS.length);
  });

  it.each(MUTATIONS.map((m) => [m.id, m] as const))('%s applies to exactly one line and names an existing test', (_id, m) => {
    expect(read(m.file).split(m.from).length - 1, `${m.from} in ${m.file}`).toBe(1);
    expect(m.to).not.toBe(m.from);
    expect(testSource(m.testFile)).toContain(m.testName);
  });

  it('every mutation is in the docs/testing.md table', () => {
    const doc = read('docs/testing.md');
    expect(MUTATIONS.filter((m) => !doc.includes(`\`${m.id}\``)).map((m) => m.id)).toEqual([]);
  });
});
