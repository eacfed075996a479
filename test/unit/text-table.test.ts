import { afterEach, describe, expect, it } from 'vitest';
import { isTerminalStream, renderTable, tableFor, type TableSpec } from '../../lib/text-table';

const BOX = /[┌┐└┘─│├┤┬┴┼]/;
const spec: TableSpec = {
  head: ['SHARD', 'ROWS', 'NOTE'],
  rows: [
    ['shard-a', 12, '≈ 3 kB'],
    ['shard-bb', 3, ''],
  ],
  align: ['left', 'right', 'left'],
};

describe('renderTable piped (plain)', () => {
  it('separates columns by two spaces, padded to the widest cell, without box characters', () => {
    expect(renderTable(spec, false)).toEqual(['SHARD     ROWS  NOTE', 'shard-a     12  ≈ 3 kB', 'shard-bb     3']);
  });

  it('leaves no trailing blanks on any line', () => {
    for (const l of renderTable(
      {
        rows: [
          ['a', ''],
          ['bbb', 'x'],
        ],
      },
      false,
    ))
      expect(l).toBe(l.trimEnd());
  });

  it('splits back into its cells on two or more blanks', () => {
    const lines = renderTable({ head: ['AT', 'ACTOR', 'ACTION'], rows: [['2026-12-05 00:01:02Z', 'alice', 'tenant.create']] }, false);
    expect(lines.map((l) => l.split(/\s{2,}/))).toEqual([
      ['AT', 'ACTOR', 'ACTION'],
      ['2026-12-05 00:01:02Z', 'alice', 'tenant.create'],
    ]);
  });

  it('puts the indent before every line', () => {
    expect(
      renderTable(
        {
          rows: [
            ['a', '1'],
            ['b', '2'],
          ],
          indent: '    ',
        },
        false,
      ),
    ).toEqual(['    a  1', '    b  2']);
  });

  it('prints nothing for a table with neither rows nor head', () => {
    expect(renderTable({ rows: [] }, false)).toEqual([]);
  });
});

describe('renderTable on a terminal (boxed)', () => {
  it('draws a box with a rule under the head and none between rows', () => {
    const lines = renderTable(spec, true);
    expect(lines).toEqual([
      '┌──────────┬──────┬────────┐',
      '│ SHARD    │ ROWS │ NOTE   │',
      '├──────────┼──────┼────────┤',
      '│ shard-a  │   12 │ ≈ 3 kB │',
      '│ shard-bb │    3 │        │',
      '└──────────┴──────┴────────┘',
    ]);
  });

  it('writes no colour codes', () => {
    expect(renderTable(spec, true).join('\n')).not.toContain('\u001b[');
  });
});

describe('isTerminalStream / tableFor', () => {
  const term = process.env.TERM;
  afterEach(() => {
    if (term === undefined) delete process.env.TERM;
    else process.env.TERM = term;
  });

  it('draws plain columns for a stream that is not a TTY', () => {
    expect(tableFor({ isTTY: false })({ rows: [['a', 'b']] }).join('\n')).not.toMatch(BOX);
  });

  it('draws a box for a TTY', () => {
    process.env.TERM = 'xterm-256color';
    expect(tableFor({ isTTY: true })({ rows: [['a', 'b']] }).join('\n')).toMatch(BOX);
  });

  it('treats TERM=dumb as no terminal, as the progress bars do', () => {
    process.env.TERM = 'dumb';
    expect(isTerminalStream({ isTTY: true })).toBe(false);
  });
});
