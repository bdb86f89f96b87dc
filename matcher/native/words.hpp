// The word table: topic and pattern words interned to 32-bit ids in an open-addressing
// table of hashes, so that a step of the walk compares integers. A word of fewer than 8
// bytes is found by its packed bytes alone, without reading its text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core.hpp"

namespace topicstore {

// The ids (word_id) of `n` words already split (UTF-8 `data[k]` of `sizes[k]` bytes) into
// `out`, whose size is room as split_words' is; returns n.
inline size_t Core::word_ids(const char* const* data, const size_t* sizes, size_t n,
                             std::vector<uint32_t>& out) const {
    if (out.size() < n) out.resize(n);
    for (size_t k = 0; k < n; ++k) out[k] = word_id(data[k], static_cast<uint32_t>(sizes[k]));
    return n;
}

// The word ids of `data[:n]` split on `sep` (every separator splits, empty words
// included) into `out`, and their number. `out`'s size is room, not that number: it
// only grows (to n + 1, the most words n bytes hold), so the loop writes through a
// pointer. One byte loop both finds the separators and packs each short word (as
// pack_short): topic words are a few bytes, not worth a library call or a second pass
// each.
inline size_t Core::split_words(const char* data, size_t n, char sep,
                                std::vector<uint32_t>& out) const {
    if (out.size() < n + 1) out.resize(n + 1);
    uint32_t* const ids = out.data();
    size_t count = 0, start = 0;
    uint64_t packed = 0;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char c = static_cast<unsigned char>(data[i]);
        if (c == static_cast<unsigned char>(sep)) {
            ids[count++] = word_at(data + start, i - start, packed);
            start = i + 1;
            packed = 0;
        } else {
            // Bytes past the 8th wrap around: such a word is looked up by its text.
            packed |= static_cast<uint64_t>(c) << (8 * ((i - start) & 7));
        }
    }
    ids[count++] = word_at(data + start, n - start, packed);
    return count;
}

// word_id of a word of n < 8 bytes, given packed (pack_short).
inline uint32_t Core::short_word_id(uint64_t packed, uint32_t n) const {
    const uint64_t key = short_key_of(packed, n);
    const uint32_t h32 = static_cast<uint32_t>(mix64(hash_seed(n) ^ packed) >> 32);  // hash_bytes
    const WordSlot& s = wordslots_[wordslots_.find(
        h32, [h32, key](const WordSlot& s) { return s.hash32 == h32 && s.key == key; })];
    return WordKeys::free(s) ? UNKNOWN_WORD : s.id_plus1 - 1;
}

// word_id of a word of n >= 8 bytes (its slot's key is 0: the text is compared).
inline uint32_t Core::long_word_id(const char* p, uint32_t n) const {
    const uint32_t h32 = static_cast<uint32_t>(hash_bytes(p, n) >> 32);
    const WordSlot& s = wordslots_[wordslots_.find(h32, [&](const WordSlot& s) {
        if (s.hash32 != h32 || s.key != 0) return false;
        const std::string& w = words_[s.id_plus1 - 1].text;
        return w.size() == n && same_bytes(w.data(), p, n);
    })];
    return WordKeys::free(s) ? UNKNOWN_WORD : s.id_plus1 - 1;
}

// A word of split_words: packed holds its bytes when it has fewer than 8.
inline uint32_t Core::word_at(const char* p, size_t n, uint64_t packed) const {
    return n < 8 ? short_word_id(packed, static_cast<uint32_t>(n))
                 : long_word_id(p, static_cast<uint32_t>(n));
}

inline uint32_t Core::intern(const char* p, uint32_t size) {
    uint32_t w = word_id(p, size);
    if (w != UNKNOWN_WORD) return w;
    if (wordslots_.full()) wordslots_.grow();
    if (!free_words_.empty()) {
        w = free_words_.back();
        free_words_.pop_back();
    } else {
        w = static_cast<uint32_t>(words_.size());
        words_.emplace_back();
    }
    WordEntry& e = words_[w];
    e.text.assign(p, size);
    e.hash = hash_bytes(p, size);
    e.refs = 0;
    wordslots_.place(
        WordSlot{static_cast<uint32_t>(e.hash >> 32), w + 1, short_key(e.text.data(), size)});
    return w;
}

// A word's last edge is gone: forget it.
inline void Core::release_word(uint32_t w) {
    if (--words_[w].refs != 0) return;
    wordslots_.erase(wordslots_.find(static_cast<uint32_t>(words_[w].hash >> 32),
                                     [w](const WordSlot& s) { return s.id_plus1 == w + 1; }));
    std::string().swap(words_[w].text);
    free_words_.push_back(w);
}

}  // namespace topicstore
