// DDL that takes no lock when there is nothing to do. `ALTER TABLE … ADD COLUMN IF NOT EXISTS`,
// `ALTER COLUMN … SET STORAGE` and `CREATE INDEX IF NOT EXISTS` lock the table (ACCESS EXCLUSIVE,
// ACCESS EXCLUSIVE, SHARE) even when the column or index is already there, so every re-run of
// `shards prepare` would stop every writer of that table for a moment, and could deadlock with a
// writer whose trigger reads a table prepare already holds (a writer's audit trigger reads
// shardctl.fence; prepare altered it first and then waited for the writer's table). These check
// the catalog first and run the DDL only when something is missing.

/** Adds `column` to `table` (schema-qualified) unless it is there. */
export function addColumnOnce(table: string, column: string, definition: string): string {
  return `do $once$ begin
  if not exists (select 1 from pg_catalog.pg_attribute where attrelid = '${table}'::regclass and attname = '${column}' and not attisdropped) then
    alter table ${table} add column ${column} ${definition};
  end if;
end $once$;`;
}

/** Creates index `name` (in `schema`) unless an index of that name is there. */
export function createIndexOnce(schema: string, name: string, on: string): string {
  return `do $once$ begin
  if pg_catalog.to_regclass('${schema}.${name}') is null then
    create index ${name} on ${on};
  end if;
end $once$;`;
}

/** Sets `column`'s storage to `storage` (e.g. extended) unless it is already that. */
export function setStorageOnce(table: string, column: string, storage: 'plain' | 'external' | 'extended' | 'main'): string {
  const code = { plain: 'p', external: 'e', extended: 'x', main: 'm' }[storage];
  return `do $once$ begin
  if exists (select 1 from pg_catalog.pg_attribute where attrelid = '${table}'::regclass and attname = '${column}' and attstorage <> '${code}') then
    alter table ${table} alter column ${column} set storage ${storage};
  end if;
end $once$;`;
}
