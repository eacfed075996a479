// Every workflow the worker registers.
export * from './smoke';
