// The placement directory API (docs/architecture.md "Directory"): one import for its users.
export * from './db';
export * from './placements';
export * from './listen';
export * from './shards';
export * from './choose';
export * from './reservations';
export * from './ensure';
export { migrateDirectory, DIRECTORY_MIGRATIONS } from './schema';
