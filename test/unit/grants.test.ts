// docs/production.md prints lib/grants.ts's SQL verbatim (the e2e least-privilege test runs that
// SQL), so the page and the tested grants cannot drift apart.
import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { shardGrantsSql, directoryGrantsSql, EXAMPLE_ROLES } from '../../lib/grants';

const page = fs.readFileSync(path.resolve(__dirname, '../../docs/production.md'), 'utf8');
/** A SQL text as the page's indented code block shows it. */
const block = (sql: string) =>
  sql
    .trimEnd()
    .split('\n')
    .map((l) => (l ? `    ${l}` : ''))
    .join('\n');

describe('least-privilege grants', () => {
  it('docs/production.md shows exactly the shard and directory grants the e2e test runs', () => {
    expect(page).toContain(block(shardGrantsSql(EXAMPLE_ROLES)));
    expect(page).toContain(block(directoryGrantsSql(EXAMPLE_ROLES)));
  });

  it('names each schema of tenant tables', () => {
    const sql = shardGrantsSql({ ...EXAMPLE_ROLES, tenantSchemas: ['public', 'billing'] });
    expect(sql).toContain('grant select, insert, update, delete on all tables in schema billing to app_writer;');
    expect(sql).toContain('alter default privileges for role app_owner in schema billing grant select, insert, update, delete on tables to app_writer;');
  });

  it('refuses a role or database name it would have to quote', () => {
    expect(() => shardGrantsSql({ ...EXAMPLE_ROLES, worker: 'w; drop table x' })).toThrow(/not a plain lower-case SQL name/);
    expect(() => directoryGrantsSql({ ...EXAMPLE_ROLES, directoryDatabase: 'Dir' })).toThrow(/not a plain lower-case SQL name/);
  });
});
