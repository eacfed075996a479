// The least-privilege Postgres roles of a production fleet, as SQL: one source for
// docs/production.md (a unit test checks the page prints exactly this) and for the e2e test that
// runs a whole move under these roles (test/e2e/least-privilege.test.ts). Pure: no I/O.
//
// Three roles per shard: the owner of the tenant tables (the application's migration role; it
// runs `shards prepare`), the worker (copy, apply, fence, clean-up) and the writer the routers
// and job workers connect as (every write goes through the fence). On the directory: the worker
// and the routers. None is a superuser; only the worker bypasses the fence, and only through the
// one parameter it may set (session_replication_role).

export interface RoleNames {
  /** Owns the tenant tables, the shard's database and schema `shardctl` (it ran `shards prepare`). */
  owner: string;
  /** `shardctl worker`. */
  worker: string;
  /** Routers and job workers. */
  router: string;
  /** The shard's database. */
  database: string;
  /** The directory's database. */
  directoryDatabase: string;
  /** The schemas holding tenant tables (config tenant.schemas). */
  tenantSchemas: string[];
}

/** The names the documentation uses. */
export const EXAMPLE_ROLES: RoleNames = {
  owner: 'app_owner',
  worker: 'shardctl_worker',
  router: 'app_writer',
  database: 'app',
  directoryDatabase: 'shardctl',
  tenantSchemas: ['public'],
};

const ident = (s: string) => {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(s)) throw new Error(`not a plain lower-case SQL name: ${JSON.stringify(s)}`);
  return s;
};

/**
 * On each shard, as a superuser (once; roles are per server), after the owner ran `shards
 * prepare`. Passwords are set apart (`\password` or ALTER ROLE), so none is in this text.
 */
export function shardGrantsSql(r: RoleNames = EXAMPLE_ROLES): string {
  const [o, w, a, db] = [ident(r.owner), ident(r.worker), ident(r.router), ident(r.database)];
  const perSchema = r.tenantSchemas
    .map(ident)
    .flatMap((s) => [
      `grant usage on schema ${s} to ${a};`,
      `grant select, insert, update, delete on all tables in schema ${s} to ${a};`,
      `grant usage, select on all sequences in schema ${s} to ${a};`,
      `alter default privileges for role ${o} in schema ${s} grant select, insert, update, delete on tables to ${a};`,
      `alter default privileges for role ${o} in schema ${s} grant usage, select on sequences to ${a};`,
    ]);
  return [
    `-- the worker: copies, applies the stream, moves the fence, cleans up`,
    `create role ${w} login replication;`,
    `grant ${o} to ${w};   -- CREATE PUBLICATION ... FOR TABLE needs the tables' owner`,
    `grant set on parameter session_replication_role to ${w};   -- copy / apply bypass the fence (PG >= 15)`,
    `grant connect on database ${db} to ${w};`,
    ``,
    `-- the applications (through the router) and their job workers: they write through the fence`,
    `create role ${a} login;`,
    `grant connect on database ${db} to ${a};`,
    `grant usage on schema shardctl to ${a};`,
    `grant select on shardctl.fence, shardctl.settings to ${a};`,
    `grant execute on all routines in schema shardctl to ${a};`,
    `grant select, insert, update, delete on shardctl.blob_index to ${a};   -- the blob index (router putBlob / getBlob / deleteBlob)`,
    ...perSchema,
    ``,
  ].join('\n');
}

/** On the directory, as a superuser or the directory's owner, after `shardctl directory migrate`. */
export function directoryGrantsSql(r: RoleNames = EXAMPLE_ROLES): string {
  const [w, a, db] = [ident(r.worker), ident(r.router), ident(r.directoryDatabase)];
  return [
    `create role ${w} login;`,
    `grant connect on database ${db} to ${w};`,
    `grant usage on schema shardctl to ${w};`,
    `grant select, insert, update, delete on all tables in schema shardctl to ${w};`,
    `grant usage, select on all sequences in schema shardctl to ${w};`,
    ``,
    `create role ${a} login;`,
    `grant connect on database ${db} to ${a};`,
    `grant usage on schema shardctl to ${a};`,
    `grant select on shardctl.units, shardctl.shards, shardctl.generation, shardctl.splits to ${a};   -- splits: routing a split tenant's rows`,
    ``,
  ].join('\n');
}
