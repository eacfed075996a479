import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { builtinModules } from 'node:module';

// The lint rule of STYLE.md: workflows/ stay deterministic — no Node builtins, pg or AWS SDK,
// directly or through a relative import of a module that pulls them in.
const root = path.join(__dirname, '..', '..');
const forbidden = (spec: string) =>
  spec.startsWith('node:') || builtinModules.includes(spec.split('/')[0]) || /^pg($|-|\/)/.test(spec) || spec.startsWith('@aws-sdk/');

function importsOf(file: string): string[] {
  const src = fs.readFileSync(file, 'utf8');
  const out: string[] = [];
  const re = /(?:import|export)\s+(type\s+)?[^'"]*?from\s+['"]([^'"]+)['"]|require\(\s*['"]([^'"]+)['"]\s*\)|import\(\s*['"]([^'"]+)['"]\s*\)/g;
  for (const m of src.matchAll(re)) {
    if (m[1]) continue; // `import type` is erased at build time
    out.push(m[2] ?? m[3] ?? m[4]);
  }
  return out;
}

function resolveTs(from: string, spec: string): string | undefined {
  const base = path.resolve(path.dirname(from), spec);
  for (const c of [base + '.ts', path.join(base, 'index.ts')]) if (fs.existsSync(c)) return c;
  return undefined;
}

export function violations(entry: string): string[] {
  const seen = new Set<string>();
  const bad: string[] = [];
  const visit = (file: string, chain: string[]) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const spec of importsOf(file)) {
      if (spec.startsWith('.')) {
        const r = resolveTs(file, spec);
        if (r) visit(r, [...chain, path.relative(root, r)]);
      } else if (forbidden(spec)) {
        bad.push(`${[...chain].join(' -> ')} imports ${spec}`);
      }
    }
  };
  visit(entry, [path.relative(root, entry)]);
  return bad;
}

describe('workflow determinism lint', () => {
  it('keeps Node builtins, pg and @aws-sdk out of workflows/ (transitively)', () => {
    const dir = path.join(root, 'workflows');
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(0);
    const bad = files.flatMap((f) => violations(path.join(dir, f)));
    expect(bad).toEqual([]);
  });

  it('catches a forbidden import (the check can fail)', () => {
    const tmp = path.join(root, 'tmp', 'lint-probe');
    fs.mkdirSync(tmp, { recursive: true });
    fs.writeFileSync(path.join(tmp, 'a.ts'), "import { x } from './b';\n");
    fs.writeFileSync(path.join(tmp, 'b.ts'), "import fs from 'node:fs';\nimport { Pool } from 'pg';\nexport const x = 1;\n");
    expect(violations(path.join(tmp, 'a.ts'))).toHaveLength(2);
    fs.rmSync(tmp, { recursive: true, force: true });
  });
});
