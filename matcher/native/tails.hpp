// Tail leaves: a chain of literal words that ends a pattern and has no '#' above it is one
// node holding the rest of the words (tails_). Most nodes of a large trie would otherwise
// be such single-child chains; the walk compares the topic's remaining words at once.
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

// -- tail leaves ---------------------------------------------------------------------------

// A walk reached tail leaf `ref` with `pos` words consumed. Comparing its tail there
// would put two dependent cache misses (the leaf, then its words) on the walk's path,
// for a node that leads nowhere else: the leaf's line is asked for now and the
// comparison waits for the end of the walk (tails_matched).
inline void Core::reach_tail(uint32_t ref, uint32_t pos) {
    __builtin_prefetch(&nodes_[ref & INDEX]);
    tail_ends_.emplace_back(ref, pos);
}

// Write after `out[:count]` the tail leaves reached whose tail is the rest of the topic
// (the caller made room for all of them), after asking for all their tails' lines at
// once; returns the new count.
inline size_t Core::tails_matched(const uint32_t* words, size_t n, uint32_t* out,
                                  size_t count) const {
    if (tail_ends_.size() > 1)
        for (const auto& t : tail_ends_)
            __builtin_prefetch(tails_.data() + nodes_[t.first & INDEX].tail_at());
    for (const auto& t : tail_ends_)
        if (tail_matches(t.first, words + t.second, n - t.second)) out[count++] = t.first;
    return count;
}

// Whether the topic's words after the one that reached tail leaf `ref` are its tail:
// then it is an end node. A tail leaf has no '#' above it, so it is reached only at
// one position of a walk, from its one parent, and this check is the whole rest.
inline bool Core::tail_matches(uint32_t ref, const uint32_t* rest, size_t nrest) const {
    const uint32_t* t = tails_.data() + nodes_[ref & INDEX].tail_at();
    if (t[0] != nrest) return false;
    for (size_t k = 0; k < nrest; ++k)
        if (t[k + 1] != rest[k]) return false;
    return true;
}

// Whether the literal `tokens[:n]` are tail leaf `leaf`'s tail.
inline bool Core::same_tail(uint32_t leaf, const Token* tokens, size_t n) const {
    const uint32_t* t = tails_.data() + nodes_[leaf].tail_at();
    if (t[0] != n) return false;
    for (size_t k = 0; k < n; ++k)
        if (tokens[k].kind != 0 || word_id(tokens[k].data, tokens[k].size) != t[k + 1])
            return false;
    return true;
}

inline uint32_t Core::new_tail(const Token* tokens, size_t n) {
    size_t at = tails_.size();
    // room() said it fits and add() compacted: a write that gets here broke that.
    if (at + n + 1 > max_tail_entries_) throw std::length_error("tail arena full");
    tails_.push_back(static_cast<uint32_t>(n));
    for (size_t k = 0; k < n; ++k) {
        uint32_t w = intern(tokens[k].data, tokens[k].size);
        ++words_[w].refs;  // a word's refs: edges labelled with it and tails holding it
        tails_.push_back(w);
    }
    return static_cast<uint32_t>(at);
}

// Tail leaf `leaf` becomes a chain of ordinary nodes (a new pattern goes through or
// beside it); the leaf keeps its index (the id table points at it) at the chain's end.
inline void Core::unfold(uint32_t leaf) {
    uint32_t at = nodes_[leaf].tail_at();
    std::vector<uint32_t> words(tails_.begin() + at + 1, tails_.begin() + at + 1 + tails_[at]);
    tail_garbage_ += 1 + words.size();
    nodes_[leaf].clear_tail();
    uint32_t parent = nodes_[leaf].parent, label = nodes_[leaf].label;
    erase_edge(parent, label);
    for (uint32_t w : words) {  // each word's ref moves from the tail to an edge
        uint32_t n = new_node(parent, label);
        nodes_[n].nchildren = 1;
        insert_edge(parent, label, n);
        parent = n;
        label = w;
    }
    nodes_[leaf].parent = parent;
    nodes_[leaf].label = label;
    insert_edge(parent, label, leaf);
    compact_tails();
    sync_tuple(leaf);  // no longer a tail leaf: its reference's tags changed, not its key
}

// Tail leaf `i` is being freed: release its words and its entries.
inline void Core::drop_tail(uint32_t i) {
    uint32_t at = nodes_[i].tail_at();
    uint32_t n = tails_[at];
    for (uint32_t k = 1; k <= n; ++k) release_word(tails_[at + k]);
    tail_garbage_ += 1 + n;
    nodes_[i].clear_tail();
    compact_tails();
}

// Once unused entries fill half of tails_ (or, `force`d, when a new tail would not fit
// beside them), copy the live ones (amortized O(1) per entry freed; O(nodes) to find
// the leaves).
inline void Core::compact_tails(bool force) {
    if (!force && (tail_garbage_ <= 4096 || tail_garbage_ * 2 <= tails_.size())) return;
    std::vector<uint32_t> fresh;
    fresh.reserve(tails_.size() - tail_garbage_);
    for (Node& n : nodes_) {
        if (!n.live() || !n.is_tail()) continue;
        uint32_t at = n.tail_at();
        n.set_tail(static_cast<uint32_t>(fresh.size()));
        fresh.insert(fresh.end(), tails_.begin() + at, tails_.begin() + at + 1 + tails_[at]);
    }
    tails_.swap(fresh);
    tail_garbage_ = 0;
}

}  // namespace topicstore
