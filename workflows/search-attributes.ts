// Typed keys of the custom search attributes (registered by `shardctl dev up`; DESIGN.md §6).
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const SA = {
  unit: defineSearchAttributeKey('ShardctlUnit', SearchAttributeType.KEYWORD),
  source: defineSearchAttributeKey('ShardctlSource', SearchAttributeType.KEYWORD),
  target: defineSearchAttributeKey('ShardctlTarget', SearchAttributeType.KEYWORD),
  phase: defineSearchAttributeKey('ShardctlPhase', SearchAttributeType.KEYWORD),
  blockedReason: defineSearchAttributeKey('ShardctlBlockedReason', SearchAttributeType.KEYWORD),
};
