// SPDX-License-Identifier: MIT
#pragma once
// The KV-cache hook (kv_cache.h) during generation: the cache grows by a few tokens per pass, so the
// policy's chunks are decided as they fill instead of over a whole sequence at once.
#include <cstdint>

#include "cpu_decode_state.h"
#include "moewb/engine/kv_cache.h"

namespace moewb::engine {

// Appends `tokens` new rows of one layer and sequence (keys [tokens, kv_heads x key_dim] with
// `key_row_stride`, values likewise, float32 as the layer computed them) to `cache`.
//
// Without a policy the rows are stored as they are. With one, the cache is the one a generating engine
// would keep: a chunk of N absolute positions is quantized when it is complete and out of its format's
// residual window (the policy is asked for its format then, with the chunk's float32 keys; a chunk still
// in the window is asked again at the next pass), and until then its rows are stored in fp16. So the new
// tokens attend to the state after their own rows were added, as in forward(); a prompt given in one pass
// gets exactly the cache forward() simulates, and later tokens see the chunks that were completed since.
//
// Returns what the cache of this layer and sequence stores now (all its rows; zero without a policy).
KvCacheSize appendWithKvCachePolicy(const KvCachePolicy* policy, int layer, int sequence,
                                    const KvShape& shape, SequenceKvCache& cache, const float* keys,
                                    int64_t key_row_stride, const float* values, int64_t value_row_stride,
                                    int64_t tokens);

}  // namespace moewb::engine
