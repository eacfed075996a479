// Every workflow the worker registers.
export * from './smoke';
export * from './move';
export * from './rebalance';
