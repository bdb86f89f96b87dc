// What matcher/_native.pyx calls beside Core's own methods: loops over many ids or topics
// that would cost a Python-level call per item if they were written in the .pyx.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "native.hpp"

namespace topicstore {

// Every (id, text) of the table, for listing: ids and texts copied out in one go.
inline void items(const Core& core, std::vector<uint32_t>& ids, std::vector<std::string>& texts) {
    core.for_each_id([&](uint32_t id, const char* text, uint32_t size) {
        ids.push_back(id);
        texts.emplace_back(text, size);
    });
}

// Sort ids[:n] and drop repeats; returns how many are left. Ids within a span of SPAN_BITS
// (the usual many-id result: ids are allocated densely) go through a bitmap on the stack,
// O(n + span / 64); others through std::sort.
inline size_t sort_ids(uint32_t* ids, size_t n) {
    constexpr uint32_t SPAN_BITS = 1u << 14;
    if (n < 2) return n;
    if (n >= 32) {
        uint32_t lo = ids[0], hi = ids[0];
        for (size_t i = 1; i < n; ++i) {
            lo = std::min(lo, ids[i]);
            hi = std::max(hi, ids[i]);
        }
        if (hi - lo < SPAN_BITS) {
            uint64_t bits[SPAN_BITS / 64] = {};
            for (size_t i = 0; i < n; ++i) {
                uint32_t d = ids[i] - lo;
                bits[d >> 6] |= uint64_t{1} << (d & 63);
            }
            size_t out = 0;
            for (uint32_t w = 0; w <= (hi - lo) >> 6; ++w)
                for (uint64_t b = bits[w]; b; b &= b - 1)
                    ids[out++] = lo + (w << 6) + static_cast<uint32_t>(__builtin_ctzll(b));
            return out;
        }
    }
    std::sort(ids, ids + n);
    return static_cast<size_t>(std::unique(ids, ids + n) - ids);
}

// A topic of a batch, ready for a walk without the GIL: an ASCII AMQP key to split here
// (kind 0), words the dialect's splitter made (kind 1: `count` UTF-8 words from `first` in
// the word arrays), or a topic refused before (kind 2: no ids).
struct TopicRef {
    const char* data;
    size_t size;
    uint32_t first;
    uint32_t count;
    uint32_t kind;
};

// Walk each of `n` topics: its ids, sorted and distinct, appended to `ids`, their number to
// `counts`. Calls no Python code (the caller has released the GIL and holds the guard).
inline void match_refs(Core& core, const TopicRef* refs, size_t n, const char* const* word_data,
                       const size_t* word_size, std::vector<uint32_t>& words,
                       std::vector<uint32_t>& counts, std::vector<uint32_t>& ids) {
    for (size_t k = 0; k < n; ++k) {
        const TopicRef& r = refs[k];
        if (r.kind == 2) {
            counts.push_back(0);
            continue;
        }
        size_t count;  // `words`'s size is room, not the topic's words (see split_words)
        if (r.kind == 0) {
            count = core.split_words(r.data, r.size, '.', words);
        } else {
            count = core.word_ids(word_data + r.first, word_size + r.first, r.count, words);
        }
        Ends ends = core.walk(words.data(), count, nullptr);
        size_t start = ids.size();
        for (size_t j = 0; j < ends.size; ++j) {
            if (ends.data[j] & HAS_IDS) {
                const uint32_t* p = core.end_ids(ends, j);
                ids.insert(ids.end(), p, p + core.end_count(ends, j));
            }
        }
        ids.resize(start + sort_ids(ids.data() + start, ids.size() - start));
        counts.push_back(static_cast<uint32_t>(ids.size() - start));
    }
}

}  // namespace topicstore
