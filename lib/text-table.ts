// Every table the CLI prints, drawn by cli-table3 (widths by displayed width, so `≈` or `→` do not
// skew a column). On a terminal: a box. Piped, or TERM=dumb: plain columns two spaces apart, no box
// characters and no trailing blanks, one row per line, so `awk`, `cut` or a split on /\s{2,}/ work.
// It lives in lib/ because lib's own formatters (loadgen stats, deletion preview) draw tables too.
import Table from 'cli-table3';

export type Align = 'left' | 'right';

export interface TableSpec {
  /** Column titles; none for a table whose rows speak for themselves. */
  head?: string[];
  rows: (string | number)[][];
  /** Per column; numbers read best right-aligned. Left when not given. */
  align?: Align[];
  /** Put before every line, for a table inside an indented block of text. */
  indent?: string;
}

/** The same test `move wait`'s bars use: a terminal that is not TERM=dumb. */
export function isTerminalStream(out: { isTTY?: boolean }): boolean {
  return !!out.isTTY && process.env.TERM !== 'dumb';
}

const PLAIN_CHARS = {
  top: '',
  'top-mid': '',
  'top-left': '',
  'top-right': '',
  bottom: '',
  'bottom-mid': '',
  'bottom-left': '',
  'bottom-right': '',
  left: '',
  'left-mid': '',
  mid: '',
  'mid-mid': '',
  right: '',
  'right-mid': '',
  middle: '  ',
};

/** The table as lines: boxed when `tty`, plain columns otherwise. No rows and no head: no lines. */
export function renderTable(spec: TableSpec, tty: boolean): string[] {
  if (!spec.rows.length && !spec.head?.length) return [];
  const table = new Table({
    head: spec.head ?? [],
    colAligns: spec.align ?? [],
    // No colours either way: they would end up in logs and in the tests' expectations.
    style: tty ? { head: [], border: [], compact: true } : { head: [], border: [], compact: true, 'padding-left': 0, 'padding-right': 0 },
    ...(tty ? {} : { chars: PLAIN_CHARS }),
  });
  table.push(...spec.rows.map((r) => r.map(String)));
  const indent = spec.indent ?? '';
  return table
    .toString()
    .split('\n')
    .map((l) => `${indent}${tty ? l : l.trimEnd()}`);
}

/** `renderTable` for what is written to `out`: boxed on a terminal, plain when piped. */
export function tableFor(out: { isTTY?: boolean }): (spec: TableSpec) => string[] {
  const tty = isTerminalStream(out);
  return (spec) => renderTable(spec, tty);
}
