// What a validation attempt records in its heartbeat so the next attempt resumes (issue 14): the
// delta token it started tracking under and, per table, the key ranges found equal. Small (merged
// ranges of integer or uuid key values, never row contents) and shown in the Web UI. Pure.
import { z } from 'zod';
import type { ValidationProgress } from './compare';

const key = z.array(z.string()).nullable();
const recorded = z.object({
  validated: z.object({
    token: z.string().min(1),
    tables: z.record(z.string(), z.object({ equal: z.array(z.object({ after: key, upTo: key })), rows: z.number().int().nonnegative() })),
  }),
});

export interface RecordedValidation {
  /** The delta tracking the ranges were compared under (lib/cdc/delta.ts). */
  token: string;
  tables: ValidationProgress;
}

/** The progress a previous attempt's heartbeat recorded, or undefined (none, or not of this shape). */
export function recordedValidation(details: unknown): RecordedValidation | undefined {
  const r = recorded.safeParse(details);
  return r.success ? r.data.validated : undefined;
}

/** Rows in the ranges recorded equal, over every table. */
export function rowsIn(tables: ValidationProgress): number {
  return Object.values(tables).reduce((n, p) => n + p.rows, 0);
}
